// Blocked, hashing transfers between memory and HDF5 datasets; see stream.h.
#include "stream.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "box.h"
#include "format.h"
#include "fsio.h"
#include "h5.h"
#include "hash.h"

namespace omni {
namespace ckpt {

namespace {

// How for_blocks cuts a slice of shape `count` into blocks of about kStreamBlockBytes, each one
// contiguous run of the slice's bytes in row-major order: a block is whole rows (dimension 0)
// where a row fits in a block; where it does not, a block is part of one row: consecutive
// indices of the first dimension whose sub-blocks (that index and everything after it) fit,
// so a block never outgrows the cache, however wide the rows.
struct BlockPlan {
    std::vector<std::uint64_t> step;   // bytes of one index of dimension d (all after it whole)
    std::uint64_t total = 0;           // bytes of the slice
    std::size_t k = 0;                 // the dimension blocks are ranges of: one index at a
                                       // time of the dimensions before it, all of those after
    std::uint64_t per = 0;             // indices of dimension k per block
    bool one_block() const { return total <= kStreamBlockBytes; }
};

BlockPlan plan_blocks(const Shape &count, std::size_t elem) {
    const std::size_t n = count.size();
    BlockPlan p;
    p.step.resize(n);
    p.step[n - 1] = elem;
    for (std::size_t d = n - 1; d > 0; --d) p.step[d - 1] = p.step[d] * count[d];
    p.total = p.step[0] * count[0];
    while (p.k + 1 < n && p.step[p.k] > kStreamBlockBytes) ++p.k;
    p.per = std::max<std::uint64_t>(1, kStreamBlockBytes / p.step[p.k]);
    return p;
}

}  // namespace

Status for_each_block(const Shape &count, std::size_t elem,
                      const std::function<Status(const Box &block, std::uint64_t byte_off, std::uint64_t bytes)> &fn) {
    const std::size_t n = count.size();
    const BlockPlan plan = plan_blocks(count, elem);
    if (plan.one_block()) return fn(Box{Shape(n, 0), count}, 0, plan.total);
    const std::size_t k = plan.k;
    Box block{Shape(n, 0), count};
    for (std::size_t d = 0; d < k; ++d) block.count[d] = 1;
    std::uint64_t byte_off = 0;
    for (;;) {
        // Dimensions before k: one index each (an odometer); dimension k: `per` at a time.
        for (block.offset[k] = 0; block.offset[k] < count[k]; block.offset[k] += plan.per) {
            block.count[k] = std::min<std::uint64_t>(plan.per, count[k] - block.offset[k]);
            const std::uint64_t bytes = block.count[k] * plan.step[k];
            if (auto st = fn(block, byte_off, bytes); !st) return st;
            byte_off += bytes;
        }
        std::size_t d = k;
        while (d > 0 && ++block.offset[d - 1] == count[d - 1]) block.offset[--d] = 0;
        if (d == 0) break;
    }
    return Status::success();
}

namespace {

// for_each_block over dataset `ds`, with matching file and memory dataspaces for each block
// (H5S_ALL for a slice of one block); `io` returns < 0 on failure, reported with the HDF5
// error stack.
Status for_blocks(hid_t ds, const Shape &count, std::size_t elem,
                  const std::function<herr_t(hid_t mspace, hid_t fspace, const Box &block,
                                             std::uint64_t byte_off, std::uint64_t bytes)> &io) {
    const std::size_t n = count.size();
    // The caller names the tensor and file; the HDF5 stack says what went wrong.
    if (plan_blocks(count, elem).one_block())
        return io(H5S_ALL, H5S_ALL, Box{Shape(n, 0), count}, 0, element_count(count) * elem) < 0
                   ? Status(make_error(h5::last_error()))
                   : Status::success();
    h5::Handle fspace = h5::space(H5Dget_space(ds));
    if (!fspace) return make_error(h5::last_error());
    std::vector<hsize_t> off(n), cnt(n);
    return for_each_block(count, elem, [&](const Box &b, std::uint64_t byte_off, std::uint64_t bytes) -> Status {
        std::copy(b.offset.begin(), b.offset.end(), off.begin());
        std::copy(b.count.begin(), b.count.end(), cnt.begin());
        h5::Handle mspace = h5::space(H5Screate_simple(static_cast<int>(n), cnt.data(), nullptr));
        if (!mspace ||
            H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr) < 0 ||
            io(mspace.get(), fspace.get(), b, byte_off, bytes) < 0)
            return make_error(h5::last_error());
        return Status::success();
    });
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

// The smallest prime >= n (n small enough for trial division: at most a few million).
std::uint64_t next_prime(std::uint64_t n) {
    for (;; ++n) {
        bool prime = n >= 2;
        for (std::uint64_t f = 2; prime && f * f <= n; ++f) prime = n % f != 0;
        if (prime) return n;
    }
}

// The checksums a BlockHasher `h` made of a whole slice, in blocks of block_bytes (0: none).
SliceDigest digest_of(BlockHasher &h, std::uint64_t block_bytes) {
    SliceDigest d;
    d.xxh3 = h.digest();
    d.blocks.block_bytes = block_bytes;
    if (block_bytes) d.blocks.xxh3 = h.blocks();
    return d;
}

}  // namespace

Result<SliceDigest> write_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem, const void *data) {
    const std::uint64_t bb = block_bytes_for(element_count(count) * elem);
    BlockHasher h(bb);
    const char *base = static_cast<const char *>(data);
    auto st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, const Box &, std::uint64_t off, std::uint64_t n) {
        h.update(base + off, n);   // brings the block into cache for the write
        return H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, base + off);
    });
    if (!st) return make_error(st.error());
    return digest_of(h, bb);
}

