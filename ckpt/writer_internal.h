// Internal entry points shared by the writers, commit, merge and reshard.
#ifndef OMNI_CKPT_WRITER_INTERNAL_H
#define OMNI_CKPT_WRITER_INTERNAL_H

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "box.h"
#include "format.h"
#include "omni/ckpt_cpp.h"
#include "stream.h"

namespace omni {
namespace ckpt {

// A base checkpoint as an incremental writer of one rank sees it: where it looks up the
// base's slice of what it is given. When this process wrote that rank's shard of the base
// (written_shard, index.h), the slices come from that manifest and the base's index is not
// read at all: with the ranks as processes, parsing the index was most of a rank's cost of a
// 1% incremental checkpoint. A slice not found there (the layout changed since) is looked up
// in the index, read then.
class BaseSlices {
public:
    BaseSlices() = default;
    // The base at `dir` for the writer of `rank`. Reads and checks the index now unless this
    // process wrote the rank's shard of it, so that a base that is not a checkpoint is
    // refused here.
    static Result<BaseSlices> open(const std::string &dir, std::uint32_t rank);
    explicit operator bool() const { return !dir_.empty(); }
    // The base's source of exactly this slice (same tensor, dtype, global shape and extent),
    // or null (always, without a base); an error only when the index had to be read for it
    // and could not be.
    Result<const SourceRef *> find(const std::string &name, DType dtype, const Shape &shape,
                                   const Shape &offset, const Shape &count);

private:
    using ByName = std::unordered_map<std::string, const TensorInfo *>;
    static const SourceRef *search(const ByName &tensors, const std::string &name, DType dtype,
                                   const Shape &shape, const Shape &offset, const Shape &count);
    Status read_index();

    std::string dir_;
    std::shared_ptr<const ShardManifest> own_;   // this rank's shard of the base, or null
    std::shared_ptr<const Manifest> index_;      // read when needed
    ByName own_tensors_, index_tensors_;
};

// A ShardWriter writing into an explicit directory (merge/reshard write next to their output
// path rather than into ROOT/.step-N.partial-A).
Result<std::unique_ptr<ShardWriter>> open_shard_writer_in(const std::string &dir,
                                                          std::uint64_t step, std::uint32_t rank,
                                                          const WriterOptions &options);

// Adds a slice that is always written (merge, reshard), its bytes made a block at a time by
// `fill` (write_hashed_from, stream.h): the writer holds one block of it, at most
// kStreamBlockBytes, whatever the slice's size. An error from `fill` fails the writer with
// that error.
Status add_tensor_from(ShardWriter &w, const std::string &name, DType dtype, const Shape &shape,
                       const Shape &offset, const Shape &count,
                       const std::function<Status(const Box &, char *)> &fill);

// The size of the blocks asynchronous writers allocate their snapshot memory in from now on
// (0: the default, 256 MiB); for tests that need snapshots spanning many blocks.
void set_arena_block_bytes(std::size_t bytes);

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
