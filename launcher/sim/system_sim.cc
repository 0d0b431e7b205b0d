// omni-sim's whole-system model; see sim/system_sim.h.
#include "sim/system_sim.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "balance/balance.h"
#include "runtime/ledger.h"

namespace omni::sim {

namespace {

constexpr System kSystems[] = {System::StaticFirst, System::StaticStage, System::Multiplex, System::Reorder,
                               System::Omni};

// One replica's share of a sample: a whole sample, or a split one's shard.
struct Item {
    double llm = 0;     // the LLM's forward time on the whole pipeline (the cost model's)
    double enc = 0;     // the encoders' forward time
    double tokens = 0;  // LLM tokens held: the activations of the whole LLM
};

struct StepSamples {
    std::vector<std::uint64_t> tokens;  // per sample, LLM tokens
    std::vector<double> enc;            // per sample, encoder forward time
};

// A replica's work a step, for the time model: forward plus backward of LLM and encoders.
double work(const Item &i, bool frozen) { return 3 * i.llm + (frozen ? 1 : 3) * i.enc; }

std::uint64_t whole_cost(double x) { return std::min(static_cast<std::uint64_t>(std::ceil(x)), balance::kMaxCost); }

// Sample i computed whole by one replica.
Item whole(const StepSamples &s, const balance::SpCostModel &m, std::size_t i) {
    return {m.time(s.tokens[i], 1), s.enc[i], static_cast<double>(s.tokens[i])};
}

// Every sample's work whole, as the planners' integer costs, padded with zeros to a multiple
// of `multiple` (partition() gives every part the same count).
std::vector<std::uint64_t> whole_costs(const SystemConfig &c, const StepSamples &s, std::size_t multiple) {
    std::vector<std::uint64_t> cost((s.tokens.size() + multiple - 1) / multiple * multiple, 0);
    for (std::size_t i = 0; i < s.tokens.size(); ++i)
        cost[i] = whole_cost(work(whole(s, c.lssp.cost, i), c.frozen_encoders));
    return cost;
}

// The replicas' items of an LSSP or static sequence-parallel plan.
std::vector<std::vector<Item>> items_of(const balance::LsspPlan &p, const StepSamples &s, const balance::SpCostModel &m,
                                        std::uint32_t replicas) {
    std::vector<std::vector<Item>> out(replicas);
    for (std::uint32_t r = 0; r < replicas; ++r)
        for (std::uint32_t i : p.whole[r]) out[r].push_back(whole(s, m, i));
    for (const balance::SpSample &x : p.split) {
        const double k = x.degree;
        const Item shard{m.time(s.tokens[x.position], x.degree), s.enc[x.position] / k,
                         std::ceil(static_cast<double>(s.tokens[x.position]) / k)};
        for (std::uint32_t r = x.first; r < x.first + x.degree; ++r) out[r].push_back(shard);
    }
    return out;
}

// Which replica computes which share of the step's samples under `system`.
Result<std::vector<std::vector<Item>>> assign(const SystemConfig &c, const StepSamples &s, System system,
                                              std::uint32_t replicas, bool *split) {
    const balance::SpCostModel &m = c.lssp.cost;
    const std::uint64_t longest = *std::max_element(s.tokens.begin(), s.tokens.end());
    *split = false;
    if (longest > c.lssp.memory_tokens) {
        // A static degree for every sample when one does not fit whole.
        auto p = balance::plan_static_sp(s.tokens, replicas, c.lssp);
        if (!p) return Error{p.error()};
        *split = !p.value().split.empty();
        return items_of(p.value(), s, m, replicas);
    }
    const std::vector<std::uint64_t> cost = whole_costs(c, s, 1);
    auto a =
        balance::partition(cost, replicas, system == System::Reorder ? balance::Policy::Kk : balance::Policy::None);
    if (!a) return Error{a.error()};
    std::vector<std::vector<Item>> out(replicas);
    for (std::uint32_t r = 0; r < replicas; ++r)
        for (std::uint32_t i : a.value()[r]) out[r].push_back(whole(s, m, i));
    return out;
}

// A replica's items in at most M micro-batches, one per item when it has fewer (a replica
// that computes one long sample's shard runs one micro-batch): packed in order (the static
// systems and multiplexing: sequences packed into micro-batches as they come, as static
// systems do), or by Karmarkar-Karp on their work (padded with empty items to a multiple of
// M: partition() gives every part the same count).
Result<std::vector<Item>> micro_batches(const std::vector<Item> &items, std::uint32_t M, bool balanced, bool frozen) {
    M = static_cast<std::uint32_t>(std::min<std::size_t>(M, items.size()));
    std::vector<Item> mb(M);
    const auto add = [&](std::uint32_t j, const Item &i) {
        mb[j].llm += i.llm;
        mb[j].enc += i.enc;
        mb[j].tokens += i.tokens;
    };
    if (items.empty()) return mb;
    if (!balanced) {
        // Packed in order: consecutive items, the cut points chosen so that the costliest
        // micro-batch is as cheap as it can be (bisection on its cost; a greedy pass checks
        // whether M micro-batches hold everything under it).
        const auto cuts = [&](double cap, bool place) {
            std::uint32_t j = 0;
            double sum = 0;
            for (const Item &i : items) {
                const double w = work(i, frozen);
                if (sum > 0 && sum + w > cap) {
                    ++j;
                    sum = 0;
                }
                sum += w;
                if (place && j < M) add(j, i);
            }
            return j + 1;
        };
        double lo = 0, hi = 0;
        for (const Item &i : items) {
            lo = std::max(lo, work(i, frozen));
            hi += work(i, frozen);
        }
        for (int k = 0; k < 60 && hi - lo > 1e-9 * hi; ++k) {
            const double mid = (lo + hi) / 2;
            (cuts(mid, false) <= M ? hi : lo) = mid;
        }
        mb.resize(std::min<std::size_t>(M, cuts(hi, false)));
        cuts(hi, true);
        return mb;
    }
    std::vector<std::uint64_t> cost((items.size() + M - 1) / M * M, 0);
    for (std::size_t i = 0; i < items.size(); ++i) cost[i] = whole_cost(work(items[i], frozen));
    auto a = balance::partition(cost, M, balance::Policy::Kk);
    if (!a) return Error{a.error()};
    for (std::uint32_t j = 0; j < M; ++j)
        for (std::uint32_t i : a.value()[j])
            if (i < items.size()) add(j, items[i]);
    return mb;
}

// MegaScale-Omni's micro-batches: the step's samples in M micro-steps of equal counts,
// balanced by Karmarkar-Karp on their work; each micro-step planned over the replicas by LSSP
// (its long samples split, the rest whole, least loaded first). Replica r's micro-batch j is
// its part of micro-step j, so micro-batch j costs about the same on every replica: LSSP
// balances within a micro-batch, where a pipeline feels a long sample (a 1F1B step of
// micro-batches w_j takes about (sum w + (S - 1) max w) / S on S stages). Each micro-step is
// planned on the loads of those before it, so the same replicas do not take the longest
// samples every time.
Result<std::vector<std::vector<Item>>> lssp_micro_batches(const SystemConfig &c, const StepSamples &s,
                                                          std::uint32_t replicas, bool *split) {
    const std::uint32_t M = c.micro_batches;
    const balance::SpCostModel &m = c.lssp.cost;
    const std::vector<std::uint64_t> cost = whole_costs(c, s, M);
    auto steps = balance::partition(cost, M, balance::Policy::Kk);
    if (!steps) return Error{steps.error()};
    std::vector<std::vector<Item>> out(replicas, std::vector<Item>(M));
    std::vector<double> load(replicas, 0);  // the LLM time each replica got so far
    *split = false;
    for (std::uint32_t j = 0; j < M; ++j) {
        StepSamples part;
        for (std::uint32_t i : steps.value()[j])
            if (i < s.tokens.size()) {
                part.tokens.push_back(s.tokens[i]);
                part.enc.push_back(s.enc[i]);
            }
        auto p = balance::plan_lssp(part.tokens, replicas, c.lssp, load);
        if (!p) return Error{p.error()};
        load = p.value().time;
        *split |= !p.value().split.empty();
        const auto items = items_of(p.value(), part, m, replicas);
        for (std::uint32_t r = 0; r < replicas; ++r)
            for (const Item &i : items[r]) {
                out[r][j].llm += i.llm;
                out[r][j].enc += i.enc;
                out[r][j].tokens += i.tokens;
            }
    }
    return out;
}

struct ReplicaRun {
    double makespan = 0, bubble = 0;
    std::vector<double> peak;
};

// One replica's pipeline: its micro-batches scheduled with the encoders placed as `system`
// does (E encoder GPUs for StaticStage), the schedule checked, its memory measured.
Result<ReplicaRun> run_replica(const SystemConfig &c, const std::vector<Item> &mb, System system, std::uint32_t E) {
    const std::uint32_t S = c.stages, M = static_cast<std::uint32_t>(mb.size());
    if (M == 0) return ReplicaRun{0, 1, std::vector<double>(S + (system == System::StaticStage), 0)};
    balance::PipelineSpec pipe;
    pipe.stages = S;
    pipe.micro_batches = M;
    pipe.forward.assign(S, 1.0 / S);
    pipe.backward.assign(S, 2.0 / S);
    double mean = 0;
    for (const Item &i : mb) {
        pipe.weight.push_back(i.llm);
        mean += i.llm / M;
    }
    pipe.transfer = c.transfer * mean / S;
    const double share = system == System::StaticStage ? 1.0 / E : 1.0;
    balance::EncoderWork enc;
    std::vector<double> llm_act, enc_act;
    for (const Item &i : mb) {
        enc.forward.push_back(i.enc * share);
        enc.backward.push_back(c.frozen_encoders ? 0 : 2 * i.enc * share);
        llm_act.push_back(i.tokens / S);
        enc_act.push_back(i.enc * share);
    }
    const balance::Insertion how = system == System::StaticFirst   ? balance::Insertion::FirstStage
                                   : system == System::StaticStage ? balance::Insertion::EncoderStage
                                                                   : balance::Insertion::Uniform;
    auto s = balance::schedule(pipe, enc, how);
    if (!s) return Error{s.error()};
    if (auto st = balance::check_schedule(s.value(), pipe, enc, how); !st) return Error{st.error()};
    auto peak = balance::peak_memory(s.value(), llm_act, enc_act);
    if (!peak) return Error{peak.error()};
    return ReplicaRun{s.value().makespan, gpu_bubble(s.value(), system == System::StaticStage ? E : 0),
                      std::move(peak).value()};
}

Status check(const SystemConfig &c) {
    const auto bad = [](const std::string &what) { return make_error(what); };
    if (c.stages == 0 || c.stages > balance::kMaxStages)
        return bad("stages " + std::to_string(c.stages) + ": expected 1.." + std::to_string(balance::kMaxStages));
    if (c.micro_batches == 0 || c.micro_batches > balance::kMaxMicroBatches)
        return bad("micro-batches " + std::to_string(c.micro_batches) + ": expected 1.." +
                   std::to_string(balance::kMaxMicroBatches));
    if (c.gpus == 0 || c.gpus % c.stages)
        return bad("gpus " + std::to_string(c.gpus) + ": expected a multiple of the stages (" +
                   std::to_string(c.stages) + ")");
    const std::uint32_t d = c.gpus / c.stages;
    if (c.lssp.max_degree == 0 || d % c.lssp.max_degree)
        return bad("gpus " + std::to_string(c.gpus) + ": " + std::to_string(d) +
                   " replicas, expected a multiple of the largest degree (" + std::to_string(c.lssp.max_degree) + ")");
    if (c.per_replica < c.micro_batches)
        return bad("samples per replica " + std::to_string(c.per_replica) + ": expected at least the micro-batches (" +
                   std::to_string(c.micro_batches) + ")");
    if (std::uint64_t(d) * c.per_replica > balance::kMaxSamples)
        return bad(std::to_string(std::uint64_t(d) * c.per_replica) + " samples a step: expected at most " +
                   std::to_string(balance::kMaxSamples));
    if (c.steps == 0 || c.steps > kMaxSystemSteps)
        return bad("steps " + std::to_string(c.steps) + ": expected 1.." + std::to_string(kMaxSystemSteps));
    if (!(c.transfer >= 0 && c.transfer < 1e6)) return bad("transfer: expected a number in [0, 1e6)");
    return Status::success();
}

// `system` with E encoder GPUs per replica (StaticStage; ignored by the others).
Result<SystemResult> simulate_with(const SystemConfig &c, const workload::Workload &w, System system, std::uint32_t E) {
    const std::uint32_t d = c.gpus / c.stages;
    const std::uint64_t B = std::uint64_t(d) * c.per_replica;
    auto made = launcher::Ledger::create({std::uint64_t(1) << 40, B, 1, c.seed}, d);
    if (!made) return Error{made.error()};
    launcher::Ledger ledger = std::move(made).value();
    for (std::uint64_t k = 0; k < c.first_step; ++k)
        if (auto st = ledger.commit_step(); !st) return Error{st.error()};
    SystemResult r;
    r.system = system;
    r.encoder_gpus = system == System::StaticStage ? E : 0;
    r.gpus = std::uint64_t(d) * (c.stages + r.encoder_gpus);
    r.samples_per_step = static_cast<double>(B);
    const bool balanced = system == System::Reorder || system == System::Omni;
    for (std::uint32_t k = 0; k < c.steps; ++k) {
        const std::string at = "step " + std::to_string(ledger.step() + 1) + ": ";
        StepSamples s;
        for (std::uint64_t i : ledger.step_samples()) {
            const workload::Sample smp = w.sample(c.seed, i, ledger.step());
            const std::uint64_t t = w.cost(smp, workload::CostKind::Tokens);
            s.tokens.push_back(t);
            s.enc.push_back(static_cast<double>(w.cost(smp, workload::CostKind::Compute) - t));
        }
        const std::uint64_t longest = *std::max_element(s.tokens.begin(), s.tokens.end());
        if (longest > c.lssp.memory_tokens * std::uint64_t(c.lssp.max_degree)) ++r.over_memory_steps;
        bool split = false;
        std::vector<std::vector<Item>> mbs(d);  // per replica, its micro-batches
        if (system == System::Omni) {
            auto mb = lssp_micro_batches(c, s, d, &split);
            if (!mb) return make_error(at + mb.error());
            mbs = std::move(mb).value();
        } else {
            auto items = assign(c, s, system, d, &split);
            if (!items) return make_error(at + items.error());
            for (std::uint32_t rep = 0; rep < d; ++rep) {
                auto mb = micro_batches(items.value()[rep], c.micro_batches, balanced, c.frozen_encoders);
                if (!mb) return make_error(at + mb.error());
                mbs[rep] = std::move(mb).value();
            }
        }
        r.split_steps += split;
        double slowest = 0, sum = 0;
        for (std::uint32_t rep = 0; rep < d; ++rep) {
            auto run = run_replica(c, mbs[rep], system, E);
            if (!run) return make_error(at + "replica " + std::to_string(rep) + ": " + run.error());
            slowest = std::max(slowest, run.value().makespan);
            sum += run.value().makespan;
            r.bubble += run.value().bubble / (static_cast<double>(d) * c.steps);
            if (r.peak_memory.size() < run.value().peak.size()) r.peak_memory.resize(run.value().peak.size(), 0);
            for (std::size_t g = 0; g < run.value().peak.size(); ++g)
                r.peak_memory[g] = std::max(r.peak_memory[g], run.value().peak[g]);
        }
        r.step_time += slowest / c.steps;
        r.imbalance += (sum > 0 ? slowest * d / sum : 1) / c.steps;
        if (auto st = ledger.commit_step(); !st) return Error{st.error()};
    }
    r.first_stage_memory = r.peak_memory.empty() ? 0 : r.peak_memory[r.encoder_gpus ? 1 : 0];
    return r;
}

}  // namespace

const char *system_name(System s) {
    switch (s) {
        case System::StaticFirst:
            return "static-first";
        case System::StaticStage:
            return "static-stage";
        case System::Multiplex:
            return "multiplex";
        case System::Reorder:
            return "reorder";
        default:
            return "omni";
    }
}

Result<System> parse_system(const std::string &text) {
    for (System s : kSystems)
        if (text == system_name(s)) return s;
    return make_error("system '" + text.substr(0, 32) +
                      "': expected static-first, static-stage, multiplex, reorder or omni");
}

bool is_static(System s) { return s == System::StaticFirst || s == System::StaticStage; }

Result<SystemResult> simulate_system(const SystemConfig &config, const workload::Workload &w, System system) {
    if (auto st = check(config); !st) return Error{st.error()};
    if (system != System::StaticStage) return simulate_with(config, w, system, 0);
    std::optional<SystemResult> best;
    for (std::uint32_t e = 1; e <= config.stages; ++e) {
        auto r = simulate_with(config, w, system, e);
        if (!r) return r;
        if (!best || r.value().throughput() > best->throughput()) best = std::move(r).value();
    }
    return std::move(best).value();
}

double gpu_bubble(const balance::Schedule &s, std::uint32_t encoder_gpus) {
    if (s.makespan <= 0) return 0;
    const double extra = encoder_gpus > 1 ? encoder_gpus - 1 : 0;
    double enc_busy = 0;
    if (extra > 0)
        for (const auto &o : s.stages.front()) enc_busy += o.end - o.start;
    return 1 - (s.busy + extra * enc_busy) / ((s.gpus + extra) * s.makespan);
}

}  // namespace omni::sim
