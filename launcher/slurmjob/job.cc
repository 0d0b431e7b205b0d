// Jobs as scontrol and squeue show them; see slurm/job.h.
#include "slurmjob/job.h"

#include <optional>
#include <sstream>

#include "common/hostlist.h"
#include "common/parse.h"
#include "slurmjob/proc.h"

namespace omni::launcher {
namespace {

// The value of `key=` in the line's space-separated words, if the line holds it.
bool word_value(const std::string &line, const std::string &key, std::string &out) {
    std::istringstream words(line);
    std::string w;
    while (words >> w)
        if (w.compare(0, key.size() + 1, key + "=") == 0) {
            out = w.substr(key.size() + 1);
            return true;
        }
    return false;
}

// "0-1,4" -> 3: a CPU id list's size.
Result<std::uint32_t> count_ids(const std::string &list) {
    std::uint32_t n = 0;
    std::istringstream parts(list);
    std::string part;
    while (std::getline(parts, part, ',')) {
        auto dash = part.find('-');
        if (dash == std::string::npos) {
            if (!parse_uint(part, 0, 1u << 20, "CPU_IDs")) return make_error("CPU_IDs: bad id '" + part + "'");
            ++n;
            continue;
        }
        auto r = parse_range(part, '-', 0, 1u << 20, "CPU_IDs");
        if (!r) return Error{r.error()};
        n += static_cast<std::uint32_t>(r.value().second - r.value().first + 1);
    }
    return n;
}

// "gpu:h100:2(IDX:0-1),nic:1" -> 2: the GPUs of a details line's GRES= (commas inside the
// parentheses belong to the index list).
Result<std::uint32_t> count_gpus(const std::string &gres) {
    std::uint32_t n = 0;
    std::size_t start = 0;
    int depth = 0;
    for (std::size_t i = 0; i <= gres.size(); ++i) {
        if (i < gres.size() && gres[i] == '(') ++depth;
        if (i < gres.size() && gres[i] == ')') --depth;
        if (i < gres.size() && (gres[i] != ',' || depth > 0)) continue;
        std::string item = gres.substr(start, i - start);
        start = i + 1;
        item = item.substr(0, item.find('('));
        if (item.rfind("gpu:", 0) != 0) continue;
        auto count = parse_uint(item.substr(item.rfind(':') + 1), 0, 1u << 16, "GRES gpu count");
        if (!count) return make_error("GRES '" + gres + "': " + count.error());
        n += static_cast<std::uint32_t>(count.value());
    }
    return n;
}

}  // namespace

Result<JobInfo> parse_scontrol_job(const std::string &text, std::uint32_t job_id) {
    const std::string what = "scontrol show job " + std::to_string(job_id);
    JobInfo job;
    job.job_id = job_id;
    bool have_id = false, have_nodes = false;
    struct Details {
        std::uint32_t cpus = 0, gpus = 0;
        std::uint64_t mem_mb = 0;
    };
    std::map<std::string, Details> details;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        // The first line starts at column 0, the fields at 3, the per-node details at 5.
        std::size_t indent = line.find_first_not_of(' ');
        if (indent == std::string::npos) continue;
        std::string body = line.substr(indent);
        std::string v;
        if (indent == 0 && body.rfind("JobId=", 0) == 0) {
            word_value(body, "JobId", v);
            auto id = parse_uint(v, 1, UINT32_MAX, "JobId");
            if (!id || id.value() != job_id)
                return make_error(what + ": the output is for job '" + v + "'");
            have_id = true;
        } else if (indent == 3 && body.rfind("JobState=", 0) == 0) {
            word_value(body, "JobState", job.state);
        } else if (indent == 3 && body.rfind("UserId=", 0) == 0) {
            word_value(body, "UserId", v);  // name(uid)
            auto open = v.find('('), close = v.find(')');
            if (open == std::string::npos || close != v.size() - 1)
                return make_error(what + ": UserId '" + v + "': expected NAME(UID)");
            auto uid = parse_uint(v.substr(open + 1, close - open - 1), 0, UINT32_MAX, "UserId");
            if (!uid) return make_error(what + ": " + uid.error());
            job.user = v.substr(0, open);
            job.uid = static_cast<std::uint32_t>(uid.value());
        } else if (indent == 3 && body.rfind("NodeList=", 0) == 0) {
            word_value(body, "NodeList", job.node_list);
            if (job.node_list == "(null)") job.node_list.clear();
            auto nodes = expand_hostlist(job.node_list, what + ": NodeList");
            if (!nodes) return Error{nodes.error()};
            job.nodes = std::move(nodes).value();
            have_nodes = true;
        } else if (indent == 3 && body.rfind("Partition=", 0) == 0) {
            word_value(body, "Partition", job.partition);
        } else if (indent == 3 && body.rfind("OverSubscribe=", 0) == 0) {
            word_value(body, "OverSubscribe", v);
            job.exclusive = v == "NO";
        } else if (indent == 3 && body.rfind("PreemptEligibleTime=", 0) == 0) {
            job.preempted = word_value(body, "PreemptTime", v) && v != "None";
        } else if (indent == 3 && body.rfind("Priority=", 0) == 0) {
            word_value(body, "Priority", v);
            auto p = parse_uint(v, 0, UINT64_MAX, "Priority");
            if (!p) return make_error(what + ": " + p.error());
            job.priority = p.value();
        } else if (indent == 3 && body.rfind("TresPerNode=", 0) == 0) {
            word_value(body, "TresPerNode", job.tres_per_node);
        } else if (indent == 3 && body.rfind("SystemComment=", 0) == 0) {
            // Set only by Slurm and its plugins (job_submit/omni writes the record).
            std::istringstream words(body.substr(std::string("SystemComment=").size()));
            std::string w;
            const std::string mark = "omni-release=";
            while (words >> w)
                if (w.rfind(mark, 0) == 0) job.release_request = w.substr(mark.size());
        } else if (indent == 3 && body.rfind("BatchHost=", 0) == 0) {
            word_value(body, "BatchHost", job.batch_host);
        } else if (indent == 5 && body.rfind("Nodes=", 0) == 0) {
            std::string ids;
            word_value(body, "Nodes", v);
            if (!word_value(body, "CPU_IDs", ids)) continue;
            auto nodes = expand_hostlist(v, what + ": Nodes");
            if (!nodes) return Error{nodes.error()};
            auto n = count_ids(ids);
            if (!n) return make_error(what + ": " + n.error());
            Details d;
            d.cpus = n.value();
            if (word_value(body, "GRES", v) && !v.empty()) {
                auto g = count_gpus(v);
                if (!g) return make_error(what + ": " + g.error());
                d.gpus = g.value();
            }
            if (word_value(body, "Mem", v)) {
                auto m = parse_uint(v, 0, UINT64_MAX, "Mem");
                if (!m) return make_error(what + ": " + m.error());
                d.mem_mb = m.value();
            }
            for (const auto &node : nodes.value()) details[node] = d;
        }
    }
    if (!have_id) return make_error(what + ": no JobId line in the output");
    if (!have_nodes) return make_error(what + ": no NodeList line in the output");
    for (const auto &node : job.nodes) {
        auto it = details.find(node);
        if (it == details.end()) {
            // No details (a job that is not running): unknown.
            job.cpus.clear();
            job.gpus.clear();
            job.mem_mb.clear();
            break;
        }
        job.cpus.push_back(it->second.cpus);
        job.gpus.push_back(it->second.gpus);
        job.mem_mb.push_back(it->second.mem_mb);
    }
    return job;
}

