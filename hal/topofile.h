/* slurm-omni: the site topology file (omni-topology(5)).
 *
 * `omni-hal export` writes one node's derived facts; several nodes' files combine into one
 * site file that the SPANK and select plugins read. The reader is strict: an unknown key, a
 * wrong type, a malformed PCI address or CPU list, a GPU missing from a domain kind, or a
 * version it does not know is an error that names the file, the JSON path and the expected
 * form. Nothing here throws.
 */
#ifndef OMNI_HAL_TOPOFILE_H
#define OMNI_HAL_TOPOFILE_H

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hal/model.h"
#include "omni/result.h"

namespace omni::hal {

constexpr const char *kTopologyFormat = "omni-topology";
constexpr int kTopologyFileVersion = 1;
/* Larger files are refused before parsing: a site of 10,000 DGX-class nodes is ~40 MiB. */
constexpr std::size_t kMaxTopologyFileBytes = 64u << 20;

struct SiteGpu {
    unsigned index = 0;
    std::optional<Bdf> bdf;
    std::string model;
    std::string type;  // gres.conf Type=
    int numa = -1;
    std::vector<unsigned> cpus;
    std::vector<unsigned> cores;
    std::vector<std::string> nics;  // closest NICs, best first
    std::vector<std::string> nvmes;  // closest NVMe block devices (nvme0n1), best first
};
struct SiteNic {
    std::string name;
    std::optional<Bdf> bdf;
    int numa = -1;
    bool rdma = false;
};
struct SiteNode {
    std::string hostname;
    unsigned cpu_count = 0;
    unsigned core_count = 0;
    /* core_cpus[c]: the OS PU numbers of core c, c being the core's logical index, which is
     * how Slurm numbers cores (S_JOB_ALLOC_CORES, gres.conf Cores=): the SPANK plugin binds
     * tasks with it. core_count entries; together they hold cpu_count PUs. */
    std::vector<std::vector<unsigned>> core_cpus;
    std::vector<SiteGpu> gpus;  // index 0..n-1 in order
    std::vector<SiteNic> nics;
    /* domains[kind]: GPU index sets; every GPU is in exactly one set of each kind. */
    std::array<std::vector<std::vector<unsigned>>, kDomainKinds> domains;
    /* The multi-node fabric the node's GPUs share with other nodes' (a multi-node NVLink
     * domain, e.g. an NVL72 rack), named by the admin (omni-hal export --fabric); "" when none.
     * 1..64 characters of [A-Za-z0-9._-]: it names a Slurm block (block_conf). */
    std::string fabric;
};
struct SiteTopology {
    std::vector<SiteNode> nodes;
};

/* The file entry of a loaded node. `hostname` must be valid (see check_hostname). */
SiteNode site_node(const Node &node, const std::string &hostname);
/* Host names in the file: 1..255 characters of [A-Za-z0-9._-], as Slurm NodeName takes. */
Status check_hostname(std::string_view name, std::string_view what);

std::string site_json(const SiteTopology &site);
Result<SiteTopology> parse_site_topology(std::string_view text, std::string_view source);
Result<SiteTopology> read_site_topology(const std::string &path);
/* Appends b's nodes to a; a host name present in both is an error. */
Status merge_site(SiteTopology &a, const SiteTopology &b, std::string_view source);

/* Fabric names (SiteNode::fabric): 1..64 characters of [A-Za-z0-9._-]. */
Status check_fabric(std::string_view name, std::string_view what);

/* Slurm's topology.conf for TopologyPlugin=topology/block (Slurm 23.11+): one BlockName line
 * per fabric, naming its nodes, the smallest block first (Slurm takes the first block's size
 * as the base block size and refuses a smaller one after it), ties by name. Nodes without a
 * fabric are named in a comment (Slurm warns that no block reaches them). An error when no
 * node has a fabric. */
Result<std::string> block_conf(const SiteTopology &site);

}  // namespace omni::hal

#endif
