/* slurm-omni: Slurm host lists ("node[01-04,7],login1"), read and written.
 *
 * omni-launch and omni-ctl read a job's nodes from scontrol, which writes them as a host
 * list, and hand a node list back to `scontrol update`. Names are what Slurm allows in
 * slurm.conf: letters, digits, '.', '_' and '-'. The parser is strict and bounded: a list
 * expands to at most `max_hosts` names (an error beyond, checked before anything is built),
 * each name at most kMaxHostNameLength characters. No function throws.
 */
#ifndef OMNI_COMMON_HOSTLIST_H
#define OMNI_COMMON_HOSTLIST_H

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni {

constexpr std::size_t kMaxHostNameLength = 64;
constexpr std::size_t kMaxHosts = 65536;

/* Expands a host list, in its order: "n[1-3,05]x,m" -> n1x, n2x, n3x, n05x, m. A bracket
 * holds comma-separated numbers and ranges A-B (A <= B); a number with leading zeros sets the
 * width of a range's names ("[08-10]": 08, 09, 10). Several brackets in one name multiply out,
 * the last one fastest. Duplicates are kept (Slurm keeps them too). Errors name `what`, quote
 * the list and say what was wrong. An empty list is an empty vector. */
Result<std::vector<std::string>> expand_hostlist(std::string_view text, std::string_view what,
                                                 std::size_t max_hosts = kMaxHosts);

/* These names as one host list in Slurm's own form (what `scontrol show hostlist` writes), which
 * expand_hostlist() reads back to the same names in the same order: neighbours that differ only
 * in a trailing number of the same form share a bracket, consecutive numbers as ranges
 * ("n1,n2,n3,n7,m" -> "n[1-3,7],m"). Many names that share no prefix can make a text longer
 * than expand_hostlist() reads (kMaxValueLength); `scontrol update` takes any length. */
std::string compress_hostlist(const std::vector<std::string> &hosts);

}  // namespace omni

#endif
