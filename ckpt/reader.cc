// Reader: loads any slice of any logical tensor of a committed checkpoint (resharding), and
// verify(), which checks every source of a checkpoint.
//
// The reader goes to the shard files directly rather than through the index's virtual
// datasets: a virtual dataset silently returns fill values for a missing source, and reading
// the sources ourselves lets every slice be checked against its checksum. With checksums, a
// slice is read where the manifest says its bytes are (data_offset) and HDF5 is opened only
// for what needs it (read_source).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <list>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "box.h"
#include "format.h"
#include "fsio.h"
#include "h5.h"
#include "hash.h"
#include "index.h"
#include "omni/ckpt_cpp.h"
#include "snapshot/cow.h"
#include "stream.h"

namespace omni {
namespace ckpt {

using fsio::Fd;

namespace {

// An open shard file: a descriptor of our own for its raw data (see raw_offset below) with
// the file's size, to bound every read by it, and the HDF5 handle for its metadata, opened
// only when something needs it (FileCache::h5): slices whose place the manifest records are
// read without it.
struct OpenFile {
    Fd fd;
    std::uint64_t size = 0;
    h5::Handle h5;
    bool h5_raw = false;   // HDF5's dataset addresses are offsets in the file (no user block)
};

// Open shard files, most recently used first; bounded so a reshard over thousands of shards
// does not run out of descriptors.
class FileCache {
public:
    explicit FileCache(std::size_t cap) : cap_(cap) {}
    Result<OpenFile *> get(const std::string &path) {
        auto it = map_.find(path);
        if (it != map_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            return &it->second->second;
        }
        OpenFile of;
        of.fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        struct stat st;
        if (of.fd.get() < 0 || ::fstat(of.fd.get(), &st) != 0)
            return make_error("cannot open " + path + ": " + std::strerror(errno));
        of.size = static_cast<std::uint64_t>(st.st_size);
        // Slices are read mostly in file order: a larger readahead window.
        (void)::posix_fadvise(of.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
        lru_.emplace_front(path, std::move(of));
        map_[path] = lru_.begin();
        if (lru_.size() > cap_) {
            map_.erase(lru_.back().first);
            lru_.pop_back();
        }
        return &lru_.front().second;
    }
    // The file's HDF5 handle, opened on the first call.
    static Result<hid_t> h5(OpenFile &f, const std::string &path) {
        if (f.h5) return f.h5.get();
        auto h = h5::open_file(path);
        if (!h) return make_error(h.error());
        f.h5 = std::move(h.value());
        // Dataset addresses are relative to the end of a user block; our files have none,
        // and a file that has one is simply read through HDF5.
        h5::Handle fcpl = h5::plist(H5Fget_create_plist(f.h5.get()));
        hsize_t userblock = 1;
        f.h5_raw = fcpl && H5Pget_userblock(fcpl.get(), &userblock) >= 0 && userblock == 0;
        H5Eclear2(H5E_DEFAULT);
        return f.h5.get();
    }

private:
    std::size_t cap_;
    std::list<std::pair<std::string, OpenFile>> lru_;
    std::unordered_map<std::string, decltype(lru_)::iterator> map_;
};

// Where a source dataset's bytes lie in its file, when they can be read with plain pread:
// contiguous layout, no filters, no external storage, allocated, exactly `bytes` long and
// inside the file. This is the layout every writer of ours produces; anything else (a file
// rewritten by another tool, say) returns nothing and is read through H5Dread.
//
// Why bypass H5Dread for the bytes: Debian's HDF5 is built thread-safe, which means one
// global lock around every call, I/O included. With H5Dread, ranks loading concurrently in
// one process wait for each other's disk reads; with pread they overlap, as raw reads do.
// The memory type equals the file type (h5.h), so HDF5 would do the same single read.
std::optional<std::uint64_t> raw_offset(hid_t d, const OpenFile &f, std::uint64_t bytes) {
    if (!f.h5_raw) return std::nullopt;
    std::optional<std::uint64_t> out;
    h5::Handle dcpl = h5::plist(H5Dget_create_plist(d));
    if (dcpl && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl.get()) == 0 &&
        H5Pget_external_count(dcpl.get()) == 0) {
        const haddr_t off = H5Dget_offset(d);
        if (off != HADDR_UNDEF && H5Dget_storage_size(d) == bytes && off <= f.size &&
            bytes <= f.size - off)
            out = static_cast<std::uint64_t>(off);
    }
    H5Eclear2(H5E_DEFAULT);   // a failed query only means: read through HDF5
    return out;
}

// Writes every page of [p, p + n) from user mode, leaving the bytes as they are.
void touch_pages(char *p, std::uint64_t n) {
    const std::uintptr_t ps = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + n;
    for (std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p); a < end; a = (a & ~(ps - 1)) + ps) {
        volatile char *q = reinterpret_cast<char *>(a);
        *q = *q;
    }
}

// pread of exactly n bytes at `off`; a short file is an error (raw_offset checked the size,
// but the file may have been truncated since).
Status pread_full(int fd, char *dst, std::uint64_t n, std::uint64_t off, const std::string &path) {
    while (n > 0) {
        const ssize_t got = ::pread(fd, dst, static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30)),
                                    static_cast<off_t>(off));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return make_error("reading " + path + ": " + std::strerror(errno));
        if (got == 0) return make_error("reading " + path + ": unexpected end of file");
        dst += got;
        off += static_cast<std::uint64_t>(got);
        n -= static_cast<std::uint64_t>(got);
    }
    return Status::success();
}

