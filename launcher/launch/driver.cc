// omni-launch's supervisor; see launch/driver.h.
#include "config.h"

#include "launch/driver.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common/parse.h"
#include "coord/client.h"
#include "coord/log.h"
#include "coord/protocol.h"
#include "coord/secret.h"
#include "launch/background.h"
#include "launch/events.h"
#include "launch/expansion.h"
#include "launch/metrics.h"
#include "launch/policy.h"
#include "launch/satellite.h"
#include "slurmjob/job.h"
#include "slurmjob/proc.h"
#include "slurmjob/queue.h"

namespace omni::launcher {
namespace {

constexpr const char *kComponent = "omni-launch";
constexpr std::int64_t kStatusTimeoutMs = 2000;
constexpr std::int64_t kCoordinatorGoneMs = 30000;  // status failing this long: give up
constexpr std::int64_t kStopGraceExtraMs = 30000;   // after a STOP: boundary timeout + this
constexpr std::int64_t kKillAfterTermMs = 15000;    // SIGTERM to srun, then SIGKILL

std::int64_t mono_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// What the supervisor needs from a status reply.
struct Snapshot {
    std::string phase;
    std::uint64_t generation = 0;
    std::uint32_t units = 0, world = 0;
    std::optional<std::uint32_t> target;
    std::string target_via;  // a grow's: one of the kVia* words (coord/protocol.h)
    std::optional<std::uint64_t> boundary_step;
    std::vector<std::uint32_t> unit_ids;
    std::vector<std::pair<std::string, std::uint32_t>> members;  // id, unit
    std::vector<std::string> pending;
    std::string change_kind, change_reason;
    std::string resize_kind;  // last_resize's kind, when it made the current generation
    std::uint64_t change_generation = 0, change_step = 0;
    std::uint64_t last_step = 0;  // the last decided boundary
    std::optional<std::int64_t> change_pause_ms;  // the current generation's, once known
};

Result<Snapshot> parse_snapshot(const nlohmann::json &s) {
    try {
        Snapshot out;
        out.phase = s.at("phase").get<std::string>();
        out.generation = s.at("generation").get<std::uint64_t>();
        out.units = s.at("units").get<std::uint32_t>();
        out.world = s.at("world").get<std::uint32_t>();
        if (!s.at("target_units").is_null()) out.target = s.at("target_units").get<std::uint32_t>();
        if (auto it = s.find("target_via"); it != s.end() && it->is_string())
            out.target_via = it->get<std::string>();
        if (!s.at("boundary_step").is_null()) out.boundary_step = s.at("boundary_step").get<std::uint64_t>();
        out.unit_ids = s.at("unit_ids").get<std::vector<std::uint32_t>>();
        for (const auto &m : s.at("members"))
            out.members.emplace_back(m.at("id").get<std::string>(), m.at("unit").get<std::uint32_t>());
        out.last_step = s.at("last_step").get<std::uint64_t>();
        out.pending = s.at("pending_joiners").get<std::vector<std::string>>();
        if (auto it = s.find("change_pause_ms"); it != s.end() && !it->is_null())
            out.change_pause_ms = it->get<std::int64_t>();
        if (auto r = s.find("last_resize"); r != s.end() && r->is_object() &&
                                            r->value("generation", std::uint64_t(0)) == out.generation)
            out.resize_kind = r->value("kind", std::string());
        const auto &lc = s.at("last_change");
        if (lc.is_object()) {
            out.change_kind = lc.at("kind").get<std::string>();
            out.change_reason = lc.at("reason").get<std::string>();
            out.change_generation = lc.at("generation").get<std::uint64_t>();
            out.change_step = lc.at("step").get<std::uint64_t>();
        }
        return out;
    } catch (const nlohmann::json::exception &e) {
        return make_error(std::string("coordinator status: ") + e.what());
    }
}

struct Step {
    std::string name;
    pid_t pid = -1;
    std::vector<std::uint32_t> units;
    bool joiner = false;
    bool admitted = false;      // one of its units was in a generation
    bool running = true;
    bool terminated = false;    // omni-launch sent SIGTERM
    bool killed = false;        // omni-launch sent SIGKILL
    int exit_code = 0;
    bool failed = false;        // a failure of the ranks (see reap())
};

// A satellite job this omni-launch submitted for a grow (launch/satellite.h).
struct Satellite {
    std::uint32_t job_id = 0;
    std::vector<std::uint32_t> units;
    std::string state = "SUBMITTED";  // as squeue last showed it
    std::int64_t submitted_ms = 0;    // an squeue begun before this cannot list it
    bool admitted = false;   // one of its units was in a generation
    bool cancelled = false;  // omni-launch cancelled it
    bool ended = false;      // squeue no longer lists it
};

// A grow by Slurm's job expansion (launch/expansion.h): the helper's salloc, then the merge.
struct Expansion {
    pid_t salloc = -1;  // salloc --no-shell, until it exits and is reaped
    std::vector<std::uint32_t> units;
    std::uint32_t helper = 0;  // the helper job, once squeue lists it
    std::string state = "SUBMITTED";
    std::int64_t asked_ms = 0;
    std::optional<int> salloc_exit;   // once salloc has exited
    std::int64_t salloc_exit_ms = 0;  // an squeue begun before this is not the last word
    bool cancelled = false;  // omni-launch withdrew it
    bool merged = false;     // its nodes are the job's, its units started
    bool failed = false;     // Slurm refused it, or the merge failed
    bool over() const { return cancelled || merged || failed; }
};

class Driver {
public:
    Driver(const DriverConfig &cfg, const std::atomic<int> &signals, const std::atomic<int> &last_signal)
        : cfg_(cfg), signals_(signals), last_signal_(last_signal), alloc_(cfg.alloc) {
        if (cfg.policy && cfg.satellite_units.empty()) policy_.emplace(*cfg.policy);
    }

    int run();

private:
    Status launch(const std::vector<std::uint32_t> &units, bool joiner);
    void refresh_allocation(std::map<std::string, std::string> &set, std::vector<std::string> &unset);
    void reap();
    void observe(const Snapshot &s);
    void report_lost(const std::vector<std::uint32_t> &units, const std::string &what, const Snapshot *s);
    void maybe_grow(const Snapshot &s);
    void abandon_grow(const Snapshot &s, const std::string &why);
    Status submit_satellite(const std::vector<std::uint32_t> &units);
    void poll_satellites(const Snapshot &s);
    void cancel_satellites(const std::string &why, bool joined_too);
    void finish_satellites();
    Result<std::string> grow_route(const std::string &via);
    Status start_expansion(const std::vector<std::uint32_t> &units);
    void poll_expansion(const Snapshot &s);
    void cancel_expansion(const std::string &why);
    void leave_job(const std::string &why, const char *cause = kCausePlanned);
    void watch_preemption();
    void await_preemption();
    void watch_release_request();
    void look_at_job_on_news(BackgroundLook<Result<JobInfo>> &look, int &news_read, int failures);
    Result<JobInfo> own_job(std::int64_t max_age_ms);
    bool start_ctl_shrink(std::vector<std::string> args, const std::string &what);
    bool ctl_shrink_running();
    void run_policy(const Snapshot &s);
    void size_shared_steps();
    std::uint32_t step_nodes() const;
    void record_policy(const PolicyDecision &d, std::uint32_t units);
    bool satellite() const { return !cfg_.satellite_units.empty(); }
    void record(GenerationEvent e);
    void write_metrics(const nlohmann::json &status);
    void settle_pending(const Snapshot *s, std::int64_t now);
    void begin_shutdown(const std::string &why);
    int exit_status() const;
    void enforce_shutdown();
    bool any_running() const;
    Status send(Request req);

