// libFuzzer target for discovery: arbitrary hwloc XML (what --topology and HWLOC_XMLFILE
// feed in) goes through load_xml_text (our guard, hwloc, discovery, derivation), then the
// health checks and every output. hwloc rejects most mutations; the ones it accepts are odd
// topologies (GPUs without cpusets, NVLink matrices naming unexpected objects, bridges
// without buses) that our code must describe without crashing.
#include <hwloc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hal/health.h"
#include "hal/model.h"
#include "hal/output.h"

using namespace omni::hal;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setenv("HWLOC_XML_VERBOSE", "0", 1);
    // Hold one topology for the whole run so hwloc keeps its XML plugin (libxml2) loaded:
    // leak reports then name the library they come from, and lsan-hwloc.supp can tell
    // hwloc's and libxml2's own leaks from ours.
    static hwloc_topology_t keep;
    hwloc_topology_init(&keep);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    auto node = load_xml_text(std::string(reinterpret_cast<const char *>(data), size), "fuzz");
    if (!node) return 0;
    Node &n = node.value();
    for (std::size_t k = 0; k < kDomainKinds; ++k)
        (void)unit_candidates(n, static_cast<DomainKind>(k), 2, false, 64);
    CheckOptions o;
    o.expect_gpus = {"0000:3b:00.0"};
    (void)run_checks(n, o);
    (void)node_json(n, -1);
    (void)gres_conf(n, GresOptions{});
    (void)path_matrix(n);
    return 0;
}
