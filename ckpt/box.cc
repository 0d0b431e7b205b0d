// Box geometry for resharding; see box.h.
#include "box.h"

#include <cstring>

namespace omni {
namespace ckpt {

Box moved_by(const Box &b, const Shape &by) {
    Box out = b;
    for (std::size_t d = 0; d < out.offset.size(); ++d) out.offset[d] += by[d];
    return out;
}

std::optional<Box> intersect(const Box &a, const Box &b) {
    Box out;
    const std::size_t n = a.offset.size();
    out.offset.resize(n);
    out.count.resize(n);
    for (std::size_t d = 0; d < n; ++d) {
        const std::uint64_t lo = std::max(a.offset[d], b.offset[d]);
        const std::uint64_t hi = std::min(a.offset[d] + a.count[d], b.offset[d] + b.count[d]);
        if (lo >= hi) return std::nullopt;
        out.offset[d] = lo;
        out.count[d] = hi - lo;
    }
    return out;
}

std::uint64_t byte_offset_in(const Box &inner, const Box &outer, std::size_t elem) {
    std::uint64_t off = 0;
    for (std::size_t d = 0; d < outer.count.size(); ++d)
        off = off * outer.count[d] + (inner.offset[d] - outer.offset[d]);
    return off * elem;
}

bool is_contiguous_in(const Box &inner, const Box &outer) {
    const std::size_t n = outer.count.size();
    // Find the first dimension (from the left) where inner is not a single index.
    std::size_t d = 0;
    while (d < n && inner.count[d] == 1) ++d;
    // All dimensions after it must be whole.
    for (std::size_t e = d + 1; e < n; ++e)
        if (inner.count[e] != outer.count[e]) return false;
    return true;
}

namespace {

void copy_rec(std::size_t dim, std::size_t last, const Shape &count, const char *src,
              const std::uint64_t *src_stride, char *dst, const std::uint64_t *dst_stride,
              std::uint64_t run) {
    if (dim == last) {
        std::memcpy(dst, src, run);
        return;
    }
    for (std::uint64_t i = 0; i < count[dim]; ++i)
        copy_rec(dim + 1, last, count, src + i * src_stride[dim], src_stride,
                 dst + i * dst_stride[dim], dst_stride, run);
}

}  // namespace

void copy_region(const Box &region, const void *src, const Box &src_box, void *dst,
                 const Box &dst_box, std::size_t elem) {
    const std::size_t n = region.count.size();
    // Byte strides of each dimension in both buffers.
    std::uint64_t ss[kMaxRank], ds[kMaxRank];
    std::uint64_t s = elem, t = elem;
    for (std::size_t d = n; d-- > 0;) {
        ss[d] = s;
        ds[d] = t;
        s *= src_box.count[d];
        t *= dst_box.count[d];
    }
    // Merge trailing dimensions that are whole in region, source and destination alike into
    // one contiguous run.
    std::size_t last = n - 1;
    std::uint64_t run = region.count[last] * elem;
    while (last > 0 && region.count[last] == src_box.count[last] &&
           region.count[last] == dst_box.count[last]) {
        --last;
        run *= region.count[last];
    }
    const char *sp = static_cast<const char *>(src) + byte_offset_in(region, src_box, elem);
    char *dp = static_cast<char *>(dst) + byte_offset_in(region, dst_box, elem);
    copy_rec(0, last, region.count, sp, ss, dp, ds, run);
}

}  // namespace ckpt
}  // namespace omni