Result<SliceDigest> pwrite_hashed(int fd, std::uint64_t off, std::uint64_t n, const void *data) {
    const std::uint64_t bb = block_bytes_for(n);
    BlockHasher h(bb);
    for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t b = std::min<std::uint64_t>(kStreamBlockBytes, n - done);
        const char *p = static_cast<const char *>(data) + done;
        h.update(p, b);   // brings the block into cache for the write
        if (const int err = fsio::pwrite_all(fd, p, static_cast<std::size_t>(b), off + done))
            return make_error(std::strerror(err));
        done += b;
    }
    return digest_of(h, bb);
}

Result<SliceDigest> write_hashed_from(hid_t ds, hid_t type, int fd, std::uint64_t off, const Shape &count,
                                      std::size_t elem, std::vector<char> &block,
                                      const std::function<Status(const Box &, char *)> &fill) {
    const std::uint64_t bb = block_bytes_for(element_count(count) * elem);
    BlockHasher h(bb);
    Status made;   // the first error of `fill`, reported as it is
    auto make = [&](const Box &b, std::uint64_t n) {
        if (block.size() < n) block.resize(n);
        made = fill(b, block.data());
        if (made) h.update(block.data(), n);   // brings the block into cache for the write
        return static_cast<bool>(made);
    };
    Status st;
    if (fd >= 0) {
        st = for_each_block(count, elem, [&](const Box &b, std::uint64_t byte_off, std::uint64_t n) -> Status {
            if (!make(b, n)) return made;
            if (const int err = fsio::pwrite_all(fd, block.data(), static_cast<std::size_t>(n), off + byte_off))
                return make_error(std::strerror(err));
            return Status::success();
        });
    } else {
        st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, const Box &b, std::uint64_t, std::uint64_t n) {
            return make(b, n) ? H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, block.data()) : herr_t(-1);
        });
        if (!made) return make_error(made.error());
    }
    if (!st) return make_error(st.error());
    return digest_of(h, bb);
}

Result<std::uint64_t> read_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem, void *dst) {
    Hasher h;
    char *base = static_cast<char *>(dst);
    auto st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, const Box &, std::uint64_t off, std::uint64_t n) {
        const herr_t rc = H5Dread(ds, type, ms, fs, H5P_DEFAULT, base + off);
        if (rc >= 0) h.update(base + off, n);   // the block just landed in cache
        return rc;
    });
    if (!st) return make_error(st.error());
    return h.digest();
}

