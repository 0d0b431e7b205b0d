// Internal entry points shared by the writers, commit, merge and reshard.
#ifndef OMNI_CKPT_WRITER_INTERNAL_H
#define OMNI_CKPT_WRITER_INTERNAL_H

#include <memory>
#include <string>

#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {

// A ShardWriter writing into an explicit directory (merge/reshard write next to their output
// path rather than into ROOT/.step-N.partial-A).
Result<std::unique_ptr<ShardWriter>> open_shard_writer_in(const std::string &dir,
                                                          std::uint64_t step, std::uint32_t rank,
                                                          const WriterOptions &options);

}  // namespace ckpt
}  // namespace omni

#endif