// pread in cache-sized blocks, each hashed right after it lands (stream.h), by a Hasher or
// a BlockHasher.
template <typename H>
Status pread_hashed(int fd, char *dst, std::uint64_t n, std::uint64_t off, H &h, const std::string &path) {
    for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t b = std::min<std::uint64_t>(kStreamBlockBytes, n - done);
        if (auto st = pread_full(fd, dst + done, b, off + done, path); !st) return st;
        h.update(dst + done, b);
        done += b;
    }
    return Status::success();
}

// pread_hashed of `n` bytes nobody needs, each block into the same `block` (at most
// kStreamBlockBytes of it), so memory does not grow with the slice.
template <typename H>
Status pread_hashed_discard(int fd, std::vector<char> &block, std::uint64_t n, std::uint64_t off, H &h,
                            const std::string &path) {
    block.resize(std::min<std::uint64_t>(n, kStreamBlockBytes));
    for (std::uint64_t done = 0; done < n; done += block.size())
        if (auto st = pread_hashed(fd, block.data(), std::min<std::uint64_t>(block.size(), n - done), off + done, h, path); !st)
            return st;
    return Status::success();
}

// A slice's block checksums as a Reader uses them (blocks.h).
struct BlockState {
    BlockHashes hashes;      // empty: none, or not usable; the whole slice is hashed instead
    std::vector<bool> ok;    // blocks already read and found matching
};

// What a Reader's scratch block holds after a block-checked read: the checked bytes
// [lo, hi) of slice `key` after the part that read wanted, which the next read of that slice
// (the next block of rows of a merge) starts with. Empty key: nothing.
struct ScratchTail {
    std::string key;
    std::uint64_t lo = 0, hi = 0;
};

static_assert(kLargeBlockBytes <= kStreamBlockBytes, "the checked tail of a block must fit the scratch block");

// Reads the bytes [pre, pre + n) of a slice stored contiguously at file offset `raw` into
// `dst`, checking the blocks they touch against their block checksums: all of each block
// touched is read, the part outside the range through `scratch`, except for blocks at
// either end checked by an earlier read (a merge reads a slice a block of rows at a time),
// of which only the part wanted is read. Reads are of at most kStreamBlockBytes, each
// hashed while in the cache. True when every block matched; false when one did not (the
// caller then hashes the whole slice against the manifest, which tells a damaged block
// from a damaged attribute). An I/O error is an error.
Result<bool> pread_block_checked(int fd, std::uint64_t raw, std::uint64_t src_bytes, std::uint64_t pre,
                                 std::uint64_t n, char *dst, BlockState &b, std::vector<char> &scratch,
                                 ScratchTail &tail, const std::string &key, const std::string &path,
                                 std::uint64_t &bytes_read) {
    const std::uint64_t bb = b.hashes.block_bytes, end = pre + n;
    if (tail.key == key && tail.lo <= pre && pre < tail.hi) {   // checked, and still in scratch
        const std::uint64_t take = std::min(end, tail.hi) - pre;
        std::memcpy(dst, scratch.data() + (pre - tail.lo), static_cast<std::size_t>(take));
        dst += take;
        pre += take;
        if (pre == end) return true;
    }
    tail.key.clear();
    std::uint64_t j0 = pre / bb, j1 = (end - 1) / bb;   // the blocks touched, to check
    while (j0 <= j1 && b.ok[j0]) ++j0;
    while (j1 >= j0 && b.ok[j1]) --j1;   // stops at j0 at the latest: b.ok[j0] is false
    auto plain = [&](std::uint64_t a, std::uint64_t z) -> Status {   // wanted, not to check
        if (a >= z) return Status::success();
        bytes_read += z - a;
        return pread_full(fd, dst + (a - pre), z - a, raw + a, path);
    };
    if (j0 > j1) {
        if (auto st = plain(pre, end); !st) return make_error(st.error());
        return true;
    }
    const std::uint64_t lo = j0 * bb, hi = std::min((j1 + 1) * bb, src_bytes);   // to check
    const std::uint64_t a = std::max(lo, pre), z = std::min(hi, end);            // both
    BlockHasher h(bb, false);   // from lo, a block boundary; the blocks are what is compared
    Status st = plain(pre, lo);
    if (st) st = pread_hashed_discard(fd, scratch, a - lo, raw + lo, h, path);
    if (st) st = pread_hashed(fd, dst + (a - pre), z - a, raw + a, h, path);
    if (st) st = pread_hashed_discard(fd, scratch, hi - z, raw + z, h, path);
    if (st) st = plain(hi, end);
    if (!st) return make_error(st.error());
    bytes_read += hi - lo;
    const std::vector<std::uint64_t> got = h.blocks();
    if (!std::equal(got.begin(), got.end(), b.hashes.xxh3.begin() + static_cast<std::ptrdiff_t>(j0))) return false;
    std::fill(b.ok.begin() + static_cast<std::ptrdiff_t>(j0), b.ok.begin() + static_cast<std::ptrdiff_t>(j1 + 1), true);
    if (hi > z && hi - z <= scratch.size()) tail = {key, z, hi};   // read in one piece: all there
    return true;
}