Result<JobInfo> load_job(std::uint32_t job_id, std::int64_t timeout_ms) {
    // --local: one RPC, not two. Without it every look first reads the federation
    // (REQUEST_FED_INFO), which the job of this cluster's batch step never needs.
    auto out = run_capture({"scontrol", "--local", "show", "job", "-d", std::to_string(job_id)}, timeout_ms);
    if (!out) return make_error("reading job " + std::to_string(job_id) + " from Slurm: " + out.error());
    return parse_scontrol_job(out.value(), job_id);
}

std::string compress_counts(const std::vector<std::uint32_t> &counts) {
    std::string out;
    for (std::size_t i = 0; i < counts.size();) {
        std::size_t j = i;
        while (j < counts.size() && counts[j] == counts[i]) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(counts[i]);
        if (j - i > 1) out += "(x" + std::to_string(j - i) + ")";
        i = j;
    }
    return out;
}

Result<std::vector<std::uint32_t>> expand_counts(std::string_view text, std::uint32_t max_items,
                                                 std::string_view what) {
    auto bad = [&](const std::string &why) {
        return make_error(std::string(what) + " " + quoted(text) + ": " + why +
                          " (expected counts such as 2(x3),1)");
    };
    if (text.empty()) return bad("empty");
    std::vector<std::uint32_t> out;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string_view::npos) comma = text.size();
        std::string_view item = text.substr(pos, comma - pos);
        std::uint64_t repeat = 1;
        if (std::size_t paren = item.find('('); paren != std::string_view::npos) {
            if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')')
                return bad("a repeat is written (xN)");
            auto r = parse_uint(item.substr(paren + 2, item.size() - paren - 3), 1, max_items, what);
            if (!r) return bad("the repeat in " + quoted(item) + " is not a number in 1.." + std::to_string(max_items));
            repeat = r.value();
            item = item.substr(0, paren);
        }
        auto v = parse_uint(item, 0, UINT32_MAX, what);
        if (!v) return bad(quoted(item) + " is not a count");
        if (out.size() + repeat > max_items) return bad("more than " + std::to_string(max_items) + " counts");
        out.insert(out.end(), repeat, static_cast<std::uint32_t>(v.value()));
        pos = comma + 1;
    }
    return out;
}

