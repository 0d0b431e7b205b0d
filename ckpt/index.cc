// index.h5 reading/writing and the commit step; see index.h and omni-ckpt(5).
#include "index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cerrno>

#include <algorithm>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <map>
#include <set>

#include "bounded_map.h"
#include "fsio.h"
#include "h5.h"
#include "hash.h"
#include "ref_shard.h"

namespace omni {
namespace ckpt {

std::uint64_t rank_state_hash(const RankState &s) {
    Hasher h;
    h.update(s.rng.data(), s.rng.size());
    h.update(s.consumed.data(), s.consumed.size() * sizeof(std::int64_t));
    return h.digest();
}

namespace {
// The manifest of the open index file `f` (named `path` in messages).
Result<Manifest> read_index_from(hid_t f, const std::string &path) {
    auto version = h5::read_attr_u64(f, kVersionAttr);
    if (!version) return make_error(path + ": " + version.error());
    if (version.value() != kFormatVersion)
        return make_error(path + ": format version " + std::to_string(version.value()) +
                          " is not supported; this omni-ckpt reads version " +
                          std::to_string(kFormatVersion));
    auto text = h5::read_string_dataset(f, kManifestDataset, kMaxManifestBytes);
    if (!text) return make_error(path + ": " + text.error());
    auto m = parse_manifest(text.value());
    if (!m) return make_error(path + ": " + m.error());
    return m;
}
}  // namespace

Result<Manifest> read_index(const std::string &ckpt_dir) {
    const std::string path = fsio::join(ckpt_dir, kIndexFile);
    if (!fsio::exists(path)) return make_error(ckpt_dir + ": no " + kIndexFile + " (incomplete or not a checkpoint)");
    auto f = h5::open_file(path);
    if (!f) return make_error(f.error());
    return read_index_from(f.value().get(), path);
}

namespace {
// What identifies a file's contents without reading them: a file rewritten in place or
// replaced by another changes at least one of these.
struct FileIdentity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    std::int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
    bool operator==(const FileIdentity &o) const {
        return dev == o.dev && ino == o.ino && size == o.size && mtime_s == o.mtime_s &&
               mtime_ns == o.mtime_ns && ctime_s == o.ctime_s && ctime_ns == o.ctime_ns;
    }
};

std::optional<FileIdentity> identity_of(const std::string &path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    FileIdentity id;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    id.size = st.st_size;
    id.mtime_s = st.st_mtim.tv_sec;
    id.mtime_ns = st.st_mtim.tv_nsec;
    id.ctime_s = st.st_ctim.tv_sec;
    id.ctime_ns = st.st_ctim.tv_nsec;
    return id;
}

constexpr std::size_t kIndexCacheEntries = 8;

// What a remembered manifest and rank states hold in memory, roughly.
std::uint64_t approx_bytes(const ShardManifest &m) {
    std::uint64_t n = sizeof m + m.attempt.size() + m.rank_states.size() * sizeof(RankStateInfo);
    for (const auto &t : m.tensors) {
        n += sizeof t + t.name.size() + 8 * t.shape.size();
        for (const auto &src : t.sources)
            n += sizeof src + src.file.size() + src.dataset.size() + 8 * (src.offset.size() + src.count.size());
    }
    return n;
}

std::uint64_t approx_bytes(const ShardRecord &r) {
    std::uint64_t n = approx_bytes(r.manifest);
    for (const auto &st : r.states) n += sizeof st + st.rng.size() + 8 * st.consumed.size();
    return n;
}

// Finished shards for commit() in this process, by path. Entries are taken by the commit, or
// forgotten: a step that failed, or a rank whose commit runs in another process.
std::mutex shard_mu;
BoundedMap<std::string, std::pair<FileIdentity, ShardRecord>> remembered(4096, std::uint64_t(64) << 20);
}  // namespace

void remember_shard(const std::string &shard_path, ShardRecord shard) {
    const auto id = identity_of(shard_path);
    if (!id) return;
    const std::uint64_t bytes = approx_bytes(shard);
    std::lock_guard<std::mutex> lock(shard_mu);
    remembered.put(shard_path, {*id, std::move(shard)}, bytes);
}

Result<ShardRecord> take_shard(const std::string &shard_path) {
    std::optional<std::pair<FileIdentity, ShardRecord>> entry;
    {
        std::lock_guard<std::mutex> lock(shard_mu);
        entry = remembered.take(shard_path);
    }
    if (entry) {
        // The writer checked names, shapes and slices as they were added; a reference to a
        // base file is the one thing it took on trust, and the parser would reject a bad one.
        bool refs_ok = true;
        for (const auto &t : entry->second.manifest.tensors)
            for (const auto &s : t.sources) refs_ok = refs_ok && check_file_ref(s.file).ok();
        const auto id = identity_of(shard_path);
        if (refs_ok && id && *id == entry->first) return std::move(entry->second);
    }
    if (is_ref_shard_file_name(fsio::basename(shard_path))) {
        auto bytes = fsio::read_file(shard_path, kMaxRefShardBytes);
        if (!bytes) return make_error(bytes.error());
        auto parsed = parse_ref_shard(bytes.value());
        if (!parsed) return make_error(shard_path + ": " + parsed.error());
        return parsed;
    }
    return read_shard(shard_path);
}

namespace {
// The newest shards this process wrote, for written_shard(), by device and inode (the
// entry's identity must still match): a process writes one shard per rank it runs per
// checkpoint, and the bases of incremental checkpoints are the latest ones.
std::mutex written_mu;
BoundedMap<std::pair<dev_t, ino_t>, std::pair<FileIdentity, std::shared_ptr<const ShardManifest>>>
    written(256, std::uint64_t(64) << 20);
}  // namespace

void remember_written_shard(const std::string &path, const ShardManifest &m) {
    const auto id = identity_of(path);
    if (!id) return;
    auto shared = std::make_shared<const ShardManifest>(m);
    const std::uint64_t bytes = approx_bytes(m);
    std::lock_guard<std::mutex> lock(written_mu);
    written.put(std::make_pair(id->dev, id->ino), {*id, std::move(shared)}, bytes);
}

std::shared_ptr<const ShardManifest> written_shard(const std::string &ckpt_dir, std::uint32_t rank) {
    // Committed: the index is there (gc retires a checkpoint by removing it first).
    if (!fsio::exists(fsio::join(ckpt_dir, kIndexFile))) return nullptr;
    for (const std::string &name : {shard_file_name(rank), ref_shard_file_name(rank)}) {
        const auto id = identity_of(fsio::join(ckpt_dir, name));
        if (!id) continue;
        std::lock_guard<std::mutex> lock(written_mu);
        const auto *entry = written.find(std::make_pair(id->dev, id->ino));
        if (!entry || !(entry->first == *id)) return nullptr;
        // The file as this process left it, under the name of the rank it wrote it as.
        return entry->second->rank == rank ? entry->second : nullptr;
    }
    return nullptr;
}

Status check_index_step(const std::string &ckpt_dir, const Manifest &m) {
    const std::string real = fsio::real_path(ckpt_dir);   // ROOT/latest names its target
    const std::string name = fsio::basename(real.empty() ? ckpt_dir : real);
    const auto step = parse_step_dir_name(name);
    if (!step || *step == m.meta.step) return Status::success();
    return make_error(fsio::join(ckpt_dir, kIndexFile) + " records step " + std::to_string(m.meta.step) +
                      ", but its directory is " + name + ": expected " + step_dir_name(m.meta.step) +
                      " (copied or renamed by hand?)");
}

namespace {
// Identifies an index by its bytes: size and XXH3 of the whole file (an index is a few
// hundred bytes per slice; hashing it costs a fraction of parsing it). Timestamps and inode
// numbers would not do: a checkpoint deleted and written again under the same name within
// one timer tick can get the same inode, size and times. The manifest of a miss is read from
// those same bytes, so what is remembered is what the key says. An index that cannot be read
// or is too large to hold is read from its file, uncached.
constexpr std::uint64_t kIndexCacheMaxBytes = std::uint64_t(64) << 20;
}  // namespace

namespace {
Result<std::shared_ptr<const Manifest>> read_index_cached_unchecked(const std::string &ckpt_dir) {
    static std::mutex mu;
    using Key = std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>;
    static std::deque<std::pair<Key, std::shared_ptr<const Manifest>>> cache;   // newest first
    const std::string path = fsio::join(ckpt_dir, kIndexFile);
    auto bytes = fsio::read_file(path, kIndexCacheMaxBytes);
    if (!bytes) {
        auto m = read_index(ckpt_dir);   // reports any error, including an unreadable file
        if (!m) return make_error(m.error());
        return std::make_shared<const Manifest>(std::move(m.value()));
    }
    const std::string &b = bytes.value();
    const Key key(path, {b.size(), xxh3(b.data(), b.size())});
    {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto &e : cache)
            if (e.first == key) return e.second;
    }
    auto f = h5::open_image(b, path);
    if (!f) return make_error(f.error());
    auto m = read_index_from(f.value().get(), path);
    if (!m) return make_error(m.error());
    auto shared = std::make_shared<const Manifest>(std::move(m.value()));
    std::lock_guard<std::mutex> lock(mu);
    cache.emplace_front(key, shared);
    if (cache.size() > kIndexCacheEntries) cache.pop_back();
    return shared;
}
}  // namespace

