// Row-major box geometry for resharding: intersecting a requested slice with the slices on
// disk and copying sub-boxes between buffers.
#ifndef OMNI_CKPT_BOX_H
#define OMNI_CKPT_BOX_H

#include <cstddef>
#include <cstdint>
#include <optional>

#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {

struct Box {
    Shape offset;   // global coordinates
    Shape count;
};

// The intersection of two boxes of the same rank, or nothing.
std::optional<Box> intersect(const Box &a, const Box &b);
// `b` with `by` added to its offset: a box given inside another box (whose offset `by` is),
// in the coordinates that box is in.
Box moved_by(const Box &b, const Shape &by);

// Copies the global box `region` from `src` (holding global box `src_box`) into `dst`
// (holding global box `dst_box`). Both buffers are dense row-major with `elem` bytes per
// element; `region` must lie inside both boxes. Trailing dimensions that are whole in both
// buffers are merged, so the common resharding cases (slices along dimension 0) become one
// memcpy per source.
void copy_region(const Box &region, const void *src, const Box &src_box, void *dst,
                 const Box &dst_box, std::size_t elem);

// Whether `inner` occupies one contiguous run of bytes inside a dense buffer holding `outer`
// (true when all dimensions after the first partial one are whole and all before it are 1).
bool is_contiguous_in(const Box &inner, const Box &outer);
// Byte offset of `inner`'s first element inside `outer`'s buffer.
std::uint64_t byte_offset_in(const Box &inner, const Box &outer, std::size_t elem);

}  // namespace ckpt
}  // namespace omni

#endif
