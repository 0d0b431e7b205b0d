// libFuzzer target for the workload file parser (workload/workload.h): workload files come
// from users. No input may crash or hang it; whatever it accepts must read back from its own
// to_json() unchanged, and its samples and costs must stay within the documented bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "workload/workload.h"

using namespace omni::workload;

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    auto w = Workload::parse(std::string_view(reinterpret_cast<const char *>(data), size));
    if (!w) {
        check(!w.error().empty());
        return 0;
    }
    const Workload &x = w.value();
    const std::string j = x.to_json();
    auto again = Workload::parse(j);
    check(again.ok() && again.value().to_json() == j);

    check(!x.modalities().empty() && x.modalities().size() <= kMaxModalities);
    check(!x.phases().empty() && x.phases().size() <= kMaxPhases);
    for (std::uint64_t step : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(1000), UINT64_MAX}) {
        const std::size_t p = x.phase_at(step);
        check(p < x.phases().size());
        for (std::uint64_t i = 0; i < 4; ++i) {
            const Sample s = x.sample(size, i, step);
            check(s.modality < x.modalities().size());
            check(x.phases()[p].mix[s.modality] > 0);
            const Length &l = x.modalities()[s.modality].length;
            check(s.length >= l.min && s.length <= l.max && s.length >= 1 && s.length <= kMaxLength);
            const auto tokens = x.cost(s, CostKind::Tokens), compute = x.cost(s, CostKind::Compute);
            check(tokens >= 1 && tokens <= std::uint64_t(1) << 39);
            check(x.cost(s, CostKind::Units) == s.length);
            check(compute >= tokens && compute <= std::uint64_t(1) << 40);  // balance::kMaxCost
        }
    }
    return 0;
}
