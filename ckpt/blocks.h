// Block checksums: the XXH3-64 of each fixed-size run of a slice's bytes, so that a reader
// taking part of a slice (a load at another data-parallel size, a merge or reshard moving
// a block at a time) checks the bytes it reads without reading the rest of the slice.
//
// The manifest's XXH3-64 of the whole slice stays the authority (omni-ckpt(5), BLOCK
// CHECKSUMS): block checksums are attributes of the slice's dataset in its shard file, not
// covered by the manifest's checksum, and only ever let a reader skip bytes. A read whose
// blocks do not match, or whose attributes are malformed, falls back to hashing the whole
// slice against the manifest; verify checks both.
//
// Why 64 blocks: a part of a slice is then read with at most 2/64 of the slice besides it,
// while the attribute stays at 512 bytes in the dataset's object header (a reader opening the
// dataset reads it anyway; slices over 64 MiB have up to 32 KiB of it, little beside their
// data). Why blocks of at most 1 MiB up to 4 GiB slices: a Reader keeps
// the checked tail of the last block it read in part in its scratch block of 1 MiB
// (kStreamBlockBytes), for the next read to start with, so a merge or reshard reading a slice
// 1 MiB at a time reads each byte once; a larger block's tail would be read again. Small
// slices have none: reading all of one costs no more than the block it would be.
#ifndef OMNI_CKPT_BLOCKS_H
#define OMNI_CKPT_BLOCKS_H

#include <hdf5.h>

#include <cstdint>
#include <vector>

#include "omni/result.h"

namespace omni {
namespace ckpt {

constexpr const char *kBlockBytesAttr = "omni_block_bytes";    // u64 scalar
constexpr const char *kBlockHashesAttr = "omni_block_xxh3";    // u64, one per block
// Slices of at most this many bytes have no block checksums.
constexpr std::uint64_t kMinBlockBytes = std::uint64_t(64) << 10;
// Blocks per slice the writer aims for, and the block size up to which it keeps to that.
constexpr std::uint64_t kTargetBlocks = 64;
constexpr std::uint64_t kLargeBlockBytes = std::uint64_t(1) << 20;
// At most this many blocks a slice, written or read: bounds the attribute (32 KiB).
constexpr std::uint64_t kMaxBlocks = 4096;

// The block size a writer uses for a slice of `slice_bytes`, 0 for none: the smallest power
// of two from kMinBlockBytes that cuts the slice into at most kTargetBlocks blocks, but no
// more than kLargeBlockBytes while that keeps it within kMaxBlocks (slices of 64 MiB to
// 4 GiB have 1 MiB blocks; larger ones kMaxBlocks blocks).
std::uint64_t block_bytes_for(std::uint64_t slice_bytes);
// ceil(slice_bytes / block_bytes); block_bytes > 0.
std::uint64_t block_count(std::uint64_t slice_bytes, std::uint64_t block_bytes);

struct BlockHashes {
    std::uint64_t block_bytes = 0;        // 0: the slice has none
    std::vector<std::uint64_t> xxh3;      // block_count(slice bytes, block_bytes) of them
    bool empty() const { return block_bytes == 0; }
};

// Writes both attributes on the slice's open dataset; nothing for an empty `b`.
Status write_block_hashes(hid_t dataset, const BlockHashes &b);
// Both attributes of a slice of `slice_bytes`: empty when the dataset has neither (a slice of
// kMinBlockBytes or less, or written by another tool); an error saying what is wrong when
// only one is there, or one is not what omni-ckpt(5) says (a u64 scalar; a power of two of
// at least 4 KiB; exactly block_count u64 values, at most kMaxBlocks).
Result<BlockHashes> read_block_hashes(hid_t dataset, std::uint64_t slice_bytes);

}  // namespace ckpt
}  // namespace omni

#endif