std::map<std::string, std::string> allocation_environment(const JobInfo &job,
                                                          std::vector<std::string> &unset) {
    std::map<std::string, std::string> env;
    const std::string list = compress_hostlist(job.nodes);
    const std::string count = std::to_string(job.nodes.size());
    env["SLURM_JOB_NODELIST"] = list;
    env["SLURM_NODELIST"] = list;
    env["SLURM_JOB_NUM_NODES"] = count;
    env["SLURM_NNODES"] = count;
    unset = {"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE"};
    // Slurm lists per-node CPUs only for the nodes the job started with (an expansion adds
    // nodes without them): a count that no longer holds is left out rather than kept stale.
    if (!job.cpus.empty()) env["SLURM_JOB_CPUS_PER_NODE"] = compress_counts(job.cpus);
    else unset.push_back("SLURM_JOB_CPUS_PER_NODE");
    return env;
}

namespace {

// `scontrol update JobId=J FIELD`, without SLURM_JOB_ID/SLURM_JOBID: run inside the job,
// scontrol would write a resize script into the working directory.
Status scontrol_update(std::uint32_t job_id, const std::string &field, std::int64_t timeout_ms) {
    auto out = run_capture({"scontrol", "update", "JobId=" + std::to_string(job_id), field}, timeout_ms, 1 << 16,
                           {"SLURM_JOB_ID", "SLURM_JOBID"});
    if (!out) return Error{out.error()};
    return Status::success();
}

}  // namespace

Status release_nodes(std::uint32_t job_id, const std::vector<std::string> &keep,
                     std::int64_t timeout_ms) {
    if (keep.empty()) return make_error("releasing nodes of job " + std::to_string(job_id) + ": no node would be left");
    if (auto st = scontrol_update(job_id, "NodeList=" + compress_hostlist(keep), timeout_ms); !st)
        return make_error("releasing nodes of job " + std::to_string(job_id) + ": " + st.error());
    return Status::success();
}

