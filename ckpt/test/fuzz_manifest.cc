// libFuzzer target for the manifest parsers: index.h5 and shard files may come from another
// user's directory or a damaged disk, and everything a load does is sized from them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ckpt/format.h"
#include "ckpt/hash.h"
#include "ckpt/ref_shard.h"
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
    // A reference shard (ref_shard.h), as given and with its trailing checksum made right, so
    // that mutations reach the lengths and rank states behind it: what parses must encode and
    // parse back to the same.
    std::string sealed = text;
    if (sealed.size() >= 40) {
        sealed.resize(sealed.size() - 8);
        const std::uint64_t h = omni::ckpt::xxh3(sealed.data(), sealed.size());
        for (int i = 0; i < 8; ++i) sealed.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
    }
    for (const std::string *in : {&text, static_cast<const std::string *>(&sealed)}) {
        auto r = omni::ckpt::parse_ref_shard(*in);
        if (!r.ok()) continue;
        const std::string again = omni::ckpt::encode_ref_shard(r.value().manifest, r.value().states);
        auto r2 = omni::ckpt::parse_ref_shard(again);
        if (!r2.ok() || omni::ckpt::encode_ref_shard(r2.value().manifest, r2.value().states) != again)
            __builtin_trap();
    }
    (void)omni::ckpt::parse_step_dir_name(text);
    (void)omni::ckpt::parse_partial_dir_name(text);
    (void)omni::ckpt::check_tensor_name(text);
    (void)omni::ckpt::check_file_ref(text);
    return 0;
}
