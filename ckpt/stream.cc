// Blocked, hashing transfers between memory and HDF5 datasets; see stream.h.
#include "stream.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "format.h"
#include "fsio.h"
#include "h5.h"
#include "hash.h"

namespace omni {
namespace ckpt {

namespace {

// Runs `io` on consecutive blocks of about kStreamBlockBytes, each one contiguous run of
// the slice's bytes in row-major order with matching file and memory dataspaces; `io`
// returns < 0 on failure. A block is whole rows (dimension 0) where a row fits in a block;
// where it does not, a block is part of one row: consecutive indices of the first dimension
// whose sub-blocks (that index and everything after it) fit, so a block never outgrows the
// cache, however wide the rows.
Status for_blocks(hid_t ds, const Shape &count, std::size_t elem,
                  const std::function<herr_t(hid_t mspace, hid_t fspace, std::uint64_t byte_off,
                                             std::uint64_t bytes)> &io) {
    const std::size_t n = count.size();
    // step[d]: bytes of one index of dimension d (all dimensions after it whole).
    std::vector<std::uint64_t> step(n);
    step[n - 1] = elem;
    for (std::size_t d = n - 1; d > 0; --d) step[d - 1] = step[d] * count[d];
    const std::uint64_t total = step[0] * count[0];
    if (total <= kStreamBlockBytes) {
        // The caller names the tensor and file; the HDF5 stack says what went wrong.
        if (io(H5S_ALL, H5S_ALL, 0, total) < 0) return make_error(h5::last_error());
        return Status::success();
    }
    std::size_t k = 0;   // the dimension blocks are ranges of
    while (k + 1 < n && step[k] > kStreamBlockBytes) ++k;
    const std::uint64_t per = std::max<std::uint64_t>(1, kStreamBlockBytes / step[k]);
    h5::Handle fspace = h5::space(H5Dget_space(ds));
    if (!fspace) return make_error(h5::last_error());
    std::vector<hsize_t> off(n, 0), cnt(count.begin(), count.end());
    for (std::size_t d = 0; d < k; ++d) cnt[d] = 1;
    std::uint64_t byte_off = 0;
    for (;;) {
        // Dimensions before k: one index each (an odometer); dimension k: `per` at a time.
        for (off[k] = 0; off[k] < count[k]; off[k] += per) {
            cnt[k] = std::min<std::uint64_t>(per, count[k] - off[k]);
            const std::uint64_t bytes = cnt[k] * step[k];
            h5::Handle mspace = h5::space(H5Screate_simple(static_cast<int>(n), cnt.data(), nullptr));
            if (!mspace ||
                H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr) < 0 ||
                io(mspace.get(), fspace.get(), byte_off, bytes) < 0)
                return make_error(h5::last_error());
            byte_off += bytes;
        }
        std::size_t d = k;
        while (d > 0 && ++off[d - 1] == count[d - 1]) off[--d] = 0;
        if (d == 0) break;
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

Result<std::uint64_t> pwrite_hashed(int fd, std::uint64_t off, std::uint64_t n, const void *data) {
    Hasher h;
    for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t b = std::min<std::uint64_t>(kStreamBlockBytes, n - done);
        const char *p = static_cast<const char *>(data) + done;
        h.update(p, b);   // brings the block into cache for the write
        if (const int err = fsio::pwrite_all(fd, p, static_cast<std::size_t>(b), off + done))
            return make_error(std::strerror(err));
        done += b;
    }
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
