// Internal entry points shared by the writers, commit, merge and reshard.
#ifndef OMNI_CKPT_WRITER_INTERNAL_H
#define OMNI_CKPT_WRITER_INTERNAL_H

#include <memory>
#include <string>
#include <unordered_map>

#include "omni/ckpt_cpp.h"
#include "stream.h"

namespace omni {
namespace ckpt {

// A base checkpoint's manifest with its tensors by name: where an incremental writer looks up
// the base's slice of what it is given.
class BaseSlices {
public:
    BaseSlices() = default;
    explicit BaseSlices(std::shared_ptr<const Manifest> m);
    explicit operator bool() const { return manifest_ != nullptr; }
    // The base's source of exactly this slice (same tensor, dtype, global shape and extent),
    // or null.
    const SourceRef *find(const std::string &name, DType dtype, const Shape &shape,
                          const Shape &offset, const Shape &count) const;

private:
    std::shared_ptr<const Manifest> manifest_;
    std::unordered_map<std::string, const TensorInfo *> tensors_;
};

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

// The checksum of the slice most recently added to `w` (written or referenced).
std::uint64_t last_slice_hash(ShardWriter &w);

// Access to a ShardWriter's internals for the functions above (a friend of ShardWriter).
struct ShardWriterAccess {
    static ShardWriter::Impl &impl(ShardWriter &w) { return *w.impl_; }
};

}  // namespace ckpt
}  // namespace omni

#endif