// Opens a source slice's dataset and checks it matches what the manifest says. `first`: the
// first open of it by this reader, which also checks a chunked dataset's chunks and gives it
// the chunk cache for reading it in blocks (streaming_access): the first read hashes the
// whole slice, later reads only take their part in one H5Dread, and counting the chunks
// costs a few percent of reading them (100000 chunks: 12-55 ms). Errors say what is wrong
// with the dataset; the caller names the tensor and the file.
Result<h5::Handle> open_source(hid_t file, const TensorInfo &t, const SourceRef &s, bool first) {
    h5::Handle d = h5::dataset(H5Dopen2(file, s.dataset.c_str(), H5P_DEFAULT));
    if (!d) return h5::fail("dataset " + s.dataset);
    h5::Handle sp = h5::space(H5Dget_space(d.get()));
    const int n = sp ? H5Sget_simple_extent_ndims(sp.get()) : -1;
    std::vector<hsize_t> dims(kMaxRank);
    if (n != static_cast<int>(s.count.size()) ||
        H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr) != n ||
        !std::equal(s.count.begin(), s.count.end(), dims.begin()))
        return make_error("dataset " + s.dataset + " does not have the shape " + shape_string(s.count) +
                          " the manifest records");
    h5::Handle ft = h5::type(H5Dget_type(d.get()));
    h5::Handle want = h5::dtype_type(t.dtype);
    if (!ft || !want || H5Tequal(ft.get(), want.get()) <= 0)
        return make_error("dataset " + s.dataset + " is not of type " + dtype_name(t.dtype));
    if (!first) return d;
    auto access = streaming_access(d.get(), s.count, dtype_size(t.dtype));
    if (!access) return make_error("dataset " + s.dataset + ": " + access.error());
    if (access.value()) {
        d.reset();   // HDF5 keeps the first open's chunk cache while the dataset is open
        d = h5::dataset(H5Dopen2(file, s.dataset.c_str(), access.value().get()));
        if (!d) return h5::fail("dataset " + s.dataset);
    }
    return d;
}

// Hashes a whole source dataset through one block of `buf`, in blocks of block_bytes (0:
// the whole only). Errors as open_source's.
Result<SliceDigest> hash_source(hid_t d, const TensorInfo &t, const SourceRef &s, std::uint64_t block_bytes,
                                std::vector<char> &buf, const std::function<void(std::uint64_t)> &on_bytes) {
    h5::Handle type = h5::dtype_type(t.dtype);
    auto h = read_hashed_blocks(d, type.get(), s.count, dtype_size(t.dtype), block_bytes, buf,
                                [&](const Box &b, const char *) {
                                    if (on_bytes) on_bytes(element_count(b.count) * dtype_size(t.dtype));
                                });
    if (!h) return make_error("reading dataset " + s.dataset + ": " + h.error());
    return h;
}

std::string checksum_problem(std::uint64_t want, std::uint64_t got) {
    return "checksum mismatch (manifest " + hex64(want) + ", data " + hex64(got) + ")";
}

// The blocks of `want` (a slice's attributes) whose checksum `got` (of its data, in the same
// blocks) contradicts: "" when none or when it has none.
std::string block_problem(const BlockHashes &want, const BlockHashes &got, std::uint64_t slice_bytes) {
    std::vector<std::size_t> bad;
    for (std::size_t j = 0; j < want.xxh3.size() && j < got.xxh3.size(); ++j)
        if (want.xxh3[j] != got.xxh3[j]) bad.push_back(j);
    if (bad.empty()) return "";
    const std::uint64_t lo = bad[0] * want.block_bytes, hi = std::min(lo + want.block_bytes, slice_bytes);
    return "block checksum mismatch in " + std::to_string(bad.size()) + " of its " + std::to_string(want.xxh3.size()) +
           " blocks (attribute " + kBlockHashesAttr + "), the first block " + std::to_string(bad[0]) + ", bytes " +
           std::to_string(lo) + ".." + std::to_string(hi - 1) + " (attribute " + hex64(want.xxh3[bad[0]]) + ", data " +
           hex64(got.xxh3[bad[0]]) + ")";
}

// ---- verify: the index's own datasets --------------------------------------------------

// How long the child that reads the index may go without finishing one virtual dataset or
// rank state (run_isolated's idle limit): a few milliseconds each normally, so a limit per
// item scales with the index and still ends a hang (HDF5 1.10 loops forever on some flipped
// bytes of the global heap) in bounded time.
constexpr int kIndexItemLimitMs = 30000;

// Where mapping `i` of the virtual dataset `dcpl` of tensor `t` puts its source, when its
// virtual selection is one box inside the tensor's shape; else what is wrong with it.
Result<Box> mapped_box(hid_t dcpl, std::size_t i, const TensorInfo &t) {
    h5::Handle vs = h5::space(H5Pget_virtual_vspace(dcpl, i));
    if (!vs) return h5::fail("its virtual selection");
    const int n = H5Sget_simple_extent_ndims(vs.get());
    std::vector<hsize_t> dims(kMaxRank);
    if (n != static_cast<int>(t.shape.size()) || H5Sget_simple_extent_dims(vs.get(), dims.data(), nullptr) != n ||
        !std::equal(t.shape.begin(), t.shape.end(), dims.begin()))
        return make_error("its virtual extent is not the tensor's shape " + shape_string(t.shape));
    std::vector<hsize_t> lo(n), hi(n);
    const hssize_t points = H5Sget_select_npoints(vs.get());
    if (points <= 0 || H5Sget_select_bounds(vs.get(), lo.data(), hi.data()) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return make_error("it selects nothing in the tensor");
    }
    Box b;
    for (int d = 0; d < n; ++d) {
        b.offset.push_back(lo[d]);
        b.count.push_back(hi[d] - lo[d] + 1);
    }
    // A selection has at most as many points as its bounding box; as many means it is the box.
    if (static_cast<std::uint64_t>(points) != element_count(b.count))
        return make_error("it selects " + std::to_string(points) + " elements of the box at offset " +
                          shape_string(b.offset) + " count " + shape_string(b.count) + ", not one whole box");
    return b;
}

