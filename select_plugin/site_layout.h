// The placement core's input from the site topology file (omni-topology(5), written by
// `omni-hal export`): each node's GPU count and domains as GPU masks, by host name. What
// select/omni's glue reads once (and again when the file changes) to feed placement/.
#ifndef OMNI_SELECT_SITE_LAYOUT_H
#define OMNI_SELECT_SITE_LAYOUT_H

#include <map>
#include <string>
#include <vector>

#include "hal/topofile.h"
#include "omni/result.h"
#include "placement/placement.h"

namespace omni::select {

struct SiteLayouts {
    std::vector<std::string> hostnames;                 // in the file's order
    std::vector<placement::NodeLayout> layouts;         // same order
    std::map<std::string, std::size_t> index;           // hostname -> position
};

// The layouts of a parsed site. A node with more than placement::kMaxGpusPerNode GPUs, or
// whose domains do not pass placement::check_input, is an error naming the host.
Result<SiteLayouts> layouts_from_site(const hal::SiteTopology &site);

// read_site_topology(path), then layouts_from_site.
Result<SiteLayouts> read_site_layouts(const std::string &path);

}  // namespace omni::select

#endif
