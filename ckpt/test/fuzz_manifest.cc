// libFuzzer target for the manifest parsers: index.h5 and shard files may come from another
// user's directory or a damaged disk, and everything a load does is sized from them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../format.h"
#include "omni/ckpt_cpp.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string text(reinterpret_cast<const char *>(data), size);
    auto m = omni::ckpt::parse_manifest(text);
    if (m.ok()) {
        // Whatever parses must serialise and parse back to the same manifest.
        const std::string again = omni::ckpt::manifest_to_json(m.value());
        auto m2 = omni::ckpt::parse_manifest(again);
        if (!m2.ok() || omni::ckpt::manifest_to_json(m2.value()) != again) __builtin_trap();
    }
    auto s = omni::ckpt::parse_shard_manifest(text);
    if (s.ok()) (void)omni::ckpt::shard_manifest_to_json(s.value());
    (void)omni::ckpt::parse_step_dir_name(text);
    (void)omni::ckpt::parse_partial_dir_name(text);
    (void)omni::ckpt::check_tensor_name(text);
    (void)omni::ckpt::check_file_ref(text);
    return 0;
}
