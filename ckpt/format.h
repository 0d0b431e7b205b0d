// The on-disk format of a checkpoint (documented in omni-ckpt(5)): names of directories and
// files, and the JSON manifests stored in index.h5 and in each shard file, with strict
// validation. Everything read back from disk goes through the parsers here before any byte
// of it is used to size a buffer or build a path, so a corrupt or hostile index can make a
// load fail but never read out of bounds or outside the checkpoint root.
#ifndef OMNI_CKPT_FORMAT_H
#define OMNI_CKPT_FORMAT_H

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "omni/ckpt_cpp.h"
#include "omni/result.h"

namespace omni {
namespace ckpt {

constexpr const char *kIndexFile = "index.h5";
constexpr const char *kLatestLink = "latest";
constexpr const char *kManifestDataset = "manifest";     // in index.h5
constexpr const char *kShardManifestDataset = "omni_shard";   // in each shard file
constexpr const char *kVersionAttr = "omni_ckpt_format_version";
// Upper bound on a manifest we are willing to parse (a sanity limit, not a format limit).
constexpr std::size_t kMaxManifestBytes = std::size_t(1) << 30;

// "step-0000000100" and ".step-0000000100.partial-ATTEMPT".
std::string step_dir_name(std::uint64_t step);
std::string partial_dir_name(std::uint64_t step, const std::string &attempt);
std::optional<std::uint64_t> parse_step_dir_name(const std::string &name);
std::optional<std::uint64_t> parse_partial_dir_name(const std::string &name);
// "shard-00003.h5"
std::string shard_file_name(std::uint32_t rank);
// "shard-00003.ref", a reference shard (ref_shard.h), and whether a name is one (5 to 7
// digits, nothing else).
std::string ref_shard_file_name(std::uint32_t rank);
bool is_ref_shard_file_name(const std::string &name);
// "/t/<tensor name>": where a slice lives inside a shard file.
std::string slice_dataset_name(const std::string &tensor);
// "/tensors/<tensor name>": the virtual dataset inside index.h5.
std::string virtual_dataset_name(const std::string &tensor);
// "/state/rank-00003/rng" and ".../consumed" inside index.h5 and the shard files.
std::string rank_state_group(std::uint32_t rank);

Status check_tensor_name(const std::string &name);
Status check_attempt(const std::string &attempt);
// A source file reference: "shard-N.h5" or "../SIBLING/shard-N.h5".
Status check_file_ref(const std::string &file);
// 1..kMaxRank dimensions, each >= 1, element count below 2^62.
Status check_shape(const Shape &shape, const std::string &what);
// offset + count inside shape, count >= 1 in every dimension.
Status check_slice(const Shape &shape, const Shape &offset, const Shape &count,
                   const std::string &what);
// A slice of `count` elements of `dtype` in a tensor of `shape`, as a writer is given it: the
// dtype is one of DType's, and neither the slice nor the whole tensor holds more than
// kMaxTensorBytes bytes (so its byte size cannot wrap around). `what`: "tensor NAME".
constexpr std::uint64_t kMaxTensorBytes = std::uint64_t(1) << 62;
Status check_slice_bytes(DType dtype, const Shape &shape, const Shape &count,
                         const std::string &what);
// A name of `names` that lies on the path of `name` in the HDF5 layout, as a group would: a
// '/'-prefix of it ("x" for "x/y"), or one it is a '/'-prefix of ("x/y" for "x"). Such a pair
// cannot both be stored (one name would be a dataset and a group at once). "" when none.
std::string name_path_conflict(const std::set<std::string> &names, const std::string &name);
// The slices tile the shape exactly: inside it, no overlaps, no holes.
Status check_tiling(const TensorInfo &t);

std::uint64_t element_count(const Shape &s);
std::string shape_string(const Shape &s);
std::string hex64(std::uint64_t v);

// The manifest a shard file carries about itself; commit() merges them into the index.
struct ShardManifest {
    std::uint32_t format_version = kFormatVersion;
    std::uint64_t step = 0;
    std::uint32_t rank = 0;
    std::string attempt;
    std::vector<TensorInfo> tensors;   // each with exactly one source
    std::vector<RankStateInfo> rank_states;
};

std::string shard_manifest_to_json(const ShardManifest &m);
Result<ShardManifest> parse_shard_manifest(const std::string &json);

// For a source file reference: the sibling checkpoint directory it lives in, or "" when it
// lives in the checkpoint's own directory.
std::string file_ref_checkpoint(const std::string &file);
// Rebases a reference valid inside checkpoint `from_name` so it is valid from a sibling
// checkpoint directory ("shard-1.h5" in step-90 becomes "../step-90/shard-1.h5").
std::string rebase_file_ref(const std::string &file, const std::string &from_name);

}  // namespace ckpt
}  // namespace omni

#endif