// Whether mapping `i` reads the whole source dataset: its source selection is "all", as
// every index writer writes it. (The file stores no extent with such a selection; HDF5 takes
// the source dataset's own, whose shape verify checks against the manifest's count.)
Status check_source_space(hid_t dcpl, std::size_t i) {
    h5::Handle ss = h5::space(H5Pget_virtual_srcspace(dcpl, i));
    if (!ss) return h5::fail("its source selection");
    if (H5Sget_select_type(ss.get()) != H5S_SEL_ALL) {
        H5Eclear2(H5E_DEFAULT);
        return make_error("it reads a selection of the source dataset, not all of it");
    }
    return Status::success();
}

// The problems of tensor `t`'s virtual dataset in the open index: it must map each source of
// the manifest, whole, to where the manifest places it, and nothing else; else h5py users
// read other bytes than the loader (which reads through the manifest).
std::vector<std::string> virtual_dataset_problems(hid_t idx, const TensorInfo &t) {
    const std::string name = virtual_dataset_name(t.name);
    h5::Handle d = h5::dataset(H5Dopen2(idx, name.c_str(), H5P_DEFAULT));
    h5::Handle dcpl = d ? h5::plist(H5Dget_create_plist(d.get())) : h5::Handle();
    std::size_t n = 0;
    if (!dcpl || H5Pget_layout(dcpl.get()) != H5D_VIRTUAL || H5Pget_virtual_count(dcpl.get(), &n) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return {"no virtual dataset " + name};
    }
    auto where = [](const Shape &off, const Shape &cnt) {
        return "offset " + shape_string(off) + " count " + shape_string(cnt);
    };
    std::vector<std::string> out;
    std::vector<bool> mapped(t.sources.size(), false);
    for (std::size_t i = 0; i < n; ++i) {
        char file[1024] = {0}, dset[1024] = {0};
        if (H5Pget_virtual_filename(dcpl.get(), i, file, sizeof file) < 0 ||
            H5Pget_virtual_dsetname(dcpl.get(), i, dset, sizeof dset) < 0) {
            H5Eclear2(H5E_DEFAULT);
            out.push_back(name + ": mapping " + std::to_string(i) + " names no source");
            continue;
        }
        const std::string src = std::string(file) + " " + dset;
        auto box = mapped_box(dcpl.get(), i, t);
        // The manifest's source of this file and dataset, preferring one not yet matched
        // that is at the same place.
        std::size_t match = t.sources.size();
        for (std::size_t k = 0; k < t.sources.size(); ++k) {
            const SourceRef &s = t.sources[k];
            if (mapped[k] || s.file != file || s.dataset != dset) continue;
            if (match == t.sources.size()) match = k;
            if (box && box.value().offset == s.offset && box.value().count == s.count) {
                match = k;
                break;
            }
        }
        if (match == t.sources.size()) {
            out.push_back(name + " maps " + src + ", which is not a source of the tensor in the manifest");
            continue;
        }
        mapped[match] = true;
        const SourceRef &s = t.sources[match];
        if (!box) {
            out.push_back(name + ": the mapping of " + src + " is wrong: " + box.error());
            continue;
        }
        if (box.value().offset != s.offset || box.value().count != s.count)
            out.push_back(name + " maps " + src + " to " + where(box.value().offset, box.value().count) +
                          "; the manifest places it at " + where(s.offset, s.count));
        else if (auto st = check_source_space(dcpl.get(), i); !st)
            out.push_back(name + ": the mapping of " + src + " is wrong: " + st.error());
    }
    for (std::size_t k = 0; k < t.sources.size(); ++k)
        if (!mapped[k])
            out.push_back(name + " does not map the source " + t.sources[k].file + " " + t.sources[k].dataset +
                          " (" + where(t.sources[k].offset, t.sources[k].count) + ")");
    return out;
}

// What the child of check_index() tells its parent, one record at a time: 'T' (tensor, what)
// before each item it reads, so a crash or hang is pinned on that item; 'I' (tensor,
// problem) for each problem; 'E' when it is done.
void put_field(std::string &rec, const std::string &s) {
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(s.size(), 1u << 20));
    rec.append(reinterpret_cast<const char *>(&n), sizeof n);
    rec.append(s, 0, n);
}

void send_record(int fd, char type, const std::string &a = {}, const std::string &b = {}) {
    std::string rec(1, type);
    if (type != 'E') {
        put_field(rec, a);
        put_field(rec, b);
    }
    for (std::size_t done = 0; done < rec.size();) {
        const ssize_t w = ::write(fd, rec.data() + done, rec.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) ::_exit(4);   // the parent is gone or stopped listening
        done += static_cast<std::size_t>(w);
    }
}

