// Moving a slice between memory and its HDF5 dataset in blocks of rows, hashing each block
// while it is still in the CPU cache.
//
// Hashing a slice and then writing it reads it from DRAM twice; on machines whose memory
// bandwidth is within a few times the storage bandwidth (most cloud VMs) that second pass
// costs as much as the hash itself. Blocks of about 1 MiB cut it to one pass.
#ifndef OMNI_CKPT_STREAM_H
#define OMNI_CKPT_STREAM_H

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "blocks.h"
#include "box.h"
#include "h5.h"
#include "omni/ckpt_cpp.h"
#include "omni/result.h"

namespace omni {
namespace ckpt {

// Bytes per block: about one core's L2 cache. Measured between 256 KiB and 8 MiB the size
// hardly matters; what matters is that the hash reads the block before it leaves the cache.
constexpr std::uint64_t kStreamBlockBytes = std::uint64_t(1) << 20;
// HDF5's chunk cache per open dataset by default (rdcc_nbytes), and the most that
// streaming_access lets one hold.
constexpr std::uint64_t kDefaultChunkCacheBytes = std::uint64_t(1) << 20;
constexpr std::uint64_t kMaxChunkCacheBytes = std::uint64_t(256) << 20;

// Runs `fn` on the blocks of a slice of shape `count` in row-major order, each one contiguous
// run of its bytes of about kStreamBlockBytes (whole rows where a row fits; else part of one
// row), with its box in the slice's coordinates, its byte offset in the slice and its size;
// stops at the first error and returns it.
Status for_each_block(const Shape &count, std::size_t elem,
                      const std::function<Status(const Box &block, std::uint64_t byte_off, std::uint64_t bytes)> &fn);

// A slice's checksums: the XXH3-64 of all its bytes (the manifest's) and its block checksums
// (blocks.h; empty for a slice of kMinBlockBytes or less).
struct SliceDigest {
    std::uint64_t xxh3 = 0;
    BlockHashes blocks;
};

// Writes `data` (a dense slice of shape `count`) to dataset `ds` of the same shape and
// returns the checksums of its bytes, with blocks of block_bytes_for its size.
Result<SliceDigest> write_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem, const void *data);

// Writes the n bytes of a slice at `data` with plain pwrite(2) to `fd` at file offset `off`
// (the storage HDF5 allocated for a contiguous dataset, which HDF5 then never touches) and
// returns their checksums. Outside HDF5, so the writers of a process do not queue on HDF5's
// global lock while the kernel copies their bytes.
Result<SliceDigest> pwrite_hashed(int fd, std::uint64_t off, std::uint64_t n, const void *data);
// Writes a slice of shape `count` whose bytes `fill` makes a block at a time into `block`
// (at most kStreamBlockBytes; `fill` is given each block's box in the slice's coordinates, in
// row-major order) and returns the checksums of all of them: with pwrite(2) to `fd` at `off`
// when fd >= 0, else through dataset `ds`. An error of `fill` is returned as it is.
Result<SliceDigest> write_hashed_from(hid_t ds, hid_t type, int fd, std::uint64_t off, const Shape &count,
                                      std::size_t elem, std::vector<char> &block,
                                      const std::function<Status(const Box &, char *)> &fill);
// Reads dataset `ds` (shape `count`) into `dst` and returns the XXH3-64 of its bytes.
Result<std::uint64_t> read_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem, void *dst);
// Reads dataset `ds` (shape `count`) block by block into `block` (grown to one block,
// kStreamBlockBytes at most, however large the slice) and returns the checksums of its bytes,
// with blocks of `block_bytes` (0: none); `each` is given every block as it lands, with its
// box in the dataset's coordinates.
Result<SliceDigest> read_hashed_blocks(hid_t ds, hid_t type, const Shape &count, std::size_t elem,
                                       std::uint64_t block_bytes, std::vector<char> &block,
                                       const std::function<void(const Box &, const char *)> &each);

// For reading dataset `ds` (shape `count`) with the functions above. A chunked dataset (one
// rewritten by h5repack, say) must have every chunk stored, else an error. Where its chunks
// are larger than HDF5's default chunk cache holds, returns the access property list to
// reopen it with: a chunk cache large enough for the chunks the blocks come back to (up to
// kMaxChunkCacheBytes), so each chunk is read and decompressed once rather than once per
// block. Returns an invalid Handle where the default does. HDF5 applies a dataset's access
// list only when nothing else has it open: close `ds` before reopening.
Result<h5::Handle> streaming_access(hid_t ds, const Shape &count, std::size_t elem);

}  // namespace ckpt
}  // namespace omni

#endif
