// ShardWriter: one rank's shard file of a checkpoint, full or incremental.
//
// The shard is written as shard-N.h5.tmp inside the partial checkpoint directory and renamed
// to shard-N.h5 only after it is closed and fsynced, so commit() never sees a torn shard.
// The HDF5 file is created with the first slice that has to be written: a rank that writes
// none (every slice references the base) finishes with a plain shard-N.ref instead
// (ref_shard.h), which costs a fraction of an HDF5 file's creation.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "format.h"
#include "fsio.h"
#include "h5.h"
#include "hash.h"
#include "index.h"
#include "omni/ckpt_cpp.h"
#include "ref_shard.h"
#include "snapshot/write_track.h"
#include "stream.h"
#include "writer_internal.h"

namespace omni {
namespace ckpt {

namespace {

std::string real_path(const std::string &p) {
    const std::string r = fsio::real_path(p);
    return r.empty() ? p : r;
}

}  // namespace

struct ShardWriter::Impl {
    std::string dir;          // the partial checkpoint directory
    std::string final_path;   // dir/shard-N.h5
    std::string tmp_path;     // dir/shard-N.h5.tmp
    WriterOptions options;
    ShardManifest manifest;
    std::vector<RankState> states;   // written by finish(), into the HDF5 file or the .ref
    h5::Handle file;                 // created with the first slice written (ensure_file)
    fsio::Fd fd;   // tmp_path for plain writes of slice data (pwrite_hashed); -1: through HDF5
    // The base checkpoint's slices: this rank's own shard of it, or its index (shared with
    // other writers of this process), by tensor name. A slice is looked up among its
    // tensor's sources when it is added:
    // indexing every slice of every rank up front cost each writer as much as the rest of
    // opening it, for the 1/K of the entries it ever looks at.
    BaseSlices base;
    std::string base_name;   // the base's directory name, for rebasing references
    std::set<std::string> names;
    std::uint64_t written = 0, reused = 0, tracked_clean = 0;
    track::Tracker *tracker = nullptr;   // WriterOptions::track_writes where the kernel can
    bool finished = false;
    std::string failed;       // first error; the writer refuses further work after it

    Status fail(Error e) {
        if (failed.empty()) failed = e.message;
        return Status(std::move(e));
    }

    Status ensure_file() {
        if (file) return Status::success();
        auto f = h5::create_file(tmp_path);
        if (!f) return fail(make_error(f.error()));
        file = std::move(f.value());
        fd = fsio::Fd(::open(tmp_path.c_str(), O_WRONLY | O_CLOEXEC));
        return Status::success();
    }

