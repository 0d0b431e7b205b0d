// Block checksums of a slice's dataset; see blocks.h.
#include "blocks.h"

#include <string>

#include "h5.h"

namespace omni {
namespace ckpt {

std::uint64_t block_count(std::uint64_t slice_bytes, std::uint64_t block_bytes) {
    return slice_bytes / block_bytes + (slice_bytes % block_bytes != 0);
}

std::uint64_t block_bytes_for(std::uint64_t slice_bytes) {
    if (slice_bytes <= kMinBlockBytes) return 0;
    std::uint64_t b = kMinBlockBytes;
    while (b < kLargeBlockBytes && block_count(slice_bytes, b) > kTargetBlocks) b <<= 1;
    while (block_count(slice_bytes, b) > kMaxBlocks) b <<= 1;   // slices above 256 GiB
    return b;
}

Status write_block_hashes(hid_t dataset, const BlockHashes &b) {
    if (b.empty()) return Status::success();
    if (auto st = h5::write_attr_u64(dataset, kBlockBytesAttr, b.block_bytes); !st) return st;
    const hsize_t n = b.xxh3.size();
    h5::Handle s = h5::space(H5Screate_simple(1, &n, nullptr));
    h5::Handle a = h5::attr(H5Acreate2(dataset, kBlockHashesAttr, H5T_STD_U64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!a || H5Awrite(a.get(), H5T_NATIVE_UINT64, b.xxh3.data()) < 0)
        return h5::fail(std::string("writing attribute ") + kBlockHashesAttr);
    return Status::success();
}

Result<BlockHashes> read_block_hashes(hid_t dataset, std::uint64_t slice_bytes) {
    const htri_t has_bytes = H5Aexists(dataset, kBlockBytesAttr), has_hashes = H5Aexists(dataset, kBlockHashesAttr);
    if (has_bytes < 0 || has_hashes < 0) return h5::fail("looking up the block checksums");
    if (!has_bytes && !has_hashes) return BlockHashes{};
    if (!has_bytes || !has_hashes)
        return make_error(std::string("attribute ") + (has_bytes ? kBlockHashesAttr : kBlockBytesAttr) +
                          " is missing beside " + (has_bytes ? kBlockBytesAttr : kBlockHashesAttr));
    auto bytes = h5::read_attr_u64(dataset, kBlockBytesAttr);
    if (!bytes) return make_error(bytes.error());
    const std::uint64_t b = bytes.value();
    if (b < 4096 || (b & (b - 1)) != 0)
        return make_error(std::string("attribute ") + kBlockBytesAttr + " is " + std::to_string(b) +
                          "; expected a power of two of at least 4096");
    const std::uint64_t want = block_count(slice_bytes, b);
    h5::Handle a = h5::attr(H5Aopen(dataset, kBlockHashesAttr, H5P_DEFAULT));
    h5::Handle s = a ? h5::space(H5Aget_space(a.get())) : h5::Handle();
    h5::Handle t = a ? h5::type(H5Aget_type(a.get())) : h5::Handle();
    if (!a || !s || !t) return h5::fail(std::string("reading attribute ") + kBlockHashesAttr);
    const hssize_t n = H5Sget_simple_extent_npoints(s.get());
    if (H5Sget_simple_extent_ndims(s.get()) != 1 || H5Tget_class(t.get()) != H5T_INTEGER || H5Tget_size(t.get()) != 8 ||
        n < 0 || static_cast<std::uint64_t>(n) != want || want > kMaxBlocks)
        return make_error(std::string("attribute ") + kBlockHashesAttr + " holds " + std::to_string(n) +
                          " values; expected " + std::to_string(want) + " (one per " + std::to_string(b) +
                          " bytes of the slice's " + std::to_string(slice_bytes) + ") as 64-bit integers" +
                          (want > kMaxBlocks ? ", and at most " + std::to_string(kMaxBlocks) : ""));
    BlockHashes out;
    out.block_bytes = b;
    out.xxh3.resize(static_cast<std::size_t>(want));
    if (H5Aread(a.get(), H5T_NATIVE_UINT64, out.xxh3.data()) < 0)
        return h5::fail(std::string("reading attribute ") + kBlockHashesAttr);
    return out;
}

}  // namespace ckpt
}  // namespace omni
