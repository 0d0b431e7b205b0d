// Blocked, hashing transfers between memory and HDF5 datasets; see stream.h.
#include "stream.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "h5.h"
#include "hash.h"

namespace omni {
namespace ckpt {

namespace {

// Runs `io` on consecutive blocks of whole rows (dimension 0) of about kStreamBlockBytes,
// each with matching file and memory dataspaces; `io` returns < 0 on failure.
Status for_blocks(hid_t ds, const Shape &count, std::size_t elem,
                  const std::function<herr_t(hid_t mspace, hid_t fspace, std::uint64_t byte_off,
                                             std::uint64_t bytes)> &io) {
    std::uint64_t row = elem;
    for (std::size_t d = 1; d < count.size(); ++d) row *= count[d];
    const std::uint64_t total = row * count[0];
    if (total <= kStreamBlockBytes) {
        // The caller names the tensor and file; the HDF5 stack says what went wrong.
        if (io(H5S_ALL, H5S_ALL, 0, total) < 0) return make_error(h5::last_error());
        return Status::success();
    }
    const std::uint64_t rows_per = std::max<std::uint64_t>(1, kStreamBlockBytes / row);
    h5::Handle fspace = h5::space(H5Dget_space(ds));
    if (!fspace) return make_error(h5::last_error());
    const int n = static_cast<int>(count.size());
    std::vector<hsize_t> off(n, 0), cnt(count.begin(), count.end());
    for (std::uint64_t r0 = 0; r0 < count[0]; r0 += rows_per) {
        off[0] = r0;
        cnt[0] = std::min(rows_per, count[0] - r0);
        h5::Handle mspace = h5::space(H5Screate_simple(n, cnt.data(), nullptr));
        if (!mspace ||
            H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr) < 0 ||
            io(mspace.get(), fspace.get(), r0 * row, cnt[0] * row) < 0)
            return make_error(h5::last_error());
    }
    return Status::success();
}

}  // namespace

Result<std::uint64_t> write_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem,
                                   const void *data) {
    Hasher h;
    const char *base = static_cast<const char *>(data);
    auto st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, std::uint64_t off, std::uint64_t n) {
        h.update(base + off, n);   // brings the block into cache for the write
        return H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, base + off);
    });
    if (!st) return make_error(st.error());
    return h.digest();
}

Result<std::uint64_t> read_hashed(hid_t ds, hid_t type, const Shape &count, std::size_t elem,
                                  void *dst, const std::function<void(std::uint64_t)> &on_block) {
    Hasher h;
    char *base = static_cast<char *>(dst);
    auto st = for_blocks(ds, count, elem, [&](hid_t ms, hid_t fs, std::uint64_t off, std::uint64_t n) {
        const herr_t rc = H5Dread(ds, type, ms, fs, H5P_DEFAULT, base + off);
        if (rc >= 0) {
            h.update(base + off, n);   // the block just landed in cache
            if (on_block) on_block(n);
        }
        return rc;
    });
    if (!st) return make_error(st.error());
    return h.digest();
}

}  // namespace ckpt
}  // namespace omni