Result<std::shared_ptr<const Manifest>> read_index_cached(const std::string &ckpt_dir) {
    auto m = read_index_cached_unchecked(ckpt_dir);
    if (!m) return m;
    // Reader::open comes through here: open_latest must fail on a step-N directory holding
    // another step's index rather than load it as step N.
    if (auto st = check_index_step(ckpt_dir, *m.value()); !st) return make_error(st.error());
    return m;
}

namespace {

// Reads a 1-D dataset of exactly `n` elements of `mem_type` into `out`. `n` comes from a
// manifest (up to 2^40 elements): nothing is allocated before the dataset is seen to have that
// extent and the storage to back it. Compressed storage is allowed (h5repack), to the ratio
// deflate can reach; a dataset of a large extent and hardly any storage (unwritten chunks of a
// hostile file) is refused rather than allocated and read as fill values.
template <typename T>
Status read_1d(hid_t file, const std::string &name, hid_t mem_type, std::uint64_t n, std::vector<T> &out) {
    h5::Handle d = h5::dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
    if (!d) return h5::fail("opening " + name);
    h5::Handle s = h5::space(H5Dget_space(d.get()));
    if (!s || H5Sget_simple_extent_ndims(s.get()) != 1 ||
        static_cast<std::uint64_t>(H5Sget_simple_extent_npoints(s.get())) != n)
        return make_error(name + ": expected " + std::to_string(n) + " elements");
    constexpr std::uint64_t kMaxRatio = 1032, kSlack = std::uint64_t(1) << 20;
    const std::uint64_t stored = H5Dget_storage_size(d.get());
    if (n > (stored * kMaxRatio + kSlack) / sizeof(T))
        return make_error(name + ": " + std::to_string(n) + " elements in " + std::to_string(stored) +
                          " bytes of storage");
    out.resize(n);
    if (n > 0 && H5Dread(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
        return h5::fail("reading " + name);
    return Status::success();
}

// One rank's state from the open `file` (named `path` in errors), of the sizes `info` gives;
// not checked against its checksum.
Result<RankState> read_rank_state_from(hid_t file, const std::string &path, const RankStateInfo &info) {
    RankState s;
    s.rank = info.rank;
    const std::string g = rank_state_group(info.rank);
    if (auto st = read_1d(file, g + "/rng", H5T_NATIVE_UINT8, info.rng_bytes, s.rng); !st)
        return make_error(path + ": rank state of rank " + std::to_string(info.rank) + ": " + st.error());
    if (auto st = read_1d(file, g + "/consumed", H5T_NATIVE_INT64, info.consumed, s.consumed); !st)
        return make_error(path + ": rank state of rank " + std::to_string(info.rank) + ": " + st.error());
    return s;
}

}  // namespace

Result<RankState> read_rank_state(const std::string &file, const RankStateInfo &info) {
    auto f = h5::open_file(file);
    if (!f) return make_error(f.error());
    auto s = read_rank_state_from(f.value().get(), file, info);
    if (!s) return make_error(s.error());
    return check_rank_state(file, info, std::move(s.value()));
}

Result<ShardRecord> read_shard(const std::string &shard_path) {
    auto f = h5::open_file(shard_path);
    if (!f) return make_error(f.error());
    auto text = h5::read_string_dataset(f.value().get(), kShardManifestDataset, kMaxManifestBytes);
    if (!text) return make_error(shard_path + ": " + text.error());
    auto m = parse_shard_manifest(text.value());
    if (!m) return make_error(shard_path + ": " + m.error());
    ShardRecord out;
    out.manifest = std::move(m.value());
    for (const RankStateInfo &info : out.manifest.rank_states) {
        auto rs = read_rank_state_from(f.value().get(), shard_path, info);
        if (!rs) return make_error(rs.error());
        out.states.push_back(std::move(rs.value()));
    }
    return out;
}

Result<RankState> check_rank_state(const std::string &file, const RankStateInfo &info, RankState s) {
    const std::uint64_t h = rank_state_hash(s);
    if (h != info.xxh3)
        return make_error(file + ": rank state of rank " + std::to_string(info.rank) +
                          ": checksum mismatch (manifest " + hex64(info.xxh3) + ", data " +
                          hex64(h) + ")");
    return s;
}

namespace {

// One virtual dataset per logical tensor, mapping each slice of the tensor to the dataset
// in its shard file, so standard HDF5 tools read /tensors/NAME as a whole.
Status write_virtual_dataset(hid_t index, const TensorInfo &t) {
    const int rank = static_cast<int>(t.shape.size());
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    h5::Handle vspace = h5::space(H5Screate_simple(rank, dims.data(), nullptr));
    h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    if (!vspace || !dcpl) return h5::fail("virtual dataset for " + t.name);
    for (const auto &s : t.sources) {
        std::vector<hsize_t> off(s.offset.begin(), s.offset.end());
        std::vector<hsize_t> cnt(s.count.begin(), s.count.end());
        if (H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(),
                                nullptr) < 0)
            return h5::fail("virtual dataset for " + t.name);
        h5::Handle sspace = h5::space(H5Screate_simple(rank, cnt.data(), nullptr));
        if (!sspace || H5Pset_virtual(dcpl.get(), vspace.get(), s.file.c_str(),
                                      s.dataset.c_str(), sspace.get()) < 0)
            return h5::fail("virtual dataset for " + t.name + " (source " + s.file + ")");
    }
    H5Sselect_all(vspace.get());
    h5::Handle type = h5::dtype_type(t.dtype);
    h5::Handle lcpl = h5::plist(H5Pcreate(H5P_LINK_CREATE));
    if (!type || !lcpl || H5Pset_create_intermediate_group(lcpl.get(), 1) < 0)
        return h5::fail("virtual dataset for " + t.name);
    h5::Handle d = h5::dataset(H5Dcreate2(index, virtual_dataset_name(t.name).c_str(), type.get(),
                                          vspace.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
    if (!d) return h5::fail("creating virtual dataset for " + t.name);
    if (auto st = h5::write_attr_string(d.get(), "omni_dtype", dtype_name(t.dtype)); !st) return st;
    return d.close("closing virtual dataset " + t.name);
}

Status write_index(const std::string &path, const Manifest &m, const std::vector<RankState> &states) {
    auto f = h5::create_file(path);
    if (!f) return make_error(f.error());
    const hid_t id = f.value().get();
    Status st = h5::write_attr_u64(id, kVersionAttr, kFormatVersion);
    if (st) st = h5::write_attr_u64(id, "step", m.meta.step);
    if (st) st = h5::write_attr_u64(id, "generation", m.meta.generation);
    if (st) st = h5::write_attr_u64(id, "world_size", m.meta.world_size);
    if (st) st = h5::write_attr_u64(id, "writers", m.writers);
    if (st) st = h5::write_string_dataset(id, kManifestDataset, manifest_to_json(m));
    for (std::size_t i = 0; st && i < m.tensors.size(); ++i) st = write_virtual_dataset(id, m.tensors[i]);
    for (std::size_t i = 0; st && i < states.size(); ++i) {
        const std::string g = rank_state_group(states[i].rank);
        st = h5::write_1d(id, g + "/rng", H5T_STD_U8LE, H5T_NATIVE_UINT8, states[i].rng.size(),
                          states[i].rng.data());
        if (st)
            st = h5::write_1d(id, g + "/consumed", H5T_STD_I64LE, H5T_NATIVE_INT64,
                              states[i].consumed.size(), states[i].consumed.data());
    }
    if (!st) {
        // Not closed as is: its flush would meet the same full disk (see h5::close_file).
        h5::discard_file(f.value());
        return make_error(path + ": " + st.error());
    }
    return h5::close_file(f.value(), "closing " + path);
}

// A source file referenced by a shard: checks that it exists (a base checkpoint's file may
// have been removed since the writer looked).
Status check_source_exists(const std::string &ckpt_dir, const std::string &file,
                           const std::string &tensor) {
    const std::string p = fsio::join(ckpt_dir, file);
    if (!fsio::exists(p))
        return make_error("tensor " + tensor + ": source file " + p + " does not exist");
    return Status::success();
}

}  // namespace

Result<std::string> commit_partial(const CommitRequest &req) {
    h5::init();
    if (req.writers == 0 || req.writers > kMaxWriters)
        return make_error("commit: writers " + std::to_string(req.writers) + ": expected 1.." +
                          std::to_string(kMaxWriters));
    if (req.meta.world_size > kMaxWriters)
        return make_error("commit: world size " + std::to_string(req.meta.world_size) +
                          ": expected 0.." + std::to_string(kMaxWriters));
    if (req.meta.unit_layout.size() > 255)
        return make_error("commit: unit layout longer than 255 bytes");
    if (!fsio::is_dir(req.partial_dir))
        return make_error("commit: " + req.partial_dir +
                          " does not exist; did every rank's ShardWriter::finish() succeed?");
    if (fsio::exists(req.final_dir))
        return make_error("commit: " + req.final_dir + " already exists");

    // The directory must hold exactly the expected shard files, each rank's HDF5 shard or
    // its reference shard: a stray shard means the writer count is wrong or something else
    // writes here.
    auto names = fsio::list_dir(req.partial_dir);
    if (!names) return make_error(names.error());
    std::set<std::string> expected;
    for (std::uint32_t r = 0; r < req.writers; ++r) {
        expected.insert(shard_file_name(r));
        expected.insert(ref_shard_file_name(r));
    }
    for (const auto &n : names.value()) {
        if (n == kIndexFile || (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) ||
            n.find(".tmp-") != std::string::npos) {
            // An index from an earlier failed commit, or a temporary file of a writer that
            // failed: neither is part of this checkpoint.
            if (auto st = fsio::remove_file(fsio::join(req.partial_dir, n)); !st)
                return make_error(st.error());
            continue;
        }
        if (!expected.count(n))
            return make_error("commit: " + fsio::join(req.partial_dir, n) +
                              " is not one of the " + std::to_string(req.writers) +
                              " expected shard files (shard-00000.h5 or shard-00000.ref, ..)");
    }

    Manifest m;
    m.meta = req.meta;
    m.writers = req.writers;
    m.created_unix = static_cast<std::uint64_t>(std::time(nullptr));
    std::map<std::string, std::size_t> by_name;
    std::set<std::string> names_seen;              // the keys of by_name
    std::map<std::string, std::string> shard_of;   // the first shard file each tensor is in
    std::vector<RankState> states;
    std::set<std::uint32_t> state_ranks;
    std::set<std::string> sources_seen;
    for (std::uint32_t r = 0; r < req.writers; ++r) {
        const std::string h5_path = fsio::join(req.partial_dir, shard_file_name(r));
        const std::string ref_path = fsio::join(req.partial_dir, ref_shard_file_name(r));
        const bool is_h5 = fsio::exists(h5_path), is_ref = fsio::exists(ref_path);
        if (is_h5 == is_ref)
            return make_error("commit: shard " + h5_path +
                              (is_h5 ? " and " + ref_shard_file_name(r) + " both exist; rank " +
                                           std::to_string(r) + " finished twice"
                                     : " is missing, and so is " + ref_shard_file_name(r) + "; rank " +
                                           std::to_string(r) + " did not finish"));
        const std::string path = is_h5 ? h5_path : ref_path;
        auto shard = take_shard(path);
        if (!shard) return make_error("commit: " + shard.error());
        const ShardManifest &s = shard.value().manifest;
        if (s.rank != r || s.step != req.meta.step || s.attempt != req.attempt)
            return make_error("commit: " + path + " belongs to rank " + std::to_string(s.rank) +
                              ", step " + std::to_string(s.step) + ", attempt '" + s.attempt +
                              "'; expected rank " + std::to_string(r) + ", step " +
                              std::to_string(req.meta.step) + ", attempt '" + req.attempt + "'");
        for (const auto &t : s.tensors) {
            // Each distinct file is looked at once (an incremental shard names the same
            // base file for most of its slices).
            if (!sources_seen.count(t.sources[0].file)) {
                if (auto st = check_source_exists(req.partial_dir, t.sources[0].file, t.name); !st)
                    return make_error("commit: " + st.error());
                sources_seen.insert(t.sources[0].file);
            }
            auto it = by_name.find(t.name);
            if (it == by_name.end()) {
                // HDF5 cannot hold both "p" and "p/q" (one would be a group and a dataset);
                // refused before any file is made, so the previous checkpoints stay as they are.
                if (const std::string other = name_path_conflict(names_seen, t.name); !other.empty())
                    return make_error("commit: tensor " + t.name + " in " + path + " conflicts with tensor " +
                                      other + " in " + shard_of.at(other) +
                                      " (a tensor name cannot be a '/'-prefix of another)");
                names_seen.insert(t.name);
                shard_of.emplace(t.name, path);
                by_name.emplace(t.name, m.tensors.size());
                m.tensors.push_back(t);
                continue;
            }
            TensorInfo &known = m.tensors[it->second];
            if (known.dtype != t.dtype || known.shape != t.shape)
                return make_error("commit: tensor " + t.name + " is " + dtype_name(t.dtype) + " " +
                                  shape_string(t.shape) + " in " + path + " but " +
                                  dtype_name(known.dtype) + " " + shape_string(known.shape) +
                                  " in shard of writer " + std::to_string(known.sources[0].writer));
            known.sources.push_back(t.sources[0]);
        }
        if (shard.value().states.size() != s.rank_states.size())   // every source of a record gives both
            return make_error("commit: " + path + ": " + std::to_string(s.rank_states.size()) +
                              " rank states in the manifest, " + std::to_string(shard.value().states.size()) + " read");
        for (std::size_t i = 0; i < s.rank_states.size(); ++i) {
            const RankStateInfo &info = s.rank_states[i];
            if (!state_ranks.insert(info.rank).second)
                return make_error("commit: rank state of rank " + std::to_string(info.rank) +
                                  " was added by more than one writer");
            auto rs = check_rank_state(path, info, std::move(shard.value().states[i]));
            if (!rs) return make_error("commit: " + rs.error());
            states.push_back(std::move(rs.value()));
            m.rank_states.push_back(info);
        }
    }
    for (const auto &t : m.tensors)
        if (auto st = check_tiling(t); !st) return make_error("commit: " + st.error());

    const std::string index = fsio::join(req.partial_dir, kIndexFile);
    if (auto st = write_index(index, m, states); !st) {
        (void)fsio::remove_file(index);   // best effort: frees space on ENOSPC
        return make_error("commit: " + st.error());
    }
    if (req.fsync) {
        if (auto st = fsio::fsync_path(index); !st) return make_error("commit: " + st.error());
        if (auto st = fsio::fsync_path(req.partial_dir); !st) return make_error("commit: " + st.error());
    }
    // The commit point: a directory rename is atomic, so a reader sees either no checkpoint
    // or a complete one.
    if (auto st = fsio::rename_path(req.partial_dir, req.final_dir); !st)
        return make_error("commit: " + st.error());
    const std::string parent = fsio::dirname(req.final_dir);
    if (req.fsync)
        if (auto st = fsio::fsync_path(parent); !st) return make_error("commit: " + st.error());
    if (!req.latest_root.empty()) {
        // To the newest committed step, which is this one unless a higher step was committed
        // first (a retried or late lower step must not move `latest` backwards).
        if (auto st = update_latest(req.latest_root); !st)
            return make_error("commit: checkpoint committed, but " + st.error());
        // Not fsynced: `latest` is a convenience for tools; loaders pick the newest complete
        // directory, so a link lost in a crash costs nothing and saves a journal commit.
    }
    return req.final_dir;
}

Result<std::string> newest_committed(const std::string &root) {
    auto names = fsio::list_dir(root);
    if (!names) return make_error(names.error());
    std::vector<std::pair<std::uint64_t, std::string>> steps;
    for (const auto &n : names.value())
        if (auto step = parse_step_dir_name(n)) steps.emplace_back(*step, n);
    std::sort(steps.begin(), steps.end());
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        const std::string dir = fsio::join(root, it->second);
        if (!fsio::is_dir(dir)) continue;
        struct stat st;
        // Only a missing index (retired by gc, or not a checkpoint) disqualifies a directory;
        // one we cannot even stat may be committed, and latest must not go below it.
        if (::stat(fsio::join(dir, kIndexFile).c_str(), &st) != 0 && errno == ENOENT) continue;
        return it->second;
    }
    return std::string();
}

Status update_latest(const std::string &root) {
    const std::string link = fsio::join(root, kLatestLink);
    // Each round either finds the link already at the newest step or replaces it and looks
    // again; a few rounds settle any number of concurrent updaters, each of which scans after
    // its own replace. The bound only stops a root committed into without pause.
    for (int round = 0; round < 8; ++round) {
        auto newest = newest_committed(root);
        if (!newest) return make_error(newest.error());
        if (newest.value().empty()) return Status::success();
        char buf[PATH_MAX];
        const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
        if (n > 0 && std::string(buf, static_cast<std::size_t>(n)) == newest.value()) return Status::success();
        if (auto st = fsio::replace_symlink(newest.value(), link); !st) return st;
    }
    return Status::success();
}

Status abandon(const std::string &root, std::uint64_t step, const std::string &attempt) {
    if (auto st = check_attempt(attempt); !st) return make_error("abandon: " + st.error());
    return fsio::remove_tree(fsio::join(root, partial_dir_name(step, attempt)));
}

Result<std::string> commit(const std::string &root, std::uint32_t writers, const Meta &meta,
                           const CommitOptions &options) {
    if (auto st = check_attempt(options.attempt); !st) return make_error("commit: " + st.error());
    CommitRequest req;
    req.partial_dir = fsio::join(root, partial_dir_name(meta.step, options.attempt));
    req.final_dir = fsio::join(root, step_dir_name(meta.step));
    req.attempt = options.attempt;
    req.writers = writers;
    req.meta = meta;
    req.latest_root = options.update_latest ? root : std::string();
    req.fsync = options.fsync;
    return commit_partial(req);
}

}  // namespace ckpt
}  // namespace omni