Status merge_expansion(std::uint32_t job_id, std::uint32_t helper_id, std::int64_t timeout_ms) {
    const std::string j = std::to_string(job_id), h = std::to_string(helper_id);
    if (auto st = scontrol_update(helper_id, "NumNodes=0", timeout_ms); !st)
        return make_error("expanding job " + j + ": handing helper job " + h + "'s nodes over: " + st.error());
    if (auto st = scontrol_update(job_id, "NumNodes=ALL", timeout_ms); !st)
        return make_error("expanding job " + j + ": taking helper job " + h + "'s nodes: " + st.error());
    return Status::success();
}

Result<std::uint32_t> submit_batch(const std::vector<std::string> &args, const std::string &script,
                                   const std::map<std::string, std::string> &set,
                                   const std::vector<std::string> &unset, std::int64_t timeout_ms) {
    std::vector<std::string> argv = {"sbatch", "--parsable"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(script);
    auto out = run_capture(argv, timeout_ms, 1 << 16, unset, set);
    if (!out) return make_error("submitting a job: " + out.error());
    // "ID" or "ID;CLUSTER", then a newline.
    std::string text = out.value().substr(0, out.value().find_first_of(";\n"));
    auto id = parse_uint(text, 1, UINT32_MAX, "sbatch --parsable");
    if (!id) return make_error("submitting a job: " + id.error());
    return static_cast<std::uint32_t>(id.value());
}

Result<std::map<std::uint32_t, std::string>> live_jobs_named(const std::string &name,
                                                              std::int64_t timeout_ms) {
    auto out = run_capture({"squeue", "--local", "--me", "--noheader", "--name", name, "--format", "%i %T"},
                           timeout_ms);
    if (!out) return make_error("listing jobs named " + name + ": " + out.error());
    std::map<std::uint32_t, std::string> jobs;
    std::istringstream lines(out.value());
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string id_text, state;
        if (!(words >> id_text >> state)) continue;
        auto id = parse_uint(id_text, 1, UINT32_MAX, "squeue job id");
        if (!id) return make_error("listing jobs named " + name + ": " + id.error());
        jobs[static_cast<std::uint32_t>(id.value())] = state;
    }
    return jobs;
}

Status cancel_jobs(const std::vector<std::uint32_t> &ids, std::int64_t timeout_ms) {
    if (ids.empty()) return Status::success();
    std::vector<std::string> argv = {"scancel"};
    for (auto id : ids) argv.push_back(std::to_string(id));
    // scancel of a job that just ended reports it and exits 0 (22.05); any other failure is
    // the caller's to log.
    auto out = run_capture(argv, timeout_ms, 1 << 16);
    if (!out) return make_error("cancelling jobs: " + out.error());
    return Status::success();
}

std::optional<std::string> parse_config_value(const std::string &text, const std::string &key) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string k, eq, value;
        if (!(words >> k >> eq) || k != key || eq != "=") continue;
        words >> value;  // none: an empty value
        return value == "(null)" ? std::string() : value;
    }
    return std::nullopt;
}

Result<std::string> config_value(const std::string &key, std::int64_t timeout_ms) {
    auto out = run_capture({"scontrol", "show", "config"}, timeout_ms);
    if (!out) return make_error("reading Slurm's configuration: " + out.error());
    auto v = parse_config_value(out.value(), key);
    if (!v) return make_error("scontrol show config: no " + key);
    return *v;
}

Result<std::string> cluster_name(std::int64_t timeout_ms) {
    auto v = config_value("ClusterName", timeout_ms);
    if (v && v.value().empty()) return make_error("scontrol show config: no ClusterName");
    return v;
}

Result<std::vector<std::string>> job_step_names(std::uint32_t job_id, std::int64_t timeout_ms) {
    auto out = run_capture({"squeue", "--local", "--steps", "--noheader", "--jobs", std::to_string(job_id),
                            "--format", "%j"},
                           timeout_ms);
    if (!out) return make_error("listing the steps of job " + std::to_string(job_id) + ": " + out.error());
    std::vector<std::string> names;
    std::istringstream lines(out.value());
    std::string line;
    while (std::getline(lines, line))
        if (!line.empty()) names.push_back(line);
    return names;
}

}  // namespace omni::launcher
