// The queue and idle nodes around a job; see slurmjob/queue.h.
#include "slurmjob/queue.h"

#include <algorithm>
#include <sstream>

#include "common/hostlist.h"
#include "common/parse.h"
#include "slurmjob/proc.h"

namespace omni::launcher {
namespace {

// Output beyond this is refused, not read: a queue of some 100k jobs.
constexpr std::size_t kMaxOutput = 8 << 20;

std::string line_label(std::size_t n, const std::string &line) {
    return "line " + std::to_string(n) + " " + quoted(line);
}

}  // namespace

Result<std::vector<PendingJob>> parse_pending_jobs(const std::string &text) {
    std::vector<PendingJob> jobs;
    std::istringstream lines(text);
    std::string line;
    std::size_t n = 0;
    while (std::getline(lines, line)) {
        ++n;
        if (line.find_first_not_of(' ') == std::string::npos) continue;
        std::istringstream words(line);
        std::string id, prio, nodes, reason, extra;
        if (!(words >> id >> prio >> nodes >> reason) || (words >> extra))
            return make_error("squeue: " + line_label(n, line) + ": expected 'JOBID PRIORITY NODES REASON'");
        auto i = parse_uint(id, 1, UINT32_MAX, "JOBID");
        auto p = parse_uint(prio, 0, UINT64_MAX, "PRIORITY");
        auto d = parse_uint(nodes, 0, UINT32_MAX, "NODES");
        for (const auto *r : {&i, &p, &d})
            if (!*r) return make_error("squeue: " + line_label(n, line) + ": " + r->error());
        jobs.push_back({static_cast<std::uint32_t>(i.value()), p.value(),
                        static_cast<std::uint32_t>(d.value()), reason});
    }
    return jobs;
}

Result<std::vector<PendingJob>> pending_jobs(const std::string &partition, std::int64_t timeout_ms) {
    auto out = run_capture({"squeue", "--local", "--noheader", "--states=PD", "--partition", partition,
                            "--format=%A %Q %D %r"},
                           timeout_ms, kMaxOutput);
    if (!out) return make_error("reading the queue of partition " + partition + ": " + out.error());
    return parse_pending_jobs(out.value());
}

Result<std::vector<std::string>> parse_node_names(const std::string &text) {
    std::vector<std::string> nodes;
    std::istringstream lines(text);
    std::string line;
    std::size_t n = 0;
    while (std::getline(lines, line)) {
        ++n;
        if (line.empty()) continue;
        auto one = expand_hostlist(line, "sinfo", 1);
        if (!one || one.value().size() != 1)
            return make_error("sinfo: " + line_label(n, line) + ": expected one node name");
        if (std::find(nodes.begin(), nodes.end(), one.value()[0]) == nodes.end())
            nodes.push_back(one.value()[0]);
    }
    return nodes;
}

Result<std::vector<std::string>> idle_nodes(const std::string &partition, std::int64_t timeout_ms) {
    auto out = run_capture({"sinfo", "--noheader", "--Node", "--states=idle", "--partition", partition,
                            "--format=%N"},
                           timeout_ms, kMaxOutput);
    if (!out) return make_error("reading the idle nodes of partition " + partition + ": " + out.error());
    return parse_node_names(out.value());
}

}  // namespace omni::launcher