Result<SliceDigest> read_hashed_blocks(hid_t ds, hid_t type, const Shape &count, std::size_t elem,
                                       std::uint64_t block_bytes, std::vector<char> &block,
                                       const std::function<void(const Box &, const char *)> &each) {
    BlockHasher h(block_bytes);
    auto st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, const Box &b, std::uint64_t, std::uint64_t n) {
        if (block.size() < n) block.resize(n);
        const herr_t rc = H5Dread(ds, type, ms, fs, H5P_DEFAULT, block.data());
        if (rc >= 0) {
            h.update(block.data(), n);
            if (each) each(b, block.data());
        }
        return rc;
    });
    if (!st) return make_error(st.error());
    return digest_of(h, block_bytes);
}

Result<h5::Handle> streaming_access(hid_t ds, const Shape &count, std::size_t elem) {
    h5::Handle dcpl = h5::plist(H5Dget_create_plist(ds));
    if (!dcpl) return make_error(h5::last_error());
    if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return h5::Handle();
    const int n = static_cast<int>(count.size());
    std::vector<hsize_t> chunk(kMaxRank);
    if (H5Pget_chunk(dcpl.get(), static_cast<int>(kMaxRank), chunk.data()) != n)
        return make_error(h5::last_error());
    std::uint64_t chunks = 1, chunk_bytes = elem;
    constexpr std::uint64_t kMaxChunkBytes = std::uint64_t(1) << 32;   // HDF5's own limit
    for (int d = 0; d < n; ++d) {
        if (chunk[d] == 0 || chunk[d] > kMaxChunkBytes / chunk_bytes)
            return make_error("chunks of " + std::to_string(chunk[d]) + " in dimension " + std::to_string(d) +
                              ": expected 1 or more, and chunks under 4 GiB");
        chunks *= ceil_div(count[d], chunk[d]);   // at most the element count, below 2^62
        chunk_bytes *= chunk[d];
    }
    hsize_t stored = 0;
    h5::Handle space = h5::space(H5Dget_space(ds));
    if (!space || H5Dget_num_chunks(ds, space.get(), &stored) < 0) return make_error(h5::last_error());
    // HDF5 reads a chunk never written as fill values: wrong data that only the checksum
    // would catch, after reading an extent the file does not back (a damaged or hostile
    // file; no writer, ours or h5repack, leaves one).
    if (stored != chunks)
        return make_error(std::to_string(stored) + " of its " + std::to_string(chunks) + " chunks are stored");
    const BlockPlan plan = plan_blocks(count, elem);
    if (plan.one_block()) return h5::Handle();   // one H5Dread: each chunk is read once
    // The chunks that more than one block reads, to be held from one block to the next: those
    // of one index of each dimension before k and all of the dimensions from k on (k > 0);
    // one row of chunks, all of the dimensions after the first (k = 0: a block is a range of
    // rows; HDF5 reads each chunk a block covers once, and a row of chunks straddling two
    // blocks is read through by the first before the second needs the next row, so that
    // w0 = 1 below evicts it first).
    std::uint64_t revisited = 1;
    for (std::size_t d = std::max<std::size_t>(plan.k, 1); d < count.size(); ++d)
        revisited *= ceil_div(count[d], chunk[d]);
    if (chunk_bytes <= kDefaultChunkCacheBytes && revisited <= kDefaultChunkCacheBytes / chunk_bytes)
        return h5::Handle();
    // Up to kMaxChunkCacheBytes, or one chunk where a chunk is larger (HDF5 holds a whole
    // chunk in memory to read any of it anyway).
    const std::uint64_t held = std::min(revisited, std::max<std::uint64_t>(1, kMaxChunkCacheBytes / chunk_bytes));
    h5::Handle dapl = h5::plist(H5Pcreate(H5P_DATASET_ACCESS));
    // HDF5 asks for about 100 hash slots per chunk the cache holds, a prime number of them;
    // w0 = 1 evicts the chunks read through first.
    const std::uint64_t slots = next_prime(std::min<std::uint64_t>(100 * held, std::uint64_t(1) << 20));
    if (!dapl || H5Pset_chunk_cache(dapl.get(), static_cast<size_t>(slots),
                                    static_cast<size_t>(held * chunk_bytes), 1.0) < 0)
        return make_error(h5::last_error());
    return dapl;
}

}  // namespace ckpt
}  // namespace omni
