// The placement core's input from the site topology file; see site_layout.h.
#include "site_layout.h"

namespace omni::select {

Result<SiteLayouts> layouts_from_site(const hal::SiteTopology &site) {
    SiteLayouts out;
    for (const auto &node : site.nodes) {
        const std::string what = "site topology: node '" + node.hostname + "'";
        if (node.gpus.size() > placement::kMaxGpusPerNode)
            return make_error(what + ": " + std::to_string(node.gpus.size()) + " GPUs, at most " +
                              std::to_string(placement::kMaxGpusPerNode) + " per node");
        placement::NodeLayout l;
        l.gpus = static_cast<std::uint32_t>(node.gpus.size());
        static_assert(hal::kDomainKinds == placement::kKinds, "the same domain kinds");
        for (std::size_t k = 0; k < placement::kKinds; ++k)
            for (const auto &domain : node.domains[k]) {
                std::uint64_t mask = 0;
                for (unsigned g : domain) {
                    if (g >= l.gpus)
                        return make_error(what + ": a " + placement::kind_name(static_cast<placement::Kind>(k)) +
                                          " domain names GPU " + std::to_string(g) + " of " + std::to_string(l.gpus));
                    mask |= std::uint64_t(1) << g;
                }
                l.domains[k].push_back(mask);
            }
        placement::Request any;
        const placement::NodeFree unused{std::vector<std::uint8_t>(l.gpus, 100)};
        if (auto st = placement::check_input({l}, {unused}, any); !st)
            return make_error(what + ": " + st.error().substr(st.error().find(':') + 2));
        if (!out.index.emplace(node.hostname, out.layouts.size()).second)
            return make_error(what + ": listed twice");
        out.hostnames.push_back(node.hostname);
        out.layouts.push_back(std::move(l));
    }
    return out;
}

Result<SiteLayouts> read_site_layouts(const std::string &path) {
    auto site = hal::read_site_topology(path);
    if (!site) return Error{site.error()};
    return layouts_from_site(site.value());
}

}  // namespace omni::select
