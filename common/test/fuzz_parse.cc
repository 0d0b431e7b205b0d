// libFuzzer target for the shared input parsers: they run on untrusted input inside root
// daemons, so no input may crash them or make them allocate without bound.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char *>(data), size);
    (void)omni::parse_uint(text, 1, 1024, "f");
    (void)omni::parse_range(text, ':', 1, 1024, "f");
    (void)omni::parse_yes_no(text, "f");
    (void)omni::parse_choice(text, {"pcie", "nvlink", "numa", "node", "any"}, "f");
    (void)omni::check_env_value("F", text);
    std::vector<std::string> args;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || text[i] == ' ') {
            args.emplace_back(text.substr(start, i - start));
            start = i + 1;
        }
    }
    (void)omni::parse_key_values(args, {"topology", "bind", "max_units"}, "f");
    return 0;
}