    std::string ref_path() const { return fsio::join(dir, ref_shard_file_name(manifest.rank)); }
};

ShardWriter::ShardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShardWriter::~ShardWriter() {
    if (impl_ && !impl_->finished) {
        // The file is abandoned: its bytes are of no use. Emptied first (its space back at
        // once), then closed without writing to it: a close that flushes into a file system a
        // failed write left full fails, leaving HDF5 1.10 an open file that its exit handler
        // then crashes on (seen with ENOSPC on tmpfs), and aborting HDF5 2.2 on an assertion
        // (a dirty metadata cache at close; Debian unstable's build).
        if (impl_->file.valid()) (void)::truncate(impl_->tmp_path.c_str(), 0);
        h5::discard_file(impl_->file);
        ::unlink(impl_->tmp_path.c_str());
        ::unlink((impl_->ref_path() + ".tmp").c_str());
    }
}

std::uint64_t ShardWriter::bytes_written() const { return impl_->written; }
std::uint64_t ShardWriter::bytes_reused() const { return impl_->reused; }
std::uint64_t ShardWriter::bytes_tracked_clean() const { return impl_->tracked_clean; }

std::string write_tracking_status() {
    std::string why;
    return track::Tracker::get(&why) ? std::string() : why;
}

Result<std::unique_ptr<ShardWriter>> open_shard_writer_in(const std::string &dir,
                                                          std::uint64_t step, std::uint32_t rank,
                                                          const WriterOptions &options) {
    h5::init();
    if (auto st = check_attempt(options.attempt); !st) return make_error(st.error());
    if (rank >= kMaxWriters)
        return make_error("rank " + std::to_string(rank) + ": expected 0.." +
                          std::to_string(kMaxWriters - 1));
    auto impl = std::make_unique<ShardWriter::Impl>();
    impl->dir = dir;
    impl->options = options;
    impl->final_path = fsio::join(dir, shard_file_name(rank));
    impl->tmp_path = impl->final_path + ".tmp";
    impl->manifest.step = step;
    impl->manifest.rank = rank;
    impl->manifest.attempt = options.attempt;
    if (options.track_writes) impl->tracker = track::Tracker::get(nullptr);

    if (!options.base.empty()) {
        // The base is named by its real directory: "ROOT/latest" must not end up in a
        // reference, or the reference would follow the link to the next checkpoint.
        if (!fsio::is_dir(options.base))
            return make_error("base checkpoint " + options.base + " does not exist");
        const std::string base_real = real_path(options.base);
        // References are relative paths between sibling directories, so the base must live
        // next to the new checkpoint.
        const std::string base_parent = fsio::dirname(base_real);
        const std::string parent = real_path(fsio::dirname(dir));
        if (base_parent != parent)
            return make_error("base checkpoint " + options.base +
                              " is not in the checkpoint root " + fsio::dirname(dir) +
                              "; an incremental checkpoint must sit next to its base");
        auto bs = BaseSlices::open(base_real, rank);
        if (!bs) return make_error("base checkpoint: " + bs.error());
        impl->base_name = fsio::basename(base_real);
        impl->base = std::move(bs.value());
    }
    if (auto st = fsio::make_dirs(dir); !st) return make_error(st.error());
    return std::make_unique<ShardWriter>(std::move(impl));
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::open(const std::string &root, std::uint64_t step,
                                                       std::uint32_t rank,
                                                       const WriterOptions &options) {
    if (auto st = check_attempt(options.attempt); !st) return make_error(st.error());
    if (auto st = fsio::make_dirs(root); !st) return make_error(st.error());
    return open_shard_writer_in(fsio::join(root, partial_dir_name(step, options.attempt)), step,
                                rank, options);
}

Result<BaseSlices> BaseSlices::open(const std::string &dir, std::uint32_t rank) {
    BaseSlices b;
    b.dir_ = dir;
    b.own_ = written_shard(dir, rank);
    if (b.own_)
        for (const auto &t : b.own_->tensors) b.own_tensors_.emplace(t.name, &t);
    else if (auto st = b.read_index(); !st)
        return make_error(st.error());
    return b;
}

Status BaseSlices::read_index() {
    auto m = read_index_cached(dir_);
    if (!m) return make_error(m.error());
    index_ = std::move(m.value());
    for (const auto &t : index_->tensors) index_tensors_.emplace(t.name, &t);
    return Status::success();
}

const SourceRef *BaseSlices::search(const ByName &tensors, const std::string &name, DType dtype,
                                    const Shape &shape, const Shape &offset, const Shape &count) {
    auto it = tensors.find(name);
    if (it == tensors.end() || it->second->dtype != dtype || it->second->shape != shape) return nullptr;
    for (const auto &s : it->second->sources)
        if (s.offset == offset && s.count == count) return &s;
    return nullptr;
}

Result<const SourceRef *> BaseSlices::find(const std::string &name, DType dtype, const Shape &shape,
                                           const Shape &offset, const Shape &count) {
    if (!*this) return static_cast<const SourceRef *>(nullptr);   // no base
    if (const SourceRef *s = search(own_tensors_, name, dtype, shape, offset, count)) return s;
    if (!index_)
        if (auto st = read_index(); !st) return make_error(st.error());
    return search(index_tensors_, name, dtype, shape, offset, count);
}

std::uint64_t last_slice_hash(ShardWriter &w) {
    const auto &tensors = ShardWriterAccess::impl(w).manifest.tensors;
    return tensors.empty() ? 0 : tensors.back().sources[0].xxh3;
}

namespace {

// The checks every new slice passes; on success the name is taken, and the slice's tensor
// is returned without sources.
Result<TensorInfo> admit(ShardWriter::Impl &w, const std::string &name, DType dtype, const Shape &shape,
                         const Shape &offset, const Shape &count) {
    if (!w.failed.empty()) return make_error("shard writer failed earlier: " + w.failed);
    if (w.finished) return make_error("tensor " + name + ": shard already finished");
    if (auto st = check_tensor_name(name); !st) return make_error(st.error());
    if (auto st = check_shape(shape, "tensor " + name + ": shape"); !st) return make_error(st.error());
    if (auto st = check_slice(shape, offset, count, "tensor " + name); !st) return make_error(st.error());
    if (auto st = check_slice_bytes(dtype, shape, count, "tensor " + name); !st) return make_error(st.error());
    if (w.names.count(name))
        return make_error("tensor " + name + ": added twice to the shard of rank " +
                          std::to_string(w.manifest.rank));
    if (const std::string other = name_path_conflict(w.names, name); !other.empty())
        return make_error("tensor " + name + ": conflicts with tensor " + other + " in the shard of rank " +
                          std::to_string(w.manifest.rank) + " (a tensor name cannot be a '/'-prefix of another)");
    w.names.insert(name);
    TensorInfo t;
    t.name = name;
    t.dtype = dtype;
    t.shape = shape;
    return t;
}

// Creates the dataset of slice `name` in the shard file. Contiguous storage allocated when the
// dataset is created, never filled: the slice's bytes then have a fixed place in the file that
// HDF5 will not write, and go there with pwrite(2), outside HDF5's global lock (the Reader
// reads them back the same way). `*at` is that place, or HADDR_UNDEF: write through HDF5.
Result<h5::Handle> create_slice(ShardWriter::Impl &w, const std::string &name, DType dtype,
                                const Shape &count, std::uint64_t bytes, haddr_t *at) {
    if (auto st = w.ensure_file(); !st) return make_error(st.error());
    const int rank = static_cast<int>(count.size());
    std::vector<hsize_t> dims(count.begin(), count.end());
    h5::Handle type = h5::dtype_type(dtype);
    h5::Handle space = h5::space(H5Screate_simple(rank, dims.data(), nullptr));
    h5::Handle lcpl = h5::plist(H5Pcreate(H5P_LINK_CREATE));
    h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    if (!type || !space || !lcpl || !dcpl || H5Pset_create_intermediate_group(lcpl.get(), 1) < 0 ||
        H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS) < 0 ||
        H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) < 0 ||
        H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0)
        return make_error(w.fail(h5::fail("tensor " + name + ": " + w.tmp_path)).error());
    h5::Handle ds = h5::dataset(H5Dcreate2(w.file.get(), slice_dataset_name(name).c_str(), type.get(),
                                           space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
    if (!ds) return make_error(w.fail(h5::fail("tensor " + name + ": creating dataset in " + w.tmp_path)).error());
    *at = HADDR_UNDEF;
    if (w.fd.get() >= 0 && bytes > 0) {
        *at = H5Dget_offset(ds.get());
        if (*at == HADDR_UNDEF || H5Dget_storage_size(ds.get()) != bytes) *at = HADDR_UNDEF;
        H5Eclear2(H5E_DEFAULT);   // no offset only means: write through HDF5
    }
    return ds;
}

// Gives a slice's dataset its block checksums and closes it once its bytes are written, and
// records the slice.
// `at`: where the bytes went by pwrite (HADDR_UNDEF: through HDF5, place not recorded).
Status record_slice(ShardWriter::Impl &w, TensorInfo t, h5::Handle ds, const Shape &offset,
                    const Shape &count, const SliceDigest &digest, std::uint64_t bytes, haddr_t at) {
    // The slice goes to the device now, while the next one is hashed and written, instead of
    // all of the shard's bytes at finish()'s fsync: a full save took 0.18 s instead of 0.20 s
    // (medians of five runs each, ckpt_bench, 191 MiB on the 2-core dev VM).
    if (at != HADDR_UNDEF && w.options.fsync) fsio::start_writeback(w.fd.get(), at, bytes);
    if (auto st = write_block_hashes(ds.get(), digest.blocks); !st)
        return w.fail(make_error("tensor " + t.name + ": " + w.tmp_path + ": " + st.error()));
    if (auto st = ds.close("tensor " + t.name + ": " + w.tmp_path); !st) return w.fail(make_error(st.error()));
    SourceRef s;
    s.writer = w.manifest.rank;
    s.file = shard_file_name(w.manifest.rank);
    s.dataset = slice_dataset_name(t.name);
    s.offset = offset;
    s.count = count;
    s.xxh3 = digest.xxh3;
    if (at != HADDR_UNDEF) s.data_offset = static_cast<std::uint64_t>(at);
    t.sources.push_back(std::move(s));
    w.written += bytes;
    w.manifest.tensors.push_back(std::move(t));
    return Status::success();
}

}  // namespace

Status ShardWriter::add_tensor(const std::string &name, DType dtype, const Shape &shape,
                               const Shape &offset, const Shape &count, const void *data,
                               Change change) {
    Impl &w = *impl_;
    auto admitted = admit(w, name, dtype, shape, offset, count);
    if (!admitted) return make_error(admitted.error());
    TensorInfo &t = admitted.value();
    const std::size_t elem = dtype_size(dtype);
    const std::uint64_t bytes = element_count(count) * elem;
    // The base's slice with the same tensor, dtype, global shape and extent, referenced
    // from the new checkpoint's directory.
    std::optional<SourceRef> base;
    const auto found = w.base.find(name, dtype, shape, offset, count);
    if (!found) return w.fail(make_error("tensor " + name + ": base checkpoint: " + found.error()));
    if (const SourceRef *b = found.value()) {
        base = *b;
        base->file = rebase_file_ref(b->file, w.base_name);
        base->writer = w.manifest.rank;
    }
    auto reuse = [&] {
        t.sources.push_back(*base);
        w.reused += bytes;
        w.manifest.tensors.push_back(std::move(t));
        return Status::success();
    };
    // The caller vouches for it; verify and load still check the base's checksum.
    if (base && change == Change::unchanged) return reuse();
    if (!data) {
        w.names.erase(name);   // nothing was added
        return make_error("tensor " + name + ": data is null");
    }
    // Tracked memory is armed before it is read (hashed or written), so a store that lands
    // while it is read counts for the next checkpoint.
    track::Lookup tracked;
    if (w.tracker && bytes >= track::kMinBytes) tracked = w.tracker->arm(data, bytes);
    // Comparing with the base needs the hash before deciding; a slice that is written anyway
    // is hashed block by block as it goes out (stream.h).
    if (base && change == Change::detect) {
        std::uint64_t hash;
        if (tracked.known) {
            hash = tracked.hash;
            w.tracked_clean += bytes;
        } else {
            hash = xxh3(data, bytes);
            if (tracked.tracked) w.tracker->remember(data, bytes, hash, tracked.epoch);
        }
        if (base->xxh3 == hash) return reuse();
    }

    haddr_t at;
    auto ds = create_slice(w, name, dtype, count, bytes, &at);
    if (!ds) return make_error(ds.error());
    // Memory and file types are identical, so HDF5 writes the buffer straight through.
    h5::Handle type = h5::dtype_type(dtype);
    auto written = at != HADDR_UNDEF ? pwrite_hashed(w.fd.get(), at, bytes, data)
                                     : write_hashed(ds.value().get(), type.get(), count, elem, data);
    if (!written) return w.fail(make_error("tensor " + name + ": writing " + w.tmp_path + ": " + written.error()));
    if (tracked.tracked) w.tracker->remember(data, bytes, written.value().xxh3, tracked.epoch);
    return record_slice(w, std::move(t), std::move(ds.value()), offset, count, written.value(), bytes, at);
}

Status add_tensor_from(ShardWriter &sw, const std::string &name, DType dtype, const Shape &shape,
                       const Shape &offset, const Shape &count,
                       const std::function<Status(const Box &, char *)> &fill) {
    ShardWriter::Impl &w = ShardWriterAccess::impl(sw);
    auto admitted = admit(w, name, dtype, shape, offset, count);
    if (!admitted) return make_error(admitted.error());
    const std::size_t elem = dtype_size(dtype);
    const std::uint64_t bytes = element_count(count) * elem;
    haddr_t at;
    auto ds = create_slice(w, name, dtype, count, bytes, &at);
    if (!ds) return make_error(ds.error());
    h5::Handle type = h5::dtype_type(dtype);
    std::vector<char> block;
    bool source_failed = false;
    auto written = write_hashed_from(ds.value().get(), type.get(), at != HADDR_UNDEF ? w.fd.get() : -1, at, count,
                                     elem, block, [&](const Box &b, char *dst) {
                                         Status st = fill(b, dst);
                                         source_failed = !st;
                                         return st;
                                     });
    // The shard is given up either way; a failure of the source says what it is itself.
    if (!written)
        return w.fail(make_error(source_failed ? written.error()
                                               : "tensor " + name + ": writing " + w.tmp_path + ": " + written.error()));
    return record_slice(w, std::move(admitted.value()), std::move(ds.value()), offset, count, written.value(), bytes, at);
}

void set_track_writes(ShardWriter &w, bool on) {
    ShardWriter::Impl &impl = ShardWriterAccess::impl(w);
    impl.options.track_writes = on;
    impl.tracker = on ? track::Tracker::get(nullptr) : nullptr;
}

Status ShardWriter::add_rank_state(const RankState &state) {
    Impl &w = *impl_;
    if (!w.failed.empty()) return make_error("shard writer failed earlier: " + w.failed);
    if (w.finished) return make_error("rank state: shard already finished");
    if (state.rank >= kMaxWriters)
        return make_error("rank state: rank " + std::to_string(state.rank) + " out of range");
    for (const auto &r : w.manifest.rank_states)
        if (r.rank == state.rank)
            return make_error("rank state of rank " + std::to_string(state.rank) + " added twice");
    RankStateInfo info;
    info.rank = state.rank;
    info.rng_bytes = state.rng.size();
    info.consumed = state.consumed.size();
    info.xxh3 = rank_state_hash(state);
    w.manifest.rank_states.push_back(info);
    // Kept until finish(): only then is it known whether this rank's shard is an HDF5 file.
    w.states.push_back(state);
    return Status::success();
}

namespace {

// finish() of a writer that wrote no slice: shard-N.ref, renamed into place like an HDF5
// shard and, holding no tensor data, not fsynced (see finish()).
Status finish_ref(ShardWriter::Impl &w) {
    const std::string path = w.ref_path(), tmp = path + ".tmp";
    if (auto st = fsio::write_file(tmp, encode_ref_shard(w.manifest, w.states)); !st) {
        (void)fsio::remove_file(tmp);   // best effort: frees space on ENOSPC
        return w.fail(make_error(st.error()));
    }
    if (auto st = fsio::rename_path(tmp, path); !st) return w.fail(make_error(st.error()));
    w.finished = true;
    remember_shard(path, ShardRecord{w.manifest, std::move(w.states)});
    remember_written_shard(path, w.manifest);
    return Status::success();
}

}  // namespace

Status ShardWriter::finish() {
    Impl &w = *impl_;
    if (!w.failed.empty()) return make_error("shard writer failed earlier: " + w.failed);
    if (w.finished) return Status::success();
    if (!w.file) return finish_ref(w);
    Status st = h5::write_attr_u64(w.file.get(), kVersionAttr, kFormatVersion);
    for (std::size_t i = 0; st && i < w.states.size(); ++i) {
        const RankState &rs = w.states[i];
        const std::string g = rank_state_group(rs.rank);
        st = h5::write_1d(w.file.get(), g + "/rng", H5T_STD_U8LE, H5T_NATIVE_UINT8, rs.rng.size(),
                          rs.rng.data());
        if (st)
            st = h5::write_1d(w.file.get(), g + "/consumed", H5T_STD_I64LE, H5T_NATIVE_INT64,
                              rs.consumed.size(), rs.consumed.data());
    }
    if (st)
        st = h5::write_string_dataset(w.file.get(), kShardManifestDataset,
                                      shard_manifest_to_json(w.manifest));
    if (!st) return w.fail(make_error(w.tmp_path + ": " + st.error()));
    // Closing flushes HDF5's metadata: a full disk often surfaces here, not at H5Dwrite
    // (close_file leaves a file it could not flush to the destructor's discard).
    if (auto c = h5::close_file(w.file, w.tmp_path); !c) return w.fail(make_error(c.error()));
    w.fd = fsio::Fd();
    // Only a shard that holds tensor data is fsynced. One that wrote none (an incremental
    // rank whose slices all reference the base: a .ref, finish_ref) is read once, by
    // commit(), which copies its manifest and rank states into index.h5 and fsyncs that;
    // after the commit nothing reads it (no source names it, rank states are read from the
    // index), so a crash that loses or truncates it loses nothing. In an incremental
    // checkpoint where few ranks changed anything this saves most of the checkpoint's fsyncs.
    if (w.options.fsync && w.written > 0)
        if (auto s = fsio::fsync_path(w.tmp_path); !s) return w.fail(make_error(s.error()));
    // No fsync of the directory here: the new name only has to be durable once the
    // checkpoint is committed, and commit() fsyncs the directory once for all shards before
    // its rename, instead of once per rank.
    if (auto s = fsio::rename_path(w.tmp_path, w.final_path); !s)
        return w.fail(make_error(s.error()));
    w.finished = true;
    // For commit() in this process: it need not open the shard again to learn what it holds
    // or to read its rank states back.
    remember_written_shard(w.final_path, w.manifest);
    remember_shard(w.final_path, ShardRecord{w.manifest, std::move(w.states)});
    return Status::success();
}

}  // namespace ckpt
}  // namespace omni
