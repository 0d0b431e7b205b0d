// libFuzzer target for the inputs libomni-hal takes from files and command lines: the site
// topology file (read by the plugins inside slurmctld and slurmstepd), PCI addresses, CPU
// lists and domain kinds. Besides "no crash, no unbounded allocation" it checks that what is
// accepted survives a write/read round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hal/model.h"
#include "hal/topofile.h"

using namespace omni::hal;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);

    if (auto b = parse_bdf(text, "f")) {
        auto again = parse_bdf(b.value().format(), "f");
        if (!again || !(again.value() == b.value())) std::abort();
    }
    if (auto l = parse_cpulist(text, 4095, "f")) {
        auto again = parse_cpulist(format_cpulist(l.value()), 4095, "f");
        if (!again || again.value() != l.value()) std::abort();
    }
    (void)parse_domain_kind(text, "f");
    (void)slurm_type(std::string(text));
    (void)check_hostname(text, "f");
    (void)check_fabric(text, "f");

    if (auto site = parse_site_topology(text, "fuzz")) {
        const std::string written = site_json(site.value());
        auto again = parse_site_topology(written, "fuzz-rewritten");
        if (!again || site_json(again.value()) != written) std::abort();
        // Blocks name every node with a fabric exactly once.
        if (auto conf = block_conf(site.value())) {
            std::size_t with = 0;
            for (const auto &n : site.value().nodes) with += !n.fabric.empty();
            if (with == 0) std::abort();
        }
    }
    return 0;
}