// Checks the index's virtual datasets and rank states against the manifest, in a child
// process (h5::run_isolated): HDF5 1.10 reads the virtual datasets' mappings from the file's
// global heap on trust, and a flipped byte there crashes it (buffer overflow, SIGSEGV) or
// makes it loop forever. The parent turns a child that dies or hangs into an issue naming
// the item it was reading and the index file, so verify diagnoses the corruption instead
// of dying of it. Loading never opens the virtual datasets.
void check_index(const Manifest &man, const std::string &index_path, VerifyReport &rep) {
    auto run = h5::run_isolated(
        [&](int fd) {
            // Only HDF5, malloc and write(2) from here: nothing another thread of the parent
            // may have held locked at the fork (h5.h).
            send_record(fd, 'T', "", "the index");
            auto idx = h5::open_file(index_path);
            if (!idx) {
                send_record(fd, 'I', "", idx.error());
            } else {
                for (const auto &t : man.tensors) {
                    send_record(fd, 'T', t.name, "the virtual dataset " + virtual_dataset_name(t.name));
                    for (const auto &p : virtual_dataset_problems(idx.value().get(), t)) send_record(fd, 'I', t.name, p);
                }
                idx.value().reset();
                for (const auto &info : man.rank_states) {
                    send_record(fd, 'T', "", "the rank state of rank " + std::to_string(info.rank));
                    if (auto rs = read_rank_state(index_path, info); !rs) send_record(fd, 'I', "", rs.error());
                }
            }
            send_record(fd, 'E');
        },
        kIndexItemLimitMs);
    if (!run) {
        rep.issues.push_back({"", index_path, "its virtual datasets and rank states were not checked: " + run.error()});
        return;
    }
    const h5::Isolated &r = run.value();
    std::string tensor, what = "the index";
    std::size_t items = 0;   // 'T' records: the index, each tensor, each rank state
    bool done = false;
    for (std::size_t at = 0; at < r.output.size() && !done;) {
        const char type = r.output[at++];
        if (type == 'E') {
            done = true;
            break;
        }
        std::string field[2];
        bool whole = true;
        for (auto &f : field) {
            std::uint32_t n = 0;
            if (r.output.size() - at < sizeof n) {
                whole = false;
                break;
            }
            std::memcpy(&n, r.output.data() + at, sizeof n);
            at += sizeof n;
            if (r.output.size() - at < n) {
                whole = false;
                break;
            }
            f.assign(r.output, at, n);
            at += n;
        }
        if (!whole) break;
        if (type == 'T') {
            ++items;
            tensor = field[0];
            what = field[1];
        } else {
            rep.issues.push_back({field[0], index_path, field[1]});
        }
    }
    if (done && r.end == h5::Isolated::kExited && r.code == 0) return;
    std::string how;
    if (r.end == h5::Isolated::kSignaled)
        how = "HDF5 crashed: signal " + std::to_string(r.code) + ", " + strsignal(r.code);
    else if (r.end == h5::Isolated::kTimedOut)
        how = "HDF5 did not finish in " + std::to_string(kIndexItemLimitMs / 1000) + " s";
    else
        how = "the checking process ended with status " + std::to_string(r.code);
    // One child reads them all, so what comes after the item it died on is unchecked; the
    // checkpoint has failed verification by then anyway.
    const std::size_t all = 1 + man.tensors.size() + man.rank_states.size();
    const std::size_t unchecked = all - std::min(items, all);
    rep.issues.push_back({tensor, index_path,
                          what + " cannot be read (" + how + ")" +
                              (unchecked ? "; the " + std::to_string(unchecked) +
                                               " virtual datasets and rank states after it were not checked"
                                         : "")});
}

}  // namespace

struct Reader::Impl {
    std::string dir;
    ReadOptions options;
    std::shared_ptr<const Manifest> shared;   // the index, possibly shared with other Readers
    const Manifest *man = nullptr;
    std::unordered_map<std::string, std::size_t> by_name;
    FileCache files{64};
    std::unordered_set<std::string> opened;     // file + dataset of slices opened before
    std::unordered_set<std::string> verified;   // file + dataset of slices already checked
    // file + dataset of slices read in part: their block checksums (empty: none usable) and
    // which blocks were already checked against them.
    std::unordered_map<std::string, BlockState> blocks;
    std::vector<char> scratch;
    ScratchTail tail;
    std::vector<char> landing;   // a block of a part of a slice on its way to a scattered place
    // file + dataset of slices read where HDF5 says, not at the manifest's data_offset:
    // their bytes were not found there, or were checked through HDF5.
    std::unordered_set<std::string> hdf5_place;
    std::uint64_t bytes_read = 0;
};

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;
const std::string &Reader::path() const { return impl_->dir; }
const Manifest &Reader::manifest() const { return *impl_->man; }
std::uint64_t Reader::bytes_read() const { return impl_->bytes_read; }

const TensorInfo *Reader::find(const std::string &name) const {
    auto it = impl_->by_name.find(name);
    return it == impl_->by_name.end() ? nullptr : &impl_->man->tensors[it->second];
}