    const DriverConfig &cfg_;
    const std::atomic<int> &signals_;
    const std::atomic<int> &last_signal_;
    Allocation alloc_;  // the job as omni-launch last read it (Slurm may change it)
    std::unique_ptr<CoordinatorClient> client_;
    std::optional<EventLog> events_;
    std::vector<Step> steps_;
    std::vector<Satellite> satellites_;
    std::optional<Expansion> expansion_;  // one at a time
    std::set<std::uint32_t> past_helpers_;  // earlier expansions' (squeue may list one ending)
    // The loop's looks at Slurm (launch/background.h): squeue of the expansion helper and of
    // the satellites, scontrol show job for job_submit/omni's release records.
    using LiveJobs = Result<std::map<std::uint32_t, std::string>>;
    BackgroundLook<LiveJobs> expansion_look_;
    BackgroundLook<LiveJobs> satellites_look_;
    BackgroundLook<Result<JobInfo>> release_look_;
    // A satellite's look at its own job for a preemption (watch_preemption).
    BackgroundLook<Result<JobInfo>> preempt_look_;
    int preempt_news_read_ = 0;  // the SIGURG count the last such look started after
    int preempt_failures_ = 0;   // looks that failed since the last that answered
    // job_submit/omni's deferred shrinks (watch_release_request): the last record acted on.
    std::string release_handled_;
    int release_news_read_ = 0;  // the SIGURG count the last look started after
    int release_failures_ = 0;   // looks that failed since the last that answered
    bool release_watch_ = true;  // off where slurmctld loads no job_submit/omni
    // The omni-ctl shrink running for a deferred shrink or the policy (one at a time), and
    // what it is for.
    pid_t ctl_shrink_pid_ = 0;
    std::string ctl_shrink_what_;
    // The job as Slurm last showed it (own_job), and when.
    std::optional<JobInfo> own_job_;
    std::int64_t own_job_ms_ = 0;
    // --omni-policy=auto: the policy, its last look, the target of its own grow in flight,
    // and when the job's size last changed (monotonic; none before the first resize).
    std::optional<ElasticPolicy> policy_;
    std::int64_t policy_looked_ms_ = 0;
    // The policy's look at Slurm in flight: scontrol, squeue and sinfo take up to 10 s each
    // and run on a thread of their own, so that the supervisor loop never waits for them.
    struct PolicyLook {
        Result<JobInfo> job = make_error("not read");
        Result<std::vector<PendingJob>> pending = make_error("not read");
        Result<std::vector<std::string>> idle = make_error("not read");
    };
    std::future<PolicyLook> policy_look_;
    std::optional<std::uint32_t> policy_grow_;
    std::optional<std::int64_t> last_resize_ms_;
    bool policy_failed_ = false;  // the last look could not read Slurm (logged once)
    std::vector<std::string> share_args_;  // each unit step's share where units share nodes
    std::uint32_t next_unit_ = 0;
    int own_failure_ = 0;    // omni-launch's own: the coordinator stopped answering
    // Observed state.
    std::uint64_t seen_generation_ = 0;
    std::uint32_t seen_world_ = 0;
    std::vector<std::uint32_t> seen_units_;
    bool stop_recorded_ = false;
    bool ranks_signalled_ = false;  // the STOP came from SIGTERM to the ranks
    std::map<std::uint64_t, std::int64_t> boundary_seen_ms_;  // step -> first seen in progress
    // A change whose pause the ranks have not all reported yet, and since when it waits.
    std::optional<GenerationEvent> pending_;
    std::int64_t pending_since_ = 0;
    std::int64_t launched_ms_ = 0;
    std::optional<std::uint32_t> grow_failed_target_;
    std::optional<Snapshot> last_snapshot_;
    std::int64_t metrics_written_ms_ = 0;
    std::uint64_t metrics_generation_ = 0;
    bool metrics_failed_ = false;  // logged once
    // Shutdown.
    int signals_handled_ = 0;
    bool leaving_ = false;  // a satellite's units were asked to leave (leave_job)
    std::optional<std::int64_t> shutdown_deadline_;  // then SIGTERM the steps
    std::optional<std::int64_t> kill_deadline_;      // then SIGKILL them
};

Status Driver::send(Request req) {
    auto r = client_->call(std::move(req), kStatusTimeoutMs);
    if (!r) return Error{r.error()};
    return Status::success();
}

// A job's nodes may have changed since it started (scontrol update, an expansion): the batch
// step's SLURM_JOB_NODELIST and friends then describe the job as it was, and srun would refuse
// a step on a node-count mismatch or place it on a node the job no longer has. Before it starts
// joiners, omni-launch reads the job from Slurm and gives srun the job as it is now, as
// scontrol's resize script would (it sources no such script). Inside no job, or when Slurm does
// not answer, the steps get the batch step's variables as before.
void Driver::refresh_allocation(std::map<std::string, std::string> &set, std::vector<std::string> &unset) {
    if (alloc_.job_id == 0) return;
    auto job = own_job(0);
    if (!job) {
        log_line(LogLevel::Warning, kComponent, job.error() + "; the new steps get the job's first allocation");
        return;
    }
    const std::uint32_t nodes = static_cast<std::uint32_t>(job.value().nodes.size());
    if (nodes != alloc_.nodes)
        log_line(LogLevel::Info, kComponent,
                 "job " + std::to_string(alloc_.job_id) + " now has " + std::to_string(nodes) +
                     " node(s) (" + job.value().node_list + "), was " + std::to_string(alloc_.nodes));
    // The allocation's ranks per node stay as they were at the start (its Capacity); its
    // node count moves.
    if (nodes > 0) alloc_.nodes = nodes;
    for (auto &[k, v] : allocation_environment(job.value(), unset)) set[k] = v;
}

Status Driver::launch(const std::vector<std::uint32_t> &units, bool joiner) {
    std::map<std::string, std::string> job_env;
    std::vector<std::string> job_unset;
    // A satellite's steps run in its own allocation, which does not change.
    if (joiner && !satellite()) refresh_allocation(job_env, job_unset);
    for (auto unit : units) {
        StepSpec spec;
        spec.extra = cfg_.options.srun_args;
        spec.extra.insert(spec.extra.end(), share_args_.begin(), share_args_.end());
        spec.self = cfg_.self;
        spec.mpi = cfg_.mpi;
        spec.program = cfg_.options.program;
        spec.tasks = cfg_.settings.unit_size;
        spec.nodes = step_nodes();
        spec.name = "omni-u" + std::to_string(unit);
        auto argv = srun_argv(spec);
        std::map<std::string, std::string> set = job_env;
        set[kEnvCoordAddr] = cfg_.endpoint;
        set[kEnvCoordSecret] = cfg_.secret;
        set[kEnvJobDir] = cfg_.job_dir;
        set[kEnvUnitSize] = std::to_string(cfg_.settings.unit_size);
        set[kEnvLaunchUnits] = std::to_string(unit);
        std::vector<std::string> removed = step_env_removed();
        removed.insert(removed.end(), job_unset.begin(), job_unset.end());
        auto env = environment_with(set, removed);
        log_line(LogLevel::Info, kComponent,
                 std::string(joiner ? "joining" : "initial") + " unit " + std::to_string(unit) +
                     ": " + shell_join(argv));
        auto pid = spawn(argv, env);
        if (!pid) return Error{pid.error()};
        Step st;
        st.name = spec.name;
        st.pid = pid.value();
        st.units = {unit};
        st.joiner = joiner;
        steps_.push_back(std::move(st));
    }
    return Status::success();
}

bool Driver::any_running() const {
    return std::any_of(steps_.begin(), steps_.end(), [](const Step &s) { return s.running; });
}

// The ranks of `units` (members, and joiners not yet admitted) are gone: the coordinator
// hears it now instead of at a boundary timeout.
void Driver::report_lost(const std::vector<std::uint32_t> &lost, const std::string &what, const Snapshot *s) {
    if (!s) return;
    std::set<std::uint32_t> units(lost.begin(), lost.end());
    std::vector<std::string> ids;
    for (const auto &[id, unit] : s->members)
        if (units.count(unit)) ids.push_back(id);
    // Joiners not yet admitted: known by the ids omni-launch suggested (OMNI_MEMBER_ID).
    for (auto unit : lost)
        for (std::uint32_t slot = 0; slot < cfg_.settings.unit_size; ++slot) {
            std::string id = member_id(unit, slot);
            if (std::find(s->pending.begin(), s->pending.end(), id) != s->pending.end()) ids.push_back(id);
        }
    for (const auto &id : ids) {
        Request r;
        r.op = Op::Lost;
        r.id = id;
        if (auto stt = send(std::move(r)); !stt)
            log_line(LogLevel::Warning, kComponent, "reporting rank '" + id + "' lost: " + stt.error());
    }
    if (!ids.empty())
        log_line(LogLevel::Warning, kComponent,
                 std::to_string(ids.size()) + " rank(s) of " + what + " reported lost");
}

void Driver::reap() {
    for (auto &st : steps_) {
        if (!st.running) continue;
        auto ws = try_reap(st.pid);
        if (!ws) continue;
        st.running = false;
        st.exit_code = exit_code_of(*ws);
        const bool ours = st.terminated || st.killed;
        // A step omni-launch ended itself before any of its units joined a generation
        // (joiners left over when the job ended) is not a failure of the ranks.
        const bool counts = st.exit_code != 0 && !(ours && !st.admitted);
        log_line(st.exit_code == 0 || !counts ? LogLevel::Info : LogLevel::Warning, kComponent,
                 "step " + st.name + " (units [" + format_unit_list(st.units) + "]) ended, exit " +
                     std::to_string(st.exit_code) + (ours ? " (stopped by omni-launch)" : ""));
        st.failed = counts;
        if (st.exit_code != 0) {
            report_lost(st.units, "step " + st.name, last_snapshot_ ? &*last_snapshot_ : nullptr);
            if (st.joiner && !st.admitted && !ours && last_snapshot_ && last_snapshot_->target)
                abandon_grow(*last_snapshot_, "joining step " + st.name + " failed before its units joined");
        }
    }
}

void Driver::record(GenerationEvent e) {
    if (!events_) return;  // a satellite: the main omni-launch records the job's changes
    e.unix_ms = unix_ms();
    e.job = alloc_.job_id;
    e.resolution_ms = kPollMs;
    log_line(e.reason == "lost" ? LogLevel::Warning : LogLevel::Info, kComponent, event_summary(e));
    if (auto st = events_->append(event_to_json(e)); !st)
        log_line(LogLevel::Error, kComponent, st.error());
}

// --metrics-file: at most once a second, and at once when the generation changed.
void Driver::write_metrics(const nlohmann::json &status) {
    constexpr std::int64_t kMetricsEveryMs = 1000;
    const std::int64_t now = mono_ms();
    const std::uint64_t generation = status.value("generation", std::uint64_t(0));
    if (now - metrics_written_ms_ < kMetricsEveryMs && generation == metrics_generation_) return;
    metrics_written_ms_ = now;
    metrics_generation_ = generation;
    auto st = write_file_atomically(cfg_.metrics, prometheus_text(status, alloc_.job_id));
    if (!st && !metrics_failed_)
        log_line(LogLevel::Warning, kComponent, "--metrics-file: " + st.error() + " (not retried in the log)");
    metrics_failed_ = !st;
}

// A change's event waits for its pause as the ranks measured it (the coordinator's
// change_pause_ms: from the decision until every rank of the new generation reported ready).
// It is recorded with omni-launch's own estimate instead when that cannot come any more: the
// generation changed again, a later boundary was decided (every rank reports ready before
// its next boundary), the job stopped, or kReadyWaitMs passed (a rank died in the change).
void Driver::settle_pending(const Snapshot *s, std::int64_t now) {
    constexpr std::int64_t kReadyWaitMs = 10000;
    if (!pending_) return;
    if (s && s->generation == pending_->generation && s->change_pause_ms) {
        pending_->pause_ms = *s->change_pause_ms;
        pending_->pause_source = "ranks";
    } else if (s && s->generation == pending_->generation && s->phase == "running" &&
               s->last_step <= pending_->step && now - pending_since_ < kReadyWaitMs) {
        return;  // still waiting
    }
    record(std::move(*pending_));
    pending_.reset();
}

void Driver::observe(const Snapshot &s) {
    const std::int64_t now = mono_ms();
    settle_pending(&s, now);
    if (s.boundary_step && !boundary_seen_ms_.count(*s.boundary_step))
        boundary_seen_ms_[*s.boundary_step] = now;
    auto member = [&](std::uint32_t u) { return std::find(s.unit_ids.begin(), s.unit_ids.end(), u) != s.unit_ids.end(); };
    for (auto &st : steps_)
        if (std::any_of(st.units.begin(), st.units.end(), member)) st.admitted = true;
    for (auto &sat : satellites_)
        if (std::any_of(sat.units.begin(), sat.units.end(), member)) sat.admitted = true;
    if (s.generation != seen_generation_ && s.generation > 0) {
        GenerationEvent e;
        e.old_generation = seen_generation_;
        e.generation = s.generation;
        e.old_world = seen_world_;
        e.new_world = s.world;
        e.old_units = seen_units_;
        e.new_units = s.unit_ids;
        e.detail = s.change_reason;
        e.kind = s.resize_kind;
        e.step = s.change_step;
        e.reason = event_reason("reshaped", s.change_reason, seen_generation_);
        if (seen_generation_ == 0) {
            e.pause_ms = now - launched_ms_;
            e.pause_source = "launch";
        } else if (auto it = boundary_seen_ms_.find(s.change_step); it != boundary_seen_ms_.end()) {
            e.pause_ms = now - it->second;
        }
        if (s.generation > seen_generation_ + 1 && seen_generation_ > 0)
            log_line(LogLevel::Warning, kComponent,
                     "generations " + std::to_string(seen_generation_ + 1) + ".." +
                         std::to_string(s.generation - 1) + " passed between two polls");
        if (seen_generation_ == 0) {
            record(std::move(e));
        } else {
            pending_ = std::move(e);
            pending_since_ = now;
            settle_pending(&s, now);  // already known when the ranks were quick
        }
        if (seen_generation_ > 0) last_resize_ms_ = now;
        seen_generation_ = s.generation;
        seen_world_ = s.world;
        seen_units_ = s.unit_ids;
        boundary_seen_ms_.erase(boundary_seen_ms_.begin(), boundary_seen_ms_.upper_bound(s.change_step));
    }
    if (s.phase == "stopped" && !stop_recorded_) {
        settle_pending(nullptr, now);
        GenerationEvent e;
        e.old_generation = seen_generation_;
        e.generation = seen_generation_;
        e.old_world = seen_world_;
        e.new_world = 0;
        e.old_units = seen_units_;
        e.reason = "stop";
        e.detail = s.change_reason.empty() ? "stopped" : s.change_reason;
        e.step = s.change_step;
        if (auto it = boundary_seen_ms_.find(s.change_step); it != boundary_seen_ms_.end())
            e.pause_ms = now - it->second;
        // The runtime asks for this stop when Slurm sends the ranks SIGTERM (preemption).
        ranks_signalled_ = e.detail.rfind("SIGTERM to rank", 0) == 0;
        const std::string why = "the coordinator decided STOP (" + e.detail + ")";
        record(std::move(e));
        stop_recorded_ = true;
        begin_shutdown(why);
    }
}

void Driver::maybe_grow(const Snapshot &s) {
    // A grow that was withdrawn or replaced: its satellites that have not joined go.
    if (!s.target || *s.target <= s.units) {
        grow_failed_target_.reset();  // withdrawn: the same size may be asked again
        cancel_satellites("no grow is requested any more", false);
        cancel_expansion("no grow is requested any more");
    }
    if (s.phase != "running" || !s.target || *s.target <= s.units || shutdown_deadline_) return;
    if (grow_failed_target_ && *grow_failed_target_ == *s.target) return;
    std::uint32_t outstanding = 0;  // launched joiner units not yet in a generation
    auto waiting = [&](std::uint32_t u) { return std::find(s.unit_ids.begin(), s.unit_ids.end(), u) == s.unit_ids.end(); };
    for (const auto &st : steps_)
        if (st.joiner && st.running) outstanding += std::count_if(st.units.begin(), st.units.end(), waiting);
    for (const auto &sat : satellites_)
        if (!sat.ended && !sat.cancelled) outstanding += std::count_if(sat.units.begin(), sat.units.end(), waiting);
    // An expansion under way: the rest of a larger grow waits for it to end.
    if (expansion_ && !expansion_->over()) return;
    if (s.units + outstanding >= *s.target) return;
    std::uint32_t need = *s.target - s.units - outstanding;
    // Unit ids are never reused (a joiner must not be mistaken for a unit that left), and
    // ranks accept ids below kMaxUnits only.
    if (std::uint64_t(next_unit_) + need > kMaxUnits) {
        abandon_grow(s, "cannot grow: this job has used all " + std::to_string(kMaxUnits) + " unit ids");
        return;
    }
    auto route = grow_route(s.target_via.empty() ? kViaAllocation : s.target_via);
    if (!route) {
        abandon_grow(s, "cannot grow via " + s.target_via + ": " + route.error());
        return;
    }
    std::vector<std::uint32_t> units;
    for (std::uint32_t i = 0; i < need; ++i) units.push_back(next_unit_++);  // ids never reused
    const std::string where = route.value() == kViaSatellite ? " in a satellite job"
                              : route.value() == kViaExpand  ? " on nodes Slurm's job expansion adds"
                                                             : "";
    log_line(LogLevel::Info, kComponent,
             "reshape to " + std::to_string(*s.target) + " units requested: starting " + std::to_string(need) +
                 " joining unit(s)" + where);
    auto st = route.value() == kViaSatellite ? submit_satellite(units)
              : route.value() == kViaExpand  ? start_expansion(units)
                                             : launch(units, true);
    if (!st) abandon_grow(s, "cannot start joining units: " + st.error());
}

// A grow whose units cannot come is withdrawn (the coordinator's target goes back to the
// job's size), so that omni-ctl and the status say so; it is never retried on its own.
void Driver::abandon_grow(const Snapshot &s, const std::string &why) {
    if (!s.target) return;
    grow_failed_target_ = s.target;
    Request r;
    r.op = Op::Reshape;
    r.units = s.units;
    auto st = send(std::move(r));
    log_line(LogLevel::Error, kComponent,
             why + "; the grow to " + std::to_string(*s.target) + " units is " +
                 (st ? "withdrawn" : "not retried (withdrawing it: " + st.error() + ")") +
                 " (request it again with omni-ctl grow)");
}

Status Driver::submit_satellite(const std::vector<std::uint32_t> &units) {
    constexpr std::int64_t kSlurmTimeoutMs = 30000;
    if (alloc_.job_id == 0) return make_error("a grow via satellite needs omni-launch to run inside a Slurm job");
    SatelliteSpec spec;
    spec.main_job = alloc_.job_id;
    spec.units = units;
    spec.unit_size = cfg_.settings.unit_size;
    const GrowShape shape =
        grow_shape(static_cast<std::uint32_t>(units.size()), cfg_.settings.unit_size, cfg_.settings.capacity);
    spec.nodes = shape.nodes;
    spec.tasks_per_node = shape.tasks_per_node;
    auto job = own_job(0);
    if (!job) return Error{job.error()};
    spec.partition = job.value().partition;
    spec.tres_per_node = job.value().tres_per_node;
    spec.exclusive = job.value().exclusive;
    spec.sbatch_extra = cfg_.options.satellite_args;
    spec.self = cfg_.self;
    spec.srun_extra = cfg_.options.srun_args;
    spec.mpi = cfg_.mpi;
    spec.boundary_timeout_ms = cfg_.options.boundary_timeout_ms;
    spec.program = cfg_.options.program;
    // sbatch reads the script when it submits (Slurm keeps its own copy), so the file in the
    // job's private directory lives only for the call.
    const std::string script = cfg_.job_dir + "/satellite.sh";
    if (auto st = write_file_atomically(script, satellite_script(spec)); !st) return st;
    auto id = submit_batch(satellite_sbatch_args(spec), script,
                           satellite_env_set(spec, cfg_.endpoint, cfg_.secret, cfg_.job_dir),
                           satellite_env_unset(environ), kSlurmTimeoutMs);
    ::unlink(script.c_str());
    if (!id) return Error{id.error()};
    Satellite sat;
    sat.job_id = id.value();
    sat.units = units;
    sat.submitted_ms = mono_ms();
    satellites_.push_back(std::move(sat));
    log_line(LogLevel::Info, kComponent,
             "submitted satellite job " + std::to_string(id.value()) + " (" + satellite_job_name(alloc_.job_id) +
                 ") for units [" + format_unit_list(units) + "]");
    return Status::success();
}

// The way a grow's units come: `via` as asked, where "expand" and "auto" ask Slurm whether
// the job can be expanded (launch/expansion.h); "auto" falls back to a satellite. A site's
// plugstack.conf grow=satellite|expand is what "auto" means there, and the only route out of
// the job's allocation it allows.
Result<std::string> Driver::grow_route(const std::string &asked) {
    constexpr std::int64_t kSlurmTimeoutMs = 10000;
    const std::string &site = cfg_.site_grow;
    if ((asked == kViaSatellite || asked == kViaExpand) && site != kViaAuto && asked != site)
        return make_error("this cluster grows jobs by " + site + " only (plugstack.conf grow=" + site + ")");
    const std::string via = asked == kViaAuto && site != kViaAuto ? site : asked;
    if (via != kViaExpand && via != kViaAuto) return via;
    auto refusal = [&]() -> Result<std::optional<std::string>> {
        if (alloc_.job_id == 0) return std::optional<std::string>("omni-launch runs inside no Slurm job");
        auto job = own_job(0);
        if (!job) return Error{job.error()};
        auto config = run_capture({"scontrol", "show", "config"}, kSlurmTimeoutMs);
        if (!config) return Error{config.error()};
        return expansion_refusal(parse_config_value(config.value(), "SchedulerParameters").value_or(""),
                                 parse_config_value(config.value(), "SelectType").value_or(""), job.value());
    }();
    if (!refusal) return Error{refusal.error()};
    if (!refusal.value()) return std::string(kViaExpand);
    if (via == kViaExpand) return make_error(*refusal.value());
    log_line(LogLevel::Info, kComponent, "growing by satellite, not by expansion: " + *refusal.value());
    return std::string(kViaSatellite);
}

// The helper allocation of an expansion: salloc --no-shell waits (pending) until Slurm grants
// it; poll_expansion takes it from there.
Status Driver::start_expansion(const std::vector<std::uint32_t> &units) {
    constexpr std::int64_t kJustReadMs = 5000;  // grow_route read the job a moment ago
    auto job = own_job(kJustReadMs);
    if (!job) return Error{job.error()};
    ExpansionSpec spec;
    spec.main_job = alloc_.job_id;
    const GrowShape shape =
        grow_shape(static_cast<std::uint32_t>(units.size()), cfg_.settings.unit_size, cfg_.settings.capacity);
    spec.nodes = shape.nodes;
    spec.tasks_per_node = shape.tasks_per_node ? shape.tasks_per_node : cfg_.settings.unit_size;
    spec.partition = job.value().partition;
    spec.exclusive = job.value().exclusive;
    spec.exclude = job.value().nodes;
    const auto argv = expansion_salloc_argv(spec);
    log_line(LogLevel::Info, kComponent,
             "asking Slurm to expand job " + std::to_string(alloc_.job_id) + " for units [" +
                 format_unit_list(units) + "]: " + shell_join(argv));
    // salloc's messages go to a file: it ends every merged helper with "Job allocation H
    // has been revoked", which is not an error here; its last line explains a refusal.
    auto pid = spawn_to_file(argv, environment_with({}, satellite_env_unset(environ)), cfg_.job_dir + "/salloc.out");
    if (!pid) return Error{pid.error()};
    if (expansion_ && expansion_->helper) past_helpers_.insert(expansion_->helper);
    Expansion x;
    x.salloc = pid.value();
    x.units = units;
    x.asked_ms = mono_ms();
    expansion_ = std::move(x);
    return Status::success();
}

// While the helper is pending, squeue twice a second in the background (its id and state);
// once Slurm runs it, its nodes become the job's and the units start there. salloc itself
// exits a moment after the grant (it waits for the nodes to boot), or with an error when Slurm
// refuses the request.
void Driver::poll_expansion(const Snapshot &s) {
    constexpr std::int64_t kEveryMs = 500, kSlurmTimeoutMs = 10000;
    if (!expansion_) return;
    Expansion &x = *expansion_;
    if (x.salloc > 0)
        if (auto ws = try_reap(x.salloc)) {
            x.salloc = -1;
            x.salloc_exit = exit_code_of(*ws);
            x.salloc_exit_ms = mono_ms();
        }
    auto answer = expansion_look_.take();
    if (x.over()) return;
    const std::string name = expansion_job_name(alloc_.job_id);
    expansion_look_.start_every(mono_ms(), kEveryMs, [name] { return live_jobs_named(name, kSlurmTimeoutMs); });
    if (!answer || answer->started_ms < x.asked_ms) return;
    const LiveJobs &live = answer->value;
    if (!live) {
        log_line(LogLevel::Warning, kComponent, live.error());
        return;
    }
    for (const auto &[id, state] : live.value()) {
        if (x.helper == 0 && !past_helpers_.count(id)) x.helper = id;
        if (id != x.helper || state == x.state) continue;
        log_line(LogLevel::Info, kComponent, "expansion helper job " + std::to_string(id) + " (" + name + ") is " + state);
        x.state = state;
    }
    const bool running = x.helper != 0 && live.value().count(x.helper) && x.state == "RUNNING";
    if (!running) {
        // Pending, or salloc has ended and no look since has seen the helper run.
        if (!x.salloc_exit || answer->started_ms < x.salloc_exit_ms) return;
        x.failed = true;
        if (x.helper) (void) cancel_jobs({x.helper}, kSlurmTimeoutMs);
        std::string said;
        std::ifstream in(cfg_.job_dir + "/salloc.out");
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) said = line.substr(0, 300);
        abandon_grow(s, "Slurm did not grant the expansion's helper allocation (salloc exit " +
                            std::to_string(*x.salloc_exit) + (said.empty() ? "" : ": " + said) + ")");
        return;
    }
    // The merge: two scontrol updates, once per grow, on the loop (bounded by their timeouts).
    const std::int64_t granted = mono_ms();
    if (auto st = merge_expansion(alloc_.job_id, x.helper, kSlurmTimeoutMs); !st) {
        x.failed = true;
        (void) cancel_jobs({x.helper}, kSlurmTimeoutMs);
        abandon_grow(s, st.error());
        return;
    }
    x.merged = true;
    log_line(LogLevel::Info, kComponent,
             "helper job " + std::to_string(x.helper) + " running " + std::to_string(granted - x.asked_ms) +
                 " ms after the request; its nodes are job " + std::to_string(alloc_.job_id) + "'s " +
                 std::to_string(mono_ms() - granted) + " ms later");
    if (auto st = launch(x.units, true); !st) abandon_grow(s, "cannot start joining units: " + st.error());
}

// A pending expansion goes: its helper job is cancelled (salloc then exits) and its units
// never start.
void Driver::cancel_expansion(const std::string &why) {
    constexpr std::int64_t kSlurmTimeoutMs = 10000;
    if (!expansion_ || expansion_->over()) return;
    Expansion &x = *expansion_;
    x.cancelled = true;
    if (x.helper == 0) {
        if (auto live = live_jobs_named(expansion_job_name(alloc_.job_id), kSlurmTimeoutMs))
            for (const auto &[id, state] : live.value())
                if (!past_helpers_.count(id)) x.helper = id;
    }
    log_line(LogLevel::Info, kComponent,
             why + ": cancelling the expansion" + (x.helper ? " (helper job " + std::to_string(x.helper) + ")" : ""));
    if (x.helper)
        if (auto st = cancel_jobs({x.helper}, kSlurmTimeoutMs); !st) log_line(LogLevel::Warning, kComponent, st.error());
    if (x.salloc > 0) ::kill(x.salloc, SIGTERM);
}

// squeue once a second while a satellite's units have not joined, or have left: its state,
// and its end. One that ends before any of its units joined fails the grow it was for (Slurm
// could not run it, or it was cancelled from outside). While every live satellite's units are
// members, the coordinator tells of them (a unit that leaves or is lost), and squeue only
// watches for the end: every 30 s, not three RPCs a second for as long as the job stays grown.
void Driver::poll_satellites(const Snapshot &s) {
    constexpr std::int64_t kEveryMs = 1000, kJoinedEveryMs = 30000, kSqueueTimeoutMs = 10000;
    auto answer = satellites_look_.take();
    if (std::all_of(satellites_.begin(), satellites_.end(), [](const Satellite &x) { return x.ended; })) return;
    // In flight: a satellite whose units have not joined, or whose units are members no more
    // (they left, preempted, or were lost): its job is ending, and a grow may wait for that.
    std::set<std::uint32_t> member_units;
    for (const auto &m : s.members) member_units.insert(m.second);
    const bool changing = std::any_of(satellites_.begin(), satellites_.end(), [&](const Satellite &x) {
        if (x.ended) return false;
        if (x.cancelled) return !x.admitted;  // its end clears joiners that came after the cancel
        return !x.admitted || std::none_of(x.units.begin(), x.units.end(),
                                           [&](std::uint32_t u) { return member_units.count(u) > 0; });
    });
    satellites_look_.start_every(mono_ms(), changing ? kEveryMs : kJoinedEveryMs,
                                 [name = satellite_job_name(alloc_.job_id)] {
        return live_jobs_named(name, kSqueueTimeoutMs);
    });
    if (!answer) return;
    const LiveJobs &live = answer->value;
    if (!live) {
        log_line(LogLevel::Warning, kComponent, live.error());
        return;
    }
    for (auto &sat : satellites_) {
        if (sat.ended || answer->started_ms < sat.submitted_ms) continue;
        const std::string what = "satellite job " + std::to_string(sat.job_id);
        auto it = live.value().find(sat.job_id);
        if (it != live.value().end()) {
            if (it->second != sat.state)
                log_line(LogLevel::Info, kComponent, what + " is " + it->second);
            sat.state = it->second;
            continue;
        }
        sat.ended = true;
        if (sat.cancelled) {
            // Its ranks that registered as joiners after the cancel (the satellite had just
            // started) wait in the coordinator for a grow that will not come, and a joiner
            // waiting keeps the policy from deciding anything ("a change is in flight"):
            // reported lost now that the job is gone (the cancel reported those it saw).
            if (!sat.admitted) report_lost(sat.units, what, &s);
            continue;
        }
        if (sat.admitted) {
            log_line(LogLevel::Info, kComponent, what + " ended (units [" + format_unit_list(sat.units) + "])");
            continue;
        }
        report_lost(sat.units, what, &s);
        if (s.target && *s.target > s.units) abandon_grow(s, what + " ended before its units joined");
    }
}

// Satellites whose units have not joined (or every one, `joined_too`, when the job ends).
void Driver::cancel_satellites(const std::string &why, bool joined_too) {
    constexpr std::int64_t kScancelTimeoutMs = 10000;
    std::vector<std::uint32_t> ids;
    for (auto &sat : satellites_) {
        if (sat.ended || sat.cancelled || (sat.admitted && !joined_too)) continue;
        sat.cancelled = true;
        ids.push_back(sat.job_id);
        // Its joiners waiting in the coordinator will not come (members stop with the job).
        if (!sat.admitted)
            report_lost(sat.units, "satellite job " + std::to_string(sat.job_id),
                        last_snapshot_ ? &*last_snapshot_ : nullptr);
    }
    if (ids.empty()) return;
    std::vector<std::string> names;
    for (auto id : ids) names.push_back(std::to_string(id));
    log_line(LogLevel::Info, kComponent, why + ": cancelling satellite job(s) " + join(names, ","));
    if (auto st = cancel_jobs(ids, kScancelTimeoutMs); !st) log_line(LogLevel::Warning, kComponent, st.error());
}

// At the end: satellites whose units trained end with the training (given a moment); any
// other is cancelled, so that none outlives the job. Those cancelled already are not waited
// for, and a failing squeue ends the wait: the cluster may be going down with the job.
void Driver::finish_satellites() {
    constexpr std::int64_t kEndWaitMs = 10000, kSlurmTimeoutMs = 10000;
    auto open = [](const Satellite &x) { return !x.ended && !x.cancelled; };
    if (std::none_of(satellites_.begin(), satellites_.end(), open)) return;
    const std::int64_t deadline = mono_ms() + kEndWaitMs;
    for (;;) {
        auto live = live_jobs_named(satellite_job_name(alloc_.job_id), kSlurmTimeoutMs);
        if (!live) break;
        bool waiting = false;
        for (auto &sat : satellites_) {
            if (!live.value().count(sat.job_id)) sat.ended = true;
            waiting = waiting || (open(sat) && sat.admitted);
        }
        if (!waiting || mono_ms() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::vector<std::uint32_t> left;
    std::vector<std::string> names;
    for (const auto &sat : satellites_)
        if (open(sat)) {
            left.push_back(sat.job_id);
            names.push_back(std::to_string(sat.job_id));
        }
    if (left.empty()) return;
    log_line(LogLevel::Info, kComponent, "the job is over: cancelling satellite job(s) " + join(names, ","));
    if (auto st = cancel_jobs(left, kSlurmTimeoutMs); !st) log_line(LogLevel::Warning, kComponent, st.error());
}

// A satellite's first signal (scancel, preemption with a GraceTime): its units that are
// members leave at the next boundary as a planned shrink would make them, so nothing is
// recomputed. When that cannot be (no unit has joined, or the rest of the job would break
// its GA or elastic range), the steps end now and the job recovers from the loss.
// Slurm preempting a satellite with a GraceTime sends SIGCONT and SIGTERM to the job's steps,
// not to its batch script (slurmctld's _job_check_grace: job_signal with no flags, which
// slurmd applies to every step but the batch one). The ranks ignore that SIGTERM, and the
// first task of each step leaves a sentinel that asks Slurm to pass it on to this process as
// SIGURG (omni-launch --exec-task): omni-launch reads the job then and finds PreemptTime set.
// It also reads it at start and every 120 s, in case the signal was lost (a slurmd down
// at that moment, the sentinel unable to run scancel): the units are then lost at the end of
// the grace time instead, and the job recovers from that. Read every 2 s, as it was, a joined
// satellite cost slurmctld 1.5 RPC/s (a job read is three RPCs) for as long as it ran.
void Driver::watch_preemption() {
    auto answer = preempt_look_.take();
    if (answer) preempt_failures_ = answer->value ? 0 : preempt_failures_ + 1;
    if (alloc_.job_id == 0 || leaving_ || shutdown_deadline_) return;
    look_at_job_on_news(preempt_look_, preempt_news_read_, preempt_failures_);
    if (!answer) return;
    const Result<JobInfo> &job = answer->value;
    if (!job) {
        log_line(LogLevel::Warning, kComponent, job.error());
        return;
    }
    if (!job.value().preempted) return;
    leave_job("Slurm is preempting satellite job " + std::to_string(alloc_.job_id), kCausePreemption);
}

// Starts `look` at this job (scontrol show job, in the background) when a SIGURG came since
// the last one started (`news_read`: the count it started after), else every kSafetyMs, in
// case a signal was lost. News that came while a look was in flight may postdate what that
// look read: it is only used up by a look started after it. A look that failed (`failures`
// in a row) is tried again after 1, 2, 4 .. s, not at the next safety look: the news it was
// for is used up, and slurmctld stopped right after job_submit/omni's SIGURG (a restart)
// can fail the look at once instead of keeping scontrol waiting until it is back. Seen with
// Slurm 24.11.5 (faults-daemons.sh under scripts/test, twice): the deferred shrink was not
// read again within 10 s of the restart; 24.11's slurmctld serves its RPCs through conmgr,
// which closes the connections it holds when it stops.
void Driver::look_at_job_on_news(BackgroundLook<Result<JobInfo>> &look, int &news_read, int failures) {
    constexpr std::int64_t kSafetyMs = 120000, kScontrolTimeoutMs = 10000;
    const int news = cfg_.slurm_news ? cfg_.slurm_news->load() : 0;
    const bool fresh = news != news_read && !look.in_flight();
    if (fresh) news_read = news;
    const std::int64_t retry_ms = failures > 0 ? std::min<std::int64_t>(kSafetyMs, 1000LL << std::min(failures - 1, 7))
                                               : kSafetyMs;
    look.start_every(mono_ms(), fresh ? 0 : retry_ms,
                     [job_id = alloc_.job_id] { return load_job(job_id, kScontrolTimeoutMs); });
}

// A plain `scontrol update JobId=J NumNodes=N` (or NodeList=) that would take nodes where
// units run: job_submit/omni (job_submit/job_submit_omni.c) keeps Slurm from applying it,
// records the nodes in the job's SystemComment and sends SIGURG to this process's group.
// omni-launch reads the job then (and at start, and every 120 s in case a signal was
// lost: a slurmd down at that moment) and hands the record to `omni-ctl shrink --nodes`
// (its units leave at the next boundary, then the nodes go back to Slurm), one record at a
// time; a record it acted on is not acted on again (the plugin writes a new one, with its
// time, for every request). A job read is three RPCs to slurmctld (the job, its nodes, the
// federation): polled every 3 s, as it was, that made an idle job cost slurmctld 1 RPC/s.
void Driver::watch_release_request() {
    auto answer = release_look_.take();
    if (answer) release_failures_ = answer->value ? 0 : release_failures_ + 1;
    if (!release_watch_ || alloc_.job_id == 0 || shutdown_deadline_ || ctl_shrink_running()) return;
    look_at_job_on_news(release_look_, release_news_read_, release_failures_);
    if (!answer) return;
    const Result<JobInfo> &job = answer->value;
    if (!job) {
        log_line(LogLevel::Warning, kComponent, job.error());
        return;
    }
    if (answer->started_ms >= own_job_ms_) {  // the freshest view of the job, for own_job()
        own_job_ = job.value();
        own_job_ms_ = answer->started_ms;
    }
    const std::string &record = job.value().release_request;
    if (record.empty() || record == release_handled_) return;
    release_handled_ = record;
    const std::string nodes = record.substr(0, record.rfind('@'));
    start_ctl_shrink({"--nodes", nodes, "--cause", kCauseScontrol},
                     "the shrink Slurm asked for (scontrol update of nodes " + nodes +
                         ", deferred by job_submit/omni): their units leave at the next boundary, then the "
                         "nodes go back");
}

// Where several units share a node, each unit's step asks for its share of the node
// (step_share_args): what the job holds on its smallest node, from Slurm's per-node details
// where scontrol answers, else from the batch environment (whose GPUs are the batch host's).
void Driver::size_shared_steps() {
    const Capacity &cap = cfg_.settings.capacity;
    if (cap.units_per_node <= 1) return;
    NodeShare node = cfg_.alloc.holding.node;
    if (alloc_.job_id != 0) {
        auto job = own_job(0);
        if (job && !job.value().cpus.empty()) {
            node = smallest_node(job.value());
        } else {
            log_line(LogLevel::Warning, kComponent,
                     "units share nodes and Slurm's per-node details of the job are unknown (" +
                         (job ? std::string("no details") : job.error()) + "); sizing the unit steps by the batch "
                         "environment");
        }
    }
    share_args_ = step_share_args(cfg_.settings.unit_size, cap, node, cfg_.options.srun_args);
    if (!share_args_.empty())
        log_line(LogLevel::Info, kComponent,
                 std::to_string(cap.units_per_node) + " units share each node: every unit's step asks for its share, " +
                     shell_join(share_args_));
    else if (node.cpus == 0)
        log_line(LogLevel::Warning, kComponent,
                 "units share nodes, but the job's CPUs per node are unknown; the unit steps ask for nothing of "
                 "their own (see omni-launch(1), BUGS)");
}

// The nodes of one unit's step: its Capacity's, never more than the job holds now.
std::uint32_t Driver::step_nodes() const {
    const std::uint32_t n = cfg_.settings.capacity.nodes_per_unit;
    return alloc_.nodes > 0 ? std::min(n, alloc_.nodes) : n;
}

// The job as `scontrol show job` shows it, read again when the last reading is older than
// max_age_ms (0: always, unless read this very millisecond): every reading of the job goes
// through here, so the deferred-shrink watch and the policy share one.
Result<JobInfo> Driver::own_job(std::int64_t max_age_ms) {
    constexpr std::int64_t kScontrolTimeoutMs = 10000;
    const std::int64_t now = mono_ms();
    if (own_job_ && now - own_job_ms_ <= max_age_ms) return *own_job_;
    auto job = load_job(alloc_.job_id, kScontrolTimeoutMs);
    if (!job) return job;
    own_job_ = job.value();
    own_job_ms_ = now;
    return job;
}

// omni-ctl shrink ARGS for this job, in the background (it drains the units at a boundary,
// waits for their steps, then gives the nodes back), one at a time. False when one runs
// already or it cannot start.
bool Driver::start_ctl_shrink(std::vector<std::string> args, const std::string &what) {
    if (ctl_shrink_running()) return false;
    const auto slash = cfg_.self.rfind('/');
    const std::string ctl = (slash == std::string::npos ? std::string() : cfg_.self.substr(0, slash + 1)) + "omni-ctl";
    std::vector<std::string> argv = {ctl, "--job-dir", cfg_.job_dir, "shrink", "--job-id", std::to_string(alloc_.job_id)};
    argv.insert(argv.end(), args.begin(), args.end());
    log_line(LogLevel::Info, kComponent, what + ": " + shell_join(argv));
    auto pid = spawn(argv, environment_with({}));
    if (!pid) {
        log_line(LogLevel::Warning, kComponent, "cannot start omni-ctl shrink: " + pid.error());
        return false;
    }
    ctl_shrink_pid_ = pid.value();
    ctl_shrink_what_ = what.substr(0, what.find(':'));
    return true;
}

bool Driver::ctl_shrink_running() {
    if (!ctl_shrink_pid_) return false;
    auto ws = try_reap(ctl_shrink_pid_);
    if (!ws) return true;
    const int code = exit_code_of(*ws);
    log_line(code == 0 ? LogLevel::Info : LogLevel::Warning, kComponent,
             ctl_shrink_what_ + (code == 0 ? std::string(" is done")
                                          : " failed (omni-ctl exit " + std::to_string(code) +
                                                "); the nodes stay in the job"));
    ctl_shrink_pid_ = 0;
    return false;
}

void Driver::record_policy(const PolicyDecision &d, std::uint32_t units) {
    log_line(LogLevel::Info, kComponent, "policy: " + d.reason);
    if (!events_) return;
    PolicyEvent e;
    e.unix_ms = unix_ms();
    e.job = alloc_.job_id;
    e.action = policy_action_name(d.action);
    e.units = units;
    e.target = d.target;
    e.why = d.reason;
    if (auto st = events_->append(policy_event_to_json(e)); !st)
        log_line(LogLevel::Error, kComponent, st.error());
}

// --omni-policy=auto: every `interval` seconds, one look at the job, its partition's waiting
// jobs and idle nodes (launch/policy.h decides), and the action: a grow by satellite, a
// shrink by omni-ctl (the same paths as omni-ctl grow and shrink), or the withdrawal of the
// policy's own grow whose satellite has not started.
void Driver::run_policy(const Snapshot &s) {
    constexpr std::int64_t kSlurmTimeoutMs = 10000;
    if (!policy_ || alloc_.job_id == 0 || shutdown_deadline_ || s.phase != "running") return;
    const std::int64_t now = mono_ms();
    const std::int64_t every = static_cast<std::int64_t>(policy_->options().interval) * 1000;
    if (!policy_look_.valid()) {
        // Time for a look: it runs in the background; the decision waits for its answer, on
        // the snapshot of the turn that finds it ready.
        if (now - policy_looked_ms_ < every) return;
        policy_looked_ms_ = now;
        policy_look_ = std::async(std::launch::async, [job_id = alloc_.job_id] {
            PolicyLook l;
            l.job = load_job(job_id, kSlurmTimeoutMs);
            if (l.job) l.pending = pending_jobs(l.job.value().partition, kSlurmTimeoutMs);
            if (l.pending) l.idle = idle_nodes(l.job.value().partition, kSlurmTimeoutMs);
            return l;
        });
        return;
    }
    if (policy_look_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    const PolicyLook look = policy_look_.get();
    const Result<JobInfo> &job = look.job;
    const Result<std::vector<PendingJob>> &pending = look.pending;
    const Result<std::vector<std::string>> &idle = look.idle;
    if (job) {  // what own_job() would have read: the freshest view of the job
        own_job_ = job.value();
        own_job_ms_ = mono_ms();
    }
    if (!job || !pending || !idle) {
        if (!policy_failed_)
            log_line(LogLevel::Warning, kComponent,
                     "policy: cannot read Slurm (" + (!job ? job.error() : !pending ? pending.error() : idle.error()) +
                         "); no decision until it answers (not repeated in the log)");
        policy_failed_ = true;
        return;
    }
    policy_failed_ = false;
    PolicyQueue q;
    q.idle_nodes = idle.value();
    for (const auto &p : pending.value())
        if (std::none_of(satellites_.begin(), satellites_.end(),
                         [&](const Satellite &sat) { return sat.job_id == p.job_id; }) &&
            !(expansion_ && expansion_->helper == p.job_id))
            q.pending.push_back(p);
    PolicyJob pj;
    pj.units = s.units;
    pj.min_units = cfg_.settings.min_units;
    pj.max_units = cfg_.settings.max_units;
    pj.nodes_per_unit = std::max<std::uint32_t>(1, cfg_.settings.capacity.nodes_per_unit);
    pj.units_per_node = std::max<std::uint32_t>(1, cfg_.settings.capacity.units_per_node);
    pj.priority = job.value().priority;
    pj.last_resize_ms = last_resize_ms_;
    pj.busy = s.target.has_value() || ctl_shrink_running() || !s.pending.empty();
    if (policy_grow_ && (!s.target || *s.target != *policy_grow_)) policy_grow_.reset();  // applied or withdrawn
    if (policy_grow_) {
        // Withdrawable while none of its satellites has started. The look's own squeue of the
        // waiting jobs is the freshest word: a satellite submitted before it began and not
        // among them has started (or ended). poll_satellites' state can be a second old, and
        // a satellite Slurm allocates in that second would be cancelled while its ranks join.
        // Slurm 26.05 allocates a batch job at the scheduler's next pass, not at once: a
        // satellite stays PENDING a moment (0.3 s measured) with the nodes idle, so a job of
        // higher priority submitted then waits and this withdrawal meets a starting satellite.
        const std::int64_t look_began = policy_looked_ms_;
        auto in_queue = [&](std::uint32_t id) {
            return std::any_of(pending.value().begin(), pending.value().end(),
                               [&](const PendingJob &p) { return p.job_id == id; });
        };
        const bool started = std::any_of(satellites_.begin(), satellites_.end(), [&](const Satellite &sat) {
            if (sat.cancelled) return false;
            if (sat.admitted || (sat.state != "SUBMITTED" && sat.state != "PENDING")) return true;
            return sat.submitted_ms <= look_began && !in_queue(sat.job_id);
        }) || (expansion_ && !expansion_->cancelled && (expansion_->merged || expansion_->state == "RUNNING"));
        if (!started) pj.policy_grow = policy_grow_;
    }
    const PolicyDecision d = policy_->decide(now, pj, q);
    if (d.report) record_policy(d, s.units);
    if (d.action == PolicyAction::Grow) {
        Request r;
        r.op = Op::Reshape;
        r.units = d.target;
        r.via = kViaAuto;
        r.cause = kCausePolicy;
        if (auto st = send(std::move(r)); !st) {
            log_line(LogLevel::Warning, kComponent, "policy: asking for the grow: " + st.error());
            return;
        }
        grow_failed_target_.reset();
        policy_grow_ = d.target;
    } else if (d.action == PolicyAction::Shrink) {
        start_ctl_shrink({"--units", std::to_string(d.target), "--cause", kCausePolicy},
                         "the policy's shrink to " + std::to_string(d.target) + " units");
    } else if (d.action == PolicyAction::Withdraw) {
        Request r;
        r.op = Op::Reshape;
        r.units = s.units;
        if (auto st = send(std::move(r)); !st)
            log_line(LogLevel::Warning, kComponent, "policy: withdrawing its grow: " + st.error());
        else
            policy_grow_.reset();
    }
}

// The job stopped at a boundary because Slurm signalled its steps. When that was Slurm
// preempting it (PreemptTime set), the checkpoint is written, but ending now would complete
// the job and take from the site's PreemptMode its say: up to Slurm 23.11, REQUEUE must find
// the job still running at the end of its GraceTime to requeue it (a requeued job resumes
// from that checkpoint). So omni-launch waits for Slurm's SIGTERM, or until the job is no
// longer being preempted.
//
// From Slurm 24.05 (SchedMD a689104d15) a job that ends after its preemption's grace-time
// signal counts as preempted: REQUEUE requeues it when its batch script ends, and that path
// clears the job's grace mark (GRACE_PREEMPT). Requeued at the grace time's end instead, by
// the preemption itself, the mark stays (24.05 through 26.05), so the requeued run, ending
// normally, is requeued once more and runs a third time (preempt-requeue.sh on 24.11.5:
// "runs of the batch script: got '3'"). There omni-launch ends the batch script at once,
// as Slurm would at the grace time's end: SIGTERM to its process group, which the batch
// shell (omni-launch's parent, without job control) shares; a script that traps it goes on
// as it would have then. The job is requeued seconds after the stop, not at GraceTime.
void Driver::await_preemption() {
    constexpr std::int64_t kLookEveryMs = 30000;
    if (alloc_.job_id == 0) return;
    auto job = own_job(0);
    if (!job || !job.value().preempted) return;
#ifndef OMNI_SLURM_VERSION_NUMBER
#error "config.h names no OMNI_SLURM_VERSION_NUMBER (configure reads it off slurm/slurm_version.h)"
#endif
#if OMNI_SLURM_VERSION_NUMBER >= (24 << 16) + (5 << 8)  // the Slurm built against
    // omni-launch as the batch step's own process (exec'd by the script) ends it by exiting.
    log_line(LogLevel::Info, kComponent,
             "Slurm is preempting job " + std::to_string(alloc_.job_id) +
                 ": the ranks stopped at a boundary with their checkpoint; ending the batch script now "
                 "(from Slurm 24.05 a job that ends in its grace time counts as preempted: its PreemptMode "
                 "decides whether it is requeued)");
    if (::getpgid(::getppid()) == ::getpgrp()) ::kill(0, SIGTERM);
    return;
#endif
    log_line(LogLevel::Info, kComponent,
             "Slurm is preempting job " + std::to_string(alloc_.job_id) +
                 ": the ranks stopped at a boundary with their checkpoint; waiting for Slurm to end the "
                 "job at its grace time (its PreemptMode decides whether it is requeued)");
    const int signals_before = signals_.load();
    std::int64_t looked = mono_ms();
    while (signals_.load() == signals_before) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
        if (mono_ms() - looked < kLookEveryMs) continue;
        looked = mono_ms();
        auto again = own_job(0);
        if (again && !again.value().preempted) return;
    }
    log_line(LogLevel::Info, kComponent, "Slurm is ending the preempted job");
}

void Driver::leave_job(const std::string &why, const char *cause) {
    leaving_ = true;
    std::vector<std::uint32_t> mine;
    if (last_snapshot_)
        for (auto u : cfg_.satellite_units)
            if (std::find(last_snapshot_->unit_ids.begin(), last_snapshot_->unit_ids.end(), u) !=
                last_snapshot_->unit_ids.end())
                mine.push_back(u);
    if (mine.empty()) {
        log_line(LogLevel::Info, kComponent, why + ": none of this satellite's units is in the job; ending its steps");
        shutdown_deadline_ = mono_ms();
        return;
    }
    Request r;
    r.op = Op::Reshape;
    r.units = last_snapshot_->units - static_cast<std::uint32_t>(mine.size());
    r.leave = mine;
    r.cause = cause;
    if (auto st = send(std::move(r)); !st) {
        log_line(LogLevel::Warning, kComponent, why + ": units [" + format_unit_list(mine) +
                                                    "] cannot leave at a boundary (" + st.error() +
                                                    "); ending the steps, the job recovers them as lost");
        shutdown_deadline_ = mono_ms();
        return;
    }
    begin_shutdown(why + ": units [" + format_unit_list(mine) + "] leave the job at the next boundary");
}

void Driver::begin_shutdown(const std::string &why) {
    if (shutdown_deadline_) return;
    shutdown_deadline_ = mono_ms() + cfg_.options.boundary_timeout_ms + kStopGraceExtraMs;
    log_line(LogLevel::Info, kComponent, why + "; waiting for the ranks to exit");
}

void Driver::enforce_shutdown() {
    const std::int64_t now = mono_ms();
    if (shutdown_deadline_ && now >= *shutdown_deadline_ && !kill_deadline_) {
        for (auto &st : steps_)
            if (st.running) {
                log_line(LogLevel::Warning, kComponent, "terminating step " + st.name + " (still running)");
                ::kill(st.pid, SIGTERM);
                st.terminated = true;
            }
        kill_deadline_ = now + kKillAfterTermMs;
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
        for (auto &st : steps_)
            if (st.running && !st.killed) {
                log_line(LogLevel::Warning, kComponent, "killing srun of step " + st.name);
                ::kill(st.pid, SIGKILL);
                st.killed = true;
            }
    }
}

int Driver::run() {
    if (!satellite()) {
        auto ev = EventLog::open(cfg_.events);
        if (!ev) {
            log_line(LogLevel::Error, kComponent, ev.error());
            return 1;
        }
        events_.emplace(std::move(ev.value()));
    }
    auto client = CoordinatorClient::connect(cfg_.endpoint, cfg_.secret);
    if (!client) {
        log_line(LogLevel::Error, kComponent, client.error());
        return 1;
    }
    client_ = std::move(client.value());
    std::vector<std::uint32_t> initial = cfg_.satellite_units;
    if (!satellite())
        for (std::uint32_t u = 0; u < cfg_.settings.units; ++u) initial.push_back(u);
    next_unit_ = cfg_.settings.units;
    size_shared_steps();
    if (!satellite() && alloc_.job_id != 0) {
        // Only job_submit/omni writes release records: without it, reading the job every few
        // seconds for them would only load slurmctld. Unknown: watch.
        constexpr std::int64_t kScontrolTimeoutMs = 10000;
        auto plugins = config_value("JobSubmitPlugins", kScontrolTimeoutMs);
        if (plugins) {
            release_watch_ = false;
            std::istringstream names(plugins.value());
            std::string name;
            while (std::getline(names, name, ','))
                if (name == "omni" || name == "job_submit/omni") release_watch_ = true;
            if (!release_watch_)
                log_line(LogLevel::Info, kComponent,
                         "slurmctld loads no job_submit/omni: a plain scontrol update that shrinks the job "
                         "kills the units on the nodes it takes (they are recovered as lost ranks)");
        }
    }
    launched_ms_ = mono_ms();
    if (policy_)
        log_line(LogLevel::Info, kComponent,
                 "elastic policy " + policy_text(policy_->options()) + " (--omni-policy): the job grows into idle "
                 "nodes and gives nodes back to waiting jobs of higher priority, within " +
                     std::to_string(cfg_.settings.min_units) + ".." + std::to_string(cfg_.settings.max_units) + " units");
    if (auto st = launch(initial, satellite()); !st) {
        log_line(LogLevel::Error, kComponent, st.error());
        return 1;
    }
    std::int64_t status_ok_ms = mono_ms();
    for (;;) {
        // Signals: the first one stops the job at the next boundary; another one ends the steps.
        int sig_count = signals_.load();
        if (sig_count > signals_handled_) {
            const int sig = last_signal_.load();
            const char *abbrev = sigabbrev_np(sig);
            const std::string name = abbrev ? std::string("signal SIG") + abbrev
                                            : "signal " + std::to_string(sig);
            if (satellite() && !leaving_) {
                leave_job("got " + name);
            } else if (signals_handled_ == 0 && !satellite()) {
                Request r;
                r.op = Op::Stop;
                r.reason = name;
                if (auto st = send(std::move(r)); !st)
                    log_line(LogLevel::Warning, kComponent, "asking the coordinator to stop: " + st.error());
                // The job is ending (scancel, preemption, its time limit): its satellites
                // end with it, within their KillWait, as Slurm ends this job.
                cancel_satellites("got " + name, true);
                cancel_expansion("got " + name);
                begin_shutdown("got " + name);
            } else {
                log_line(LogLevel::Warning, kComponent, "got " + name + " again: terminating the steps");
                shutdown_deadline_ = mono_ms();
            }
            signals_handled_ = sig_count;
        }
        reap();
        const bool last_look = !any_running();

        Request q;
        q.op = Op::Status;
        auto rep = client_->call(std::move(q), kStatusTimeoutMs);
        std::optional<Snapshot> snap;
        if (rep) {
            auto it = rep.value().body.find("status");
            if (it != rep.value().body.end()) {
                if (!cfg_.metrics.empty() && it->is_object()) write_metrics(*it);
                auto s = parse_snapshot(*it);
                if (s) snap = std::move(s.value());
                else log_line(LogLevel::Warning, kComponent, s.error());
            }
        }
        if (last_look) {
            // The steps are gone; one more look records a decision they acted on between
            // two polls (a STOP, typically) before the job's end is recorded.
            if (snap) {
                observe(*snap);
                last_snapshot_ = std::move(snap);
            }
            break;
        }
        if (snap) {
            status_ok_ms = mono_ms();
            observe(*snap);
            if (!satellite()) {
                maybe_grow(*snap);
                poll_satellites(*snap);
                poll_expansion(*snap);
                watch_release_request();
                run_policy(*snap);
            } else {
                watch_preemption();
            }
            // The ranks of every generation are gone, only joiners still wait: the training
            // ended without a STOP, and nothing will ever admit them. (A satellite's joiners
            // wait for the main job's ranks, which it does not see.)
            bool member_step_running = false;
            for (const auto &st : steps_)
                if (st.running && st.admitted) member_step_running = true;
            if (snap->phase == "running" && !member_step_running && !shutdown_deadline_ && !satellite()) {
                log_line(LogLevel::Info, kComponent, "every rank of generation " +
                                                         std::to_string(snap->generation) +
                                                         " has exited; ending the job's remaining steps");
                shutdown_deadline_ = mono_ms();
            }
            last_snapshot_ = std::move(snap);
        } else if (mono_ms() - status_ok_ms > kCoordinatorGoneMs && !shutdown_deadline_) {
            log_line(LogLevel::Error, kComponent, "the coordinator has not answered for " +
                                                      std::to_string(kCoordinatorGoneMs / 1000) +
                                                      " s: " + (rep ? "bad status" : rep.error()));
            own_failure_ = 1;
            shutdown_deadline_ = mono_ms();
        }
        enforce_shutdown();
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
    finish_satellites();
    cancel_expansion("the job is over");
    if (expansion_ && expansion_->salloc > 0) {
        // salloc exits once its helper is cancelled or merged; a stuck one is not waited for long.
        bool reaped = false;
        for (int i = 0; i < 50 && !(reaped = try_reap(expansion_->salloc).has_value()); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!reaped) ::kill(expansion_->salloc, SIGKILL);
    }
    // salloc's messages were for omni-launch (a refusal is logged): the job directory, which
    // omni-launch removes when it is empty, is not left behind for them.
    if (expansion_) ::unlink((cfg_.job_dir + "/salloc.out").c_str());
    if (ranks_signalled_ && !satellite()) await_preemption();
    const int status = exit_status();
    settle_pending(nullptr, mono_ms());
    if (!stop_recorded_) {
        // The ranks finished on their own (end of training): the job's last change.
        GenerationEvent e;
        e.old_generation = seen_generation_;
        e.generation = seen_generation_;
        e.old_world = seen_world_;
        e.old_units = seen_units_;
        e.reason = "stop";
        e.detail = status == 0 ? "ranks-finished" : "ranks-failed";
        e.step = last_snapshot_ ? last_snapshot_->last_step : 0;
        record(std::move(e));
    }
    // The job is over: its figures would only mislead a scraper.
    if (!cfg_.metrics.empty()) ::unlink(cfg_.metrics.c_str());
    log_line(status ? LogLevel::Warning : LogLevel::Info, kComponent,
             "all steps ended; exit status " + std::to_string(status));
    return status;
}

// The job's status is the trainer's (omni-launch(1), EXIT STATUS). A failed step whose units
// are not in the job's last generation, while that generation has members, is one the job
// recovered from: the survivors rewound and went on without it (it stays in the log and the
// events file). Of the other failures, a status a rank exited with on its own comes before a
// death by a signal: next to a SIGKILLed rank (137), survivors that stopped below the elastic
// minimum with status 3 make the job's status 3.
int Driver::exit_status() const {
    std::set<std::uint32_t> last_units;
    if (last_snapshot_)
        for (const auto &m : last_snapshot_->members) last_units.insert(m.second);
    int by_exit = 0, by_signal = 0;
    for (const Step &st : steps_) {
        if (!st.failed) continue;
        const bool recovered = !last_units.empty() &&
                               std::none_of(st.units.begin(), st.units.end(),
                                            [&](std::uint32_t u) { return last_units.count(u) > 0; });
        if (recovered) {
            log_line(LogLevel::Warning, kComponent,
                     "step " + st.name + " failed (exit " + std::to_string(st.exit_code) +
                         "); the job went on without units [" + format_unit_list(st.units) + "]");
            continue;
        }
        int &slot = st.exit_code < 128 ? by_exit : by_signal;
        if (!slot) slot = st.exit_code;
    }
    if (by_exit) return by_exit;
    if (by_signal) return by_signal;
    return own_failure_;
}

}  // namespace

int run_driver(const DriverConfig &cfg, const std::atomic<int> &signal_count,
               const std::atomic<int> &last_signal) {
    Driver d(cfg, signal_count, last_signal);
    return d.run();
}

}  // namespace omni::launcher
