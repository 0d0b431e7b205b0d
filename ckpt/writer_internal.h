// Internal entry points shared by the writers, commit, merge and reshard.
#ifndef OMNI_CKPT_WRITER_INTERNAL_H
#define OMNI_CKPT_WRITER_INTERNAL_H

#include <memory>
#include <string>

#include "omni/ckpt_cpp.h"
#include "stream.h"

namespace omni {
namespace ckpt {

// A ShardWriter writing into an explicit directory (merge/reshard write next to their output
// path rather than into ROOT/.step-N.partial-A).
Result<std::unique_ptr<ShardWriter>> open_shard_writer_in(const std::string &dir,
                                                          std::uint64_t step, std::uint32_t rank,
                                                          const WriterOptions &options);

// ShardWriter::add_tensor for a slice read from `src` in blocks (a copy-on-write snapshot):
// the same checks, format and checksum as add_tensor. Nothing is released through `src`
// before the bytes are in the writer's staging buffer; the caller releases the rest.
Status add_tensor_from(ShardWriter &w, const std::string &name, DType dtype, const Shape &shape,
                       const Shape &offset, const Shape &count, SliceSource &src, Change change);

// WriterOptions::track_writes for the slices added from now on (the C API's switch).
void set_track_writes(ShardWriter &w, bool on);

// Access to a ShardWriter's internals for the functions above (a friend of ShardWriter).
struct ShardWriterAccess {
    static ShardWriter::Impl &impl(ShardWriter &w) { return *w.impl_; }
};

}  // namespace ckpt
}  // namespace omni

#endif