Result<std::unique_ptr<Reader>> Reader::open(const std::string &ckpt_dir, const ReadOptions &options) {
    h5::init();
    auto m = read_index_cached(ckpt_dir);
    if (!m) return make_error(m.error());
    auto impl = std::make_unique<Impl>();
    impl->dir = ckpt_dir;
    impl->options = options;
    impl->shared = std::move(m.value());
    impl->man = impl->shared.get();
    // Every source file must exist before anything is loaded: a virtual dataset (and a
    // careless loader) would otherwise produce zeros for the missing part. Each distinct
    // file is looked at once.
    std::set<std::string> present;
    for (std::size_t i = 0; i < impl->man->tensors.size(); ++i) {
        const TensorInfo &t = impl->man->tensors[i];
        impl->by_name.emplace(t.name, i);
        for (const auto &s : t.sources) {
            const std::string p = fsio::join(ckpt_dir, s.file);
            if (present.count(p)) continue;
            if (!fsio::exists(p))
                return make_error(ckpt_dir + ": tensor " + t.name + ": source file " + p +
                                  " is missing");
            present.insert(p);
        }
    }
    return std::make_unique<Reader>(std::move(impl));
}

Result<std::unique_ptr<Reader>> Reader::open_latest(const std::string &root, const ReadOptions &options) {
    auto entries = list(root);
    if (!entries) return make_error(entries.error());
    for (auto it = entries.value().rbegin(); it != entries.value().rend(); ++it)
        if (it->complete) return open(it->path, options);
    return make_error(root + ": no complete checkpoint");
}

Status Reader::read(const std::string &name, const Shape &offset, const Shape &count, void *dst,
                    std::size_t dst_bytes) {
    Status st = read_into(name, offset, count, dst, dst_bytes);
    if (!st && dst && cow::user_mode_guards_exist() &&
        st.error().find(std::strerror(EFAULT)) != std::string::npos) {
        // A destination write-protected by a copy-on-write snapshot of this process
        // (AsyncShardWriter, Snapshot::copy_on_write) under an unprivileged userfaultfd: the
        // kernel may not wait for the fault handler, but a store from user mode may. Each
        // page touched is copied and un-protected; then the read goes through.
        touch_pages(static_cast<char *>(dst), dst_bytes);
        st = read_into(name, offset, count, dst, dst_bytes);
    }
    return st;
}

