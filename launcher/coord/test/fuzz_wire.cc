// libFuzzer target for the coordinator's request parser, which reads untrusted network input:
// no input may crash it, hang it or make it allocate without bound. The first byte selects
// whether a value frame accompanies the header (split at the first NUL).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "coord/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view all(reinterpret_cast<const char *>(data + 1), size - 1);
    const bool with_value = data[0] & 1;
    std::string_view header = all, value;
    if (with_value) {
        auto nul = all.find('\0');
        if (nul != std::string_view::npos) {
            header = all.substr(0, nul);
            value = all.substr(nul + 1);
        }
    }
    auto r = omni::launcher::parse_request(header, with_value ? &value : nullptr);
    // The scan that reads compact headers and nlohmann's parser, which reads the rest (a space
    // after the brace sends any header there), must agree: the same request or the same error.
    if (!header.empty() && header[0] == '{' && header.size() < omni::launcher::kMaxHeaderBytes) {
        const std::string slow = "{ " + std::string(header.substr(1));
        auto s = omni::launcher::parse_request(slow, with_value ? &value : nullptr);
        if (bool(r) != bool(s)) __builtin_trap();
        if (r && omni::launcher::request_header(r.value()) != omni::launcher::request_header(s.value()))
            __builtin_trap();
        if (!r && r.error() != s.error()) __builtin_trap();
    }
    if (r) {
        // What parses must survive a round trip.
        auto again = omni::launcher::parse_request(omni::launcher::request_header(r.value()),
                                                   r.value().op == omni::launcher::Op::KvSet ? &value : nullptr);
        if (!again) __builtin_trap();
    }
    (void)omni::launcher::parse_endpoint(all, data[0] & 2);
    auto j = nlohmann::json::parse(all.begin(), all.end(), nullptr, false);
    if (!j.is_discarded()) (void)omni::launcher::decision_from_json(j);
    return 0;
}
