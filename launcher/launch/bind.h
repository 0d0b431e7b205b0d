// Where the coordinator listens: the address Slurm knows for the node omni-launch runs on
// (its NodeAddr), which is how ranks on the job's other nodes reach it. Never a wildcard:
// a listener on 0.0.0.0 would accept connections from every network the host is on.
#ifndef OMNI_LAUNCHER_LAUNCH_BIND_H
#define OMNI_LAUNCHER_LAUNCH_BIND_H

#include <cstdint>
#include <string>

#include "omni/result.h"

namespace omni::launcher {

// The NodeAddr= value of one `scontrol show node -o NAME` line; errors name the node.
Result<std::string> node_addr_from_scontrol(const std::string &output, const std::string &node);

// A literal IPv4 address usable for binding: dotted quad, not 0.0.0.0 and not a broadcast or
// multicast address. Host names are resolved (IPv4, first address) with getaddrinfo.
Result<std::string> bind_address_for(const std::string &host_or_ip);

// The coordinator's bind address for `node` (the batch node): its NodeAddr from scontrol,
// resolved to IPv4; if scontrol has no answer within `timeout_ms`, the node name itself is
// resolved. The message says which source failed.
Result<std::string> node_bind_address(const std::string &node, std::int64_t timeout_ms);

}  // namespace omni::launcher

#endif