namespace {

// Reads the part `inter` of source `s` of tensor `t` into `dst`, the buffer of the request
// `req`. by_manifest: the slice's bytes are where the manifest's data_offset says, so a
// slice read whole, or in part without block checksums, costs a pread and no HDF5 call at
// all (an H5Fopen and an H5Dopen are about a third of a load of 1 MiB slices, and in one
// process they hold HDF5's global lock). The dataset is opened only for what needs it: block
// checksums, a chunked or filtered slice, a scatter. False: a checksum did not match the
// bytes at the manifest's place, or the place lies outside the file; the caller asks again
// with by_manifest false, where HDF5 says where the bytes are (a file rewritten by another
// tool keeps them elsewhere) and a mismatch is the error. `path`: the source's file; `key`:
// the slice's in the Reader's sets (file + dataset). Errors name the file, not the tensor.
Result<bool> read_source(Reader::Impl &r, const TensorInfo &t, const SourceRef &s, const std::string &path,
                         const std::string &key, const Box &req, const Box &inter, char *dst, bool by_manifest) {
    const std::size_t elem = dtype_size(t.dtype);
    const Box src{s.offset, s.count};
    auto f = r.files.get(path);
    if (!f) return make_error(f.error());
    OpenFile &file = *f.value();
    const std::uint64_t src_bytes = element_count(s.count) * elem;
    // The dataset and its memory type, made on the first need: a read by plain pread
    // makes no HDF5 call.
    h5::Handle dh, type;
    auto dataset = [&]() -> Result<hid_t> {
        if (dh) return dh.get();
        type = h5::dtype_type(t.dtype);
        auto h5 = r.files.h5(file, path);
        if (!h5) return make_error(h5.error());
        const bool first = !r.opened.count(key);
        auto d = open_source(h5.value(), t, s, first);
        if (!d) return make_error(path + ": " + d.error());
        if (first) r.opened.insert(key);
        dh = std::move(d.value());
        return dh.get();
    };
    std::optional<std::uint64_t> raw;
    if (by_manifest) {
        if (s.data_offset > file.size || src_bytes > file.size - s.data_offset) return false;
        raw = s.data_offset;
    } else {
        auto d = dataset();
        if (!d) return make_error(d.error());
        raw = raw_offset(d.value(), file, src_bytes);
    }
    const bool whole = inter.count == src.count;
    // The intersection as one run of bytes in the source and in the destination: true
    // for whole slices at the saved layout and for row ranges when resharding along
    // dimension 0, the common cases.
    const bool src_run = is_contiguous_in(inter, src);
    const bool runs = src_run && is_contiguous_in(inter, req);
    const std::uint64_t inter_bytes = element_count(inter.count) * elem;
    char *inter_dst = runs ? dst + byte_offset_in(inter, req, elem) : nullptr;

    if (r.options.verify_checksums && !r.verified.count(key) && raw && src_run && !whole) {
        // Part of a slice, one run of its bytes: where it has block checksums, only the
        // blocks that part touches are read and checked.
        auto it = r.blocks.find(key);
        if (it == r.blocks.end()) {
            auto d = dataset();
            if (!d) return make_error(d.error());
            BlockState b;
            // Malformed ones are verify's to report; the whole slice is hashed instead.
            if (auto bh = read_block_hashes(d.value(), src_bytes); bh) b.hashes = std::move(bh.value());
            H5Eclear2(H5E_DEFAULT);
            b.ok.assign(b.hashes.xxh3.size(), false);
            it = r.blocks.emplace(key, std::move(b)).first;
        }
        if (!it->second.hashes.empty()) {
            const std::uint64_t pre = byte_offset_in(inter, src, elem);
            auto checked = [&](std::uint64_t at, std::uint64_t n, char *to) {
                return pread_block_checked(file.fd.get(), *raw, src_bytes, at, n, to, it->second, r.scratch, r.tail,
                                           key, path, r.bytes_read);
            };
            // Not one run of the destination's (rows of a slice cut along an inner
            // dimension): a block of rows at a time through `landing`, copied into place.
            auto scattered = [&]() -> Result<bool> {
                bool all = true;   // for_each_block stops at an error; a mismatch is none
                Status st = for_each_block(inter.count, elem, [&](const Box &b, std::uint64_t off, std::uint64_t n) {
                    r.landing.resize(n);
                    auto m = checked(pre + off, n, r.landing.data());
                    if (!m) return Status(make_error(m.error()));
                    if (!(all = m.value())) return Status(make_error("a block did not match"));
                    const Box g = moved_by(b, inter.offset);   // in the tensor's coordinates
                    copy_region(g, r.landing.data(), g, dst, req, elem);
                    return Status::success();
                });
                if (!all) return false;
                if (!st) return make_error(st.error());
                return true;
            };
            auto matched = runs ? checked(pre, inter_bytes, inter_dst) : scattered();
            if (!matched) return make_error(matched.error());
            if (matched.value()) return true;
            it->second.hashes = BlockHashes{};   // a block did not match: the whole slice decides
        }
    }
    if (r.options.verify_checksums && !r.verified.count(key)) {
        r.tail.key.clear();   // the scratch block is used below
        // First touch of this slice: all of it is read so it can be hashed.
        std::uint64_t h;
        if (raw && runs) {
            // In up to three pieces, hashed in file order: the rows before the
            // intersection and after it through a block of scratch, the intersection
            // straight into the destination. No copy, and the bytes outside the request
            // cost one block of memory, however large the slice.
            const std::uint64_t pre = byte_offset_in(inter, src, elem);
            const std::uint64_t post = src_bytes - pre - inter_bytes;
            Hasher hasher;
            Status st = pread_hashed_discard(file.fd.get(), r.scratch, pre, *raw, hasher, path);
            if (st) st = pread_hashed(file.fd.get(), inter_dst, inter_bytes, *raw + pre, hasher, path);
            if (st) st = pread_hashed_discard(file.fd.get(), r.scratch, post, *raw + pre + inter_bytes, hasher, path);
            if (!st) return make_error(st.error());
            h = hasher.digest();
        } else {
            // Straight into the destination when the whole slice lands there
            // contiguously; else block by block through one block of scratch, each
            // block's part of the request copied out of it.
            auto d = dataset();
            if (!d) return make_error(d.error());
            auto hashed = [&]() -> Result<std::uint64_t> {
                if (whole && runs) return read_hashed(d.value(), type.get(), s.count, elem, inter_dst);
                auto dg = read_hashed_blocks(d.value(), type.get(), s.count, elem, 0, r.scratch,
                                             [&](const Box &b, const char *data) {
                                                 const Box g = moved_by(b, s.offset);   // tensor coordinates
                                                 if (auto part = intersect(g, inter))
                                                     copy_region(*part, data, g, dst, req, elem);
                                             });
                if (!dg) return make_error(dg.error());
                return dg.value().xxh3;
            }();
            if (!hashed) return make_error("reading " + path + ": " + hashed.error());
            h = hashed.value();
            // What was checked is the slice where HDF5 has it; later reads take it there.
            if (by_manifest) r.hdf5_place.insert(key);
            by_manifest = false;
        }
        r.bytes_read += src_bytes;
        if (h != s.xxh3) {
            if (by_manifest) return false;
            return make_error(path + ": " + checksum_problem(s.xxh3, h));
        }
        r.verified.insert(key);
        return true;
    }
    // Already verified (or verification off): only the intersection is read.
    if (raw && runs) {
        if (auto st = pread_full(file.fd.get(), inter_dst, inter_bytes, *raw + byte_offset_in(inter, src, elem), path);
            !st)
            return make_error(st.error());
        r.bytes_read += inter_bytes;
        return true;
    }
    auto d = dataset();
    if (!d) return make_error(d.error());
    if (whole && runs) {
        if (H5Dread(d.value(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, inter_dst) < 0)
            return h5::fail("reading " + path);
        r.bytes_read += src_bytes;
        return true;
    }
    // Anything else lets HDF5 scatter the intersection.
    const int n = static_cast<int>(req.count.size());
    std::vector<hsize_t> foff(n), moff(n), cnt(inter.count.begin(), inter.count.end());
    std::vector<hsize_t> mdims(req.count.begin(), req.count.end());
    for (int i = 0; i < n; ++i) {
        foff[i] = inter.offset[i] - s.offset[i];
        moff[i] = inter.offset[i] - req.offset[i];
    }
    h5::Handle fspace = h5::space(H5Dget_space(d.value()));
    h5::Handle mspace = h5::space(H5Screate_simple(n, mdims.data(), nullptr));
    if (!fspace || !mspace ||
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, foff.data(), nullptr, cnt.data(), nullptr) < 0 ||
        H5Sselect_hyperslab(mspace.get(), H5S_SELECT_SET, moff.data(), nullptr, cnt.data(), nullptr) < 0 ||
        H5Dread(d.value(), type.get(), mspace.get(), fspace.get(), H5P_DEFAULT, dst) < 0)
        return h5::fail("reading " + path);
    r.bytes_read += inter_bytes;
    return true;
}

}  // namespace

