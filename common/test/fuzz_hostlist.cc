// libFuzzer target: expand_hostlist on arbitrary bytes must return a value or an error (no
// crash, no unbounded allocation), and every list it accepts must survive a compress and
// expand round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/hostlist.h"
#include "common/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char *>(data), size);
    auto r = omni::expand_hostlist(text, "fuzz", 4096);
    if (!r) return 0;
    const std::string packed = omni::compress_hostlist(r.value());
    // Names that share no prefix compress to more text than the parser reads (kMaxValueLength).
    if (packed.size() > omni::kMaxValueLength) return 0;
    auto again = omni::expand_hostlist(packed, "fuzz", 4096);
    if (!again || again.value() != r.value()) std::abort();
    return 0;
}