Status Reader::read_into(const std::string &name, const Shape &offset, const Shape &count,
                         void *dst, std::size_t dst_bytes) {
    Impl &r = *impl_;
    const TensorInfo *t = find(name);
    if (!t) return make_error(r.dir + ": no tensor named '" + name.substr(0, 300) + "'");
    if (auto st = check_slice(t->shape, offset, count, "tensor " + name); !st) return st;
    const std::uint64_t want = element_count(count) * dtype_size(t->dtype);
    if (dst_bytes != want)
        return make_error("tensor " + name + ": slice " + shape_string(count) + " of " +
                          dtype_name(t->dtype) + " needs " + std::to_string(want) +
                          " bytes; buffer has " + std::to_string(dst_bytes));
    const Box req{offset, count};
    for (const auto &s : t->sources) {
        auto inter = intersect(req, Box{s.offset, s.count});
        if (!inter) continue;
        char *out = static_cast<char *>(dst);
        // The manifest's place is taken only where checksums prove what lies there, and
        // never again for a slice once they did not.
        const std::string path = fsio::join(r.dir, s.file);
        const std::string key = path + '\n' + s.dataset;
        const bool by_manifest = s.data_offset && r.options.verify_checksums && !r.hdf5_place.count(key);
        auto done = read_source(r, *t, s, path, key, req, *inter, out, by_manifest);
        if (done && !done.value()) {
            r.hdf5_place.insert(key);
            r.blocks.erase(key);   // blocks found matching at the other place
            r.tail.key.clear();
            r.opened.erase(key);   // opened again as for a first read: it is hashed whole
            done = read_source(r, *t, s, path, key, req, *inter, out, false);
        }
        if (!done) return make_error("tensor " + name + ": " + done.error());
    }
    return Status::success();
}

Status Reader::read_all(const std::string &name, void *dst, std::size_t dst_bytes) {
    const TensorInfo *t = find(name);
    if (!t) return make_error(impl_->dir + ": no tensor named '" + name.substr(0, 300) + "'");
    return read(name, Shape(t->shape.size(), 0), t->shape, dst, dst_bytes);
}

Result<RankState> Reader::rank_state(std::uint32_t rank) {
    for (const auto &info : impl_->man->rank_states)
        if (info.rank == rank) return read_rank_state(fsio::join(impl_->dir, kIndexFile), info);
    return make_error(impl_->dir + ": no rank state for rank " + std::to_string(rank));
}

Result<VerifyReport> verify(const std::string &ckpt_dir, const Progress &progress) {
    h5::init();
    auto m = read_index(ckpt_dir);
    if (!m) return make_error(m.error());
    const Manifest &man = m.value();
    VerifyReport rep;
    rep.path = ckpt_dir;
    std::uint64_t total = 0, done = 0;
    for (const auto &t : man.tensors)
        for (const auto &s : t.sources) total += element_count(s.count) * dtype_size(t.dtype);
    FileCache files(16);
    std::set<std::string> missing;
    std::vector<char> buf;
    for (const auto &t : man.tensors) {
        for (const auto &s : t.sources) {
            const std::uint64_t bytes = element_count(s.count) * dtype_size(t.dtype);
            const std::string path = fsio::join(ckpt_dir, s.file);
            ++rep.sources_checked;
            if (!fsio::exists(path)) {
                rep.issues.push_back({t.name, path, "source file is missing"});
                missing.insert(path);
                done += bytes;
                continue;
            }
            auto f = files.get(path);
            if (!f) {
                rep.issues.push_back({t.name, path, f.error()});
                missing.insert(path);
                done += bytes;
                continue;
            }
            auto h5 = FileCache::h5(*f.value(), path);
            if (!h5) missing.insert(path);   // not HDF5: said once per slice, not again for its record
            auto d = h5 ? open_source(h5.value(), t, s, true) : Result<h5::Handle>(make_error(h5.error()));
            if (!d) {
                rep.issues.push_back({t.name, path, d.error()});
                done += bytes;
                continue;
            }
            // The block checksums too: a load of part of the slice trusts them.
            auto blocks = read_block_hashes(d.value().get(), bytes);
            if (!blocks) rep.issues.push_back({t.name, path, "dataset " + s.dataset + ": " + blocks.error()});
            const BlockHashes none;
            const BlockHashes &want = blocks ? blocks.value() : none;
            auto h = hash_source(d.value().get(), t, s, want.block_bytes, buf, [&](std::uint64_t b) {
                done += b;
                rep.bytes_checked += b;
                if (progress) progress(done, total);
            });
            if (!h) {
                rep.issues.push_back({t.name, path, h.error()});
                continue;
            }
            if (h.value().xxh3 != s.xxh3) rep.issues.push_back({t.name, path, checksum_problem(s.xxh3, h.value().xxh3)});
            if (auto p = block_problem(want, h.value().blocks, bytes); !p.empty())
                rep.issues.push_back({t.name, path, "dataset " + s.dataset + ": " + p});
        }
    }
    // Each shard's own record, which the commit was made from (shard_records.cc).
    check_shard_records(man, ckpt_dir, missing, rep);
    // The virtual datasets must map exactly the manifest's sources, or h5py users read
    // something else than the loader.
    check_index(man, fsio::join(ckpt_dir, kIndexFile), rep);
    if (progress) progress(total, total);
    return rep;
}

}  // namespace ckpt
}  // namespace omni
