// Encoder work in the LLM pipeline; see balance/insertion.h.
#include "balance/insertion.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

namespace omni::balance {

const char *op_name(OpKind k) {
    switch (k) {
        case OpKind::Forward:
            return "F";
        case OpKind::Backward:
            return "B";
        case OpKind::EncoderForward:
            return "EF";
        default:
            return "EB";
    }
}

const char *insertion_name(Insertion i) {
    switch (i) {
        case Insertion::None:
            return "none";
        case Insertion::Front:
            return "front";
        case Insertion::FirstStage:
            return "first-stage";
        case Insertion::EncoderStage:
            return "encoder-stage";
        default:
            return "uniform";
    }
}

Result<Insertion> parse_insertion(const std::string &text) {
    for (Insertion i :
         {Insertion::None, Insertion::Front, Insertion::FirstStage, Insertion::EncoderStage, Insertion::Uniform})
        if (text == insertion_name(i)) return i;
    return make_error("insertion '" + text.substr(0, 32) +
                      "': expected none, front, first-stage, encoder-stage or uniform");
}

std::string Schedule::to_json() const {
    std::string out;
    char buf[160];
    std::snprintf(buf, sizeof buf, "{\"gpus\": %u, \"makespan\": %.17g, \"bubble\": %.17g, \"stages\": [", gpus,
                  makespan, bubble());
    out += buf;
    for (std::size_t g = 0; g < stages.size(); ++g) {
        out += g ? ",\n  [" : "\n  [";
        for (std::size_t i = 0; i < stages[g].size(); ++i) {
            const Op &o = stages[g][i];
            std::snprintf(buf, sizeof buf, "%s{\"op\": \"%s\", \"micro\": %u, \"start\": %.17g, \"end\": %.17g}",
                          i ? ", " : "", op_name(o.kind), o.micro, o.start, o.end);
            out += buf;
        }
        out += "]";
    }
    out += "]}\n";
    return out;
}

namespace {

struct Ref {
    OpKind kind;
    std::uint32_t micro;
};
using Order = std::vector<std::vector<Ref>>;

bool is_llm(OpKind k) { return k == OpKind::Forward || k == OpKind::Backward; }

// The layout's mapping of LLM stage s to its GPU stage (an encoder stage comes first).
struct Layout {
    std::uint32_t offset = 0;  // 1 with an encoder stage
    bool encoders = false;     // encoder ops exist (every insertion but None)
    std::uint32_t gpu_of(std::uint32_t llm_stage) const { return llm_stage + offset; }
};

bool has_backward(const EncoderWork &e, std::uint32_t j) { return e.backward[j] > 0; }

double duration(const PipelineSpec &p, const EncoderWork &e, const Layout &l, std::uint32_t gpu, const Ref &r) {
    switch (r.kind) {
        case OpKind::Forward:
            return p.llm_time(false, gpu - l.offset, r.micro);
        case OpKind::Backward:
            return p.llm_time(true, gpu - l.offset, r.micro);
        case OpKind::EncoderForward:
            return e.forward[r.micro];
        default:
            return e.backward[r.micro];
    }
}

// 1F1B on LLM stage s: min(S-s-1, M) forwards, then forward/backward pairs, then the rest of
// the backwards.
std::vector<Ref> one_f_one_b(std::uint32_t s, std::uint32_t S, std::uint32_t M, OpKind f, OpKind b) {
    std::vector<Ref> out;
    const std::uint32_t w = std::min(S - s - 1, M);
    for (std::uint32_t j = 0; j < w; ++j) out.push_back({f, j});
    for (std::uint32_t i = 0; i + w < M; ++i) {
        out.push_back({f, w + i});
        out.push_back({b, i});
    }
    for (std::uint32_t j = M - w; j < M; ++j) out.push_back({b, j});
    return out;
}

// Times of every op of `order` by list scheduling: each stage runs its ops in order, each as
// soon as the stage is free and its dependencies ended (plus the transfer between GPUs).
Result<Schedule> simulate(const PipelineSpec &p, const EncoderWork &e, const Layout &l, const Order &order) {
    const std::uint32_t S = p.stages, M = p.micro_batches;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> fwd(std::size_t(S) * M, nan), bwd(std::size_t(S) * M, nan), ef(M, nan), eb(M, nan);
    std::vector<std::uint32_t> ef_gpu(M, 0);
    Schedule s;
    s.gpus = static_cast<std::uint32_t>(order.size());
    s.stages.assign(order.size(), {});
    std::vector<std::size_t> next(order.size(), 0);
    std::vector<double> free(order.size(), 0);
    // The end of a dependency that ran on GPU `from`, as seen on GPU `to`; NaN: not yet.
    const auto seen = [&](double end, std::uint32_t from, std::uint32_t to) {
        return from == to ? end : end + p.transfer;
    };
    std::size_t left = 0;
    for (const auto &o : order) left += o.size();
    while (left) {
        bool progress = false;
        for (std::uint32_t g = 0; g < order.size(); ++g) {
            while (next[g] < order[g].size()) {
                const Ref &r = order[g][next[g]];
                double ready = free[g];
                const std::uint32_t ls = g - l.offset;  // the LLM stage (LLM ops only)
                const std::size_t at = std::size_t(ls) * M + r.micro;
                auto need = [&](double end, std::uint32_t from) {
                    if (std::isnan(end)) return false;
                    ready = std::max(ready, seen(end, from, g));
                    return true;
                };
                bool ok = true;
                switch (r.kind) {
                    case OpKind::Forward:
                        if (ls > 0)
                            ok = need(fwd[at - M], g - 1);
                        else if (l.encoders)
                            ok = need(ef[r.micro], ef_gpu[r.micro]);
                        break;
                    case OpKind::Backward:
                        ok = need(fwd[at], g) && (ls + 1 == S || need(bwd[at + M], g + 1));
                        break;
                    case OpKind::EncoderForward:
                        break;
                    case OpKind::EncoderBackward:
                        ok = need(bwd[r.micro], l.gpu_of(0));
                        break;
                }
                if (!ok) break;
                const double end = ready + duration(p, e, l, g, r);
                switch (r.kind) {
                    case OpKind::Forward:
                        fwd[at] = end;
                        break;
                    case OpKind::Backward:
                        bwd[at] = end;
                        break;
                    case OpKind::EncoderForward:
                        ef[r.micro] = end;
                        ef_gpu[r.micro] = g;
                        break;
                    case OpKind::EncoderBackward:
                        eb[r.micro] = end;
                        break;
                }
                s.stages[g].push_back({r.kind, r.micro, ready, end});
                s.busy += end - ready;
                s.makespan = std::max(s.makespan, end);
                free[g] = end;
                ++next[g];
                --left;
                progress = true;
            }
        }
        if (!progress) return make_error("insertion: the stages' orders wait on each other (a planner bug)");
    }
    return s;
}

Order llm_orders(const PipelineSpec &p, std::uint32_t offset) {
    Order o(p.stages + offset);
    for (std::uint32_t s = 0; s < p.stages; ++s)
        o[s + offset] = one_f_one_b(s, p.stages, p.micro_batches, OpKind::Forward, OpKind::Backward);
    return o;
}

// Stage 0's LLM order with each encoder backward right after its micro-batch's backward.
std::vector<Ref> with_encoder_backwards(const std::vector<Ref> &llm, const EncoderWork &e) {
    std::vector<Ref> out;
    for (const Ref &r : llm) {
        out.push_back(r);
        if (r.kind == OpKind::Backward && has_backward(e, r.micro)) out.push_back({OpKind::EncoderBackward, r.micro});
    }
    return out;
}

// Uniform insertion on the times of the pipeline without encoders (see insertion.h).
Result<Order> uniform_order(const PipelineSpec &p, const EncoderWork &e) {
    const Order base = llm_orders(p, 0);
    auto timed = simulate(p, e, Layout{0, false}, base);
    if (!timed) return Error{timed.error()};
    const Schedule &t = timed.value();
    const std::uint32_t S = p.stages, M = p.micro_batches;
    // Idle gaps per stage: before op k, [end of op k-1, start of op k); the last one open.
    struct Gap {
        double from, to;
        std::size_t before;  // insert before this op of the stage's base order (size: at the end)
    };
    std::vector<std::vector<Gap>> gaps(S);
    for (std::uint32_t g = 0; g < S; ++g) {
        double prev = 0;
        for (std::size_t k = 0; k < t.stages[g].size(); ++k) {
            if (t.stages[g][k].start > prev) gaps[g].push_back({prev, t.stages[g][k].start, k});
            prev = t.stages[g][k].end;
        }
        gaps[g].push_back({prev, std::numeric_limits<double>::infinity(), t.stages[g].size()});
    }
    // Where each base op of stage 0 starts: F(0, j)'s start is encoder forward j's deadline,
    // B(0, j)'s end its backward's release.
    std::vector<double> f0(M), b0(M);
    for (const Op &o : t.stages[0])
        (o.kind == OpKind::Forward ? f0 : b0)[o.micro] = o.kind == OpKind::Forward ? o.start : o.end;
    // Where F(g, j) and B(g, j) stand in stage g's order. Encoder forward j goes before F(g, j)
    // on its stage and backward j after B(g, j): times alone would allow the wrong side when
    // ops of no duration tie with a deadline, and the orders would then wait on each other.
    std::vector<std::vector<std::size_t>> fpos(S, std::vector<std::size_t>(M)), bpos = fpos;
    for (std::uint32_t g = 0; g < S; ++g)
        for (std::size_t k = 0; k < base[g].size(); ++k)
            (base[g][k].kind == OpKind::Forward ? fpos : bpos)[g][base[g][k].micro] = k;
    std::vector<double> load(S, 0);
    std::vector<std::vector<std::vector<Ref>>> inserted(S);  // [stage][before op k] -> encoder ops
    for (std::uint32_t g = 0; g < S; ++g) inserted[g].assign(t.stages[g].size() + 1, {});
    const auto by_load = [&] {
        std::vector<std::uint32_t> v(S);
        std::iota(v.begin(), v.end(), 0u);
        std::stable_sort(v.begin(), v.end(), [&](std::uint32_t a, std::uint32_t b) { return load[a] < load[b]; });
        return v;
    };
    const auto xfer = [&](std::uint32_t g) { return g == 0 ? 0.0 : p.transfer; };
    std::vector<std::uint32_t> late;  // encoder forwards no idle gap could take
    std::vector<std::uint32_t> ef_stage(M, 0);
    for (std::uint32_t j = 0; j < M; ++j) {
        const double d = e.forward[j];
        bool placed = false;
        for (std::uint32_t g : by_load()) {
            const double deadline = f0[j] - xfer(g);
            for (auto &gap : gaps[g])
                if (gap.before <= fpos[g][j] && gap.from + d <= std::min(gap.to, deadline)) {
                    inserted[g][gap.before].push_back({OpKind::EncoderForward, j});
                    ef_stage[j] = g;
                    gap.from += d;
                    load[g] += d;
                    placed = true;
                    break;
                }
            if (placed) break;
        }
        if (!placed) late.push_back(j);
    }
    // The rest in rounds of S, one per stage, all at the same time slot: in 1F1B's steady
    // state every stage is busy and a delay on one reaches all, so S pieces of work delay
    // the pipeline once only when they run side by side. A round's slot is the latest base
    // time at which its most urgent forward still ends before its consumer; its costliest
    // forward goes to the least loaded stage.
    for (std::size_t r = 0; r < late.size(); r += S) {
        std::vector<std::uint32_t> round(late.begin() + static_cast<std::ptrdiff_t>(r),
                                         late.begin() + static_cast<std::ptrdiff_t>(std::min(late.size(), r + S)));
        double slot = std::numeric_limits<double>::infinity();
        for (std::uint32_t j : round) slot = std::min(slot, f0[j] - p.transfer - e.forward[j]);
        slot = std::max(slot, 0.0);
        std::stable_sort(round.begin(), round.end(),
                         [&](std::uint32_t a, std::uint32_t b) { return e.forward[a] > e.forward[b]; });
        const auto stages = by_load();
        for (std::size_t i = 0; i < round.size(); ++i) {
            const std::uint32_t g = stages[i], j = round[i];
            std::size_t k = 0;
            while (k < fpos[g][j] && t.stages[g][k].start < slot) ++k;
            inserted[g][k].push_back({OpKind::EncoderForward, j});
            ef_stage[j] = g;
            load[g] += e.forward[j];
        }
    }
    // Each encoder backward on its forward's stage, where its activations are, in the first
    // gap after its release (the last gap of every stage is open, so one always fits).
    for (std::uint32_t j = 0; j < M; ++j) {
        if (!has_backward(e, j)) continue;
        const double d = e.backward[j];
        const std::uint32_t g = ef_stage[j];
        const double release = b0[j] + xfer(g);
        for (auto &gap : gaps[g])
            if (gap.before > bpos[g][j] && std::max(gap.from, release) + d <= gap.to) {
                // After its release: a gap that opens before it is used from then on.
                inserted[g][gap.before].push_back({OpKind::EncoderBackward, j});
                gap.from = std::max(gap.from, release) + d;
                load[g] += d;
                break;
            }
    }
    Order out(S);
    for (std::uint32_t g = 0; g < S; ++g) {
        // Work inserted at one place runs in the order its consumers need it.
        for (auto &at : inserted[g])
            std::stable_sort(at.begin(), at.end(), [](const Ref &a, const Ref &b) {
                return std::make_pair(a.kind == OpKind::EncoderBackward, a.micro) <
                       std::make_pair(b.kind == OpKind::EncoderBackward, b.micro);
            });
        for (std::size_t k = 0; k <= base[g].size(); ++k) {
            for (const Ref &r : inserted[g][k]) out[g].push_back(r);
            if (k < base[g].size()) out[g].push_back(base[g][k]);
        }
    }
    return out;
}

Status check_spec(const PipelineSpec &p, const EncoderWork &e) {
    if (p.stages == 0 || p.stages > kMaxStages)
        return make_error("insertion: " + std::to_string(p.stages) + " stages; expected 1.." +
                          std::to_string(kMaxStages));
    if (p.micro_batches == 0 || p.micro_batches > kMaxMicroBatches)
        return make_error("insertion: " + std::to_string(p.micro_batches) + " micro-batches; expected 1.." +
                          std::to_string(kMaxMicroBatches));
    if (p.forward.size() != p.stages || p.backward.size() != p.stages)
        return make_error("insertion: per-stage times for " + std::to_string(p.forward.size()) + " and " +
                          std::to_string(p.backward.size()) + " stages; expected " + std::to_string(p.stages));
    if (!p.weight.empty() && p.weight.size() != p.micro_batches)
        return make_error("insertion: weights for " + std::to_string(p.weight.size()) + " micro-batches; expected " +
                          std::to_string(p.micro_batches));
    if (e.forward.size() != p.micro_batches || e.backward.size() != p.micro_batches)
        return make_error("insertion: encoder times for " + std::to_string(e.forward.size()) + " and " +
                          std::to_string(e.backward.size()) + " micro-batches; expected " +
                          std::to_string(p.micro_batches));
    const auto bad = [](double x) { return !std::isfinite(x) || x < 0; };
    for (std::uint32_t s = 0; s < p.stages; ++s)
        if (bad(p.forward[s]) || bad(p.backward[s]))
            return make_error("insertion: stage " + std::to_string(s) + "'s times: expected finite numbers >= 0");
    for (std::uint32_t j = 0; j < p.weight.size(); ++j)
        if (bad(p.weight[j]) || p.weight[j] > 1e12)
            return make_error("insertion: micro-batch " + std::to_string(j) +
                              "'s weight: expected a finite number in [0, 1e12]");
    for (std::uint32_t j = 0; j < p.micro_batches; ++j)
        if (bad(e.forward[j]) || bad(e.backward[j]))
            return make_error("insertion: micro-batch " + std::to_string(j) +
                              "'s encoder times: expected finite numbers >= 0");
    if (bad(p.transfer)) return make_error("insertion: transfer time: expected a finite number >= 0");
    return Status::success();
}

}  // namespace

Result<Schedule> schedule(const PipelineSpec &pipe, const EncoderWork &enc, Insertion how) {
    if (auto st = check_spec(pipe, enc); !st) return Error{st.error()};
    const std::uint32_t M = pipe.micro_batches;
    switch (how) {
        case Insertion::None:
            return simulate(pipe, enc, Layout{0, false}, llm_orders(pipe, 0));
        case Insertion::Front: {
            Order o = llm_orders(pipe, 0);
            std::vector<Ref> first;
            for (std::uint32_t j = 0; j < M; ++j) first.push_back({OpKind::EncoderForward, j});
            for (const Ref &r : with_encoder_backwards(o[0], enc)) first.push_back(r);
            o[0] = std::move(first);
            return simulate(pipe, enc, Layout{0, true}, o);
        }
        case Insertion::FirstStage: {
            Order o = llm_orders(pipe, 0);
            std::vector<Ref> first;
            for (const Ref &r : with_encoder_backwards(o[0], enc)) {
                if (r.kind == OpKind::Forward) first.push_back({OpKind::EncoderForward, r.micro});
                first.push_back(r);
            }
            o[0] = std::move(first);
            return simulate(pipe, enc, Layout{0, true}, o);
        }
        case Insertion::EncoderStage: {
            Order o = llm_orders(pipe, 1);
            // The encoder stage is stage 0 of S+1 in 1F1B (its backwards dropped when frozen).
            for (const Ref &r : one_f_one_b(0, pipe.stages + 1, M, OpKind::EncoderForward, OpKind::EncoderBackward))
                if (r.kind == OpKind::EncoderForward || has_backward(enc, r.micro)) o[0].push_back(r);
            return simulate(pipe, enc, Layout{1, true}, o);
        }
        case Insertion::Uniform: {
            auto o = uniform_order(pipe, enc);
            if (!o) return Error{o.error()};
            return simulate(pipe, enc, Layout{0, true}, o.value());
        }
    }
    return make_error("insertion: unknown layout");
}

Status check_schedule(const Schedule &s, const PipelineSpec &pipe, const EncoderWork &enc, Insertion how) {
    const std::uint32_t S = pipe.stages, M = pipe.micro_batches;
    const Layout l{how == Insertion::EncoderStage ? 1u : 0u, how != Insertion::None};
    if (s.stages.size() != S + l.offset) return make_error("schedule: " + std::to_string(s.stages.size()) + " stages");
    const double eps = 1e-9 * std::max(1.0, s.makespan);
    // (kind, LLM stage or 0, micro) -> (end, GPU)
    std::map<std::tuple<int, std::uint32_t, std::uint32_t>, std::pair<double, std::uint32_t>> done;
    for (std::uint32_t g = 0; g < s.stages.size(); ++g) {
        double prev = 0;
        for (const Op &o : s.stages[g]) {
            const std::string what =
                std::string(op_name(o.kind)) + "(" + std::to_string(o.micro) + ") on stage " + std::to_string(g);
            if (o.micro >= M) return make_error("schedule: " + what + ": no such micro-batch");
            if (is_llm(o.kind) && g < l.offset)
                return make_error("schedule: " + what + ": LLM work on the encoder stage");
            if (o.start + eps < prev) return make_error("schedule: " + what + " overlaps the op before it");
            const double want = duration(pipe, enc, l, g, {o.kind, o.micro});
            if (std::fabs(o.end - o.start - want) > eps)
                return make_error("schedule: " + what + " lasts the wrong time");
            prev = o.end;
            const std::uint32_t ls = is_llm(o.kind) ? g - l.offset : 0;
            if (!done.insert({{static_cast<int>(o.kind), ls, o.micro}, {o.end, g}}).second)
                return make_error("schedule: " + what + " appears twice");
        }
    }
    const auto end_of = [&](OpKind k, std::uint32_t ls, std::uint32_t j) -> const std::pair<double, std::uint32_t> * {
        auto it = done.find({static_cast<int>(k), ls, j});
        return it == done.end() ? nullptr : &it->second;
    };
    const auto after = [&](const std::pair<double, std::uint32_t> &dep, double start, std::uint32_t g) {
        return start + eps >= dep.first + (dep.second == g ? 0 : pipe.transfer);
    };
    for (std::uint32_t g = 0; g < s.stages.size(); ++g)
        for (const Op &o : s.stages[g]) {
            const std::string what =
                std::string(op_name(o.kind)) + "(" + std::to_string(o.micro) + ") on stage " + std::to_string(g);
            const std::uint32_t ls = g - l.offset;
            const std::pair<double, std::uint32_t> *dep = nullptr;
            bool ok = true;
            if (o.kind == OpKind::Forward && ls > 0)
                ok = (dep = end_of(OpKind::Forward, ls - 1, o.micro)) && after(*dep, o.start, g);
            if (o.kind == OpKind::Forward && ls == 0 && l.encoders)
                ok = (dep = end_of(OpKind::EncoderForward, 0, o.micro)) && after(*dep, o.start, g);
            if (o.kind == OpKind::Backward) {
                ok = (dep = end_of(OpKind::Forward, ls, o.micro)) && after(*dep, o.start, g);
                if (ok && ls + 1 < S) ok = (dep = end_of(OpKind::Backward, ls + 1, o.micro)) && after(*dep, o.start, g);
            }
            if (o.kind == OpKind::EncoderBackward) {
                ok = (dep = end_of(OpKind::Backward, 0, o.micro)) && after(*dep, o.start, g);
                const auto *fwd = end_of(OpKind::EncoderForward, 0, o.micro);
                if (ok && fwd && fwd->second != g)
                    return make_error("schedule: " + what + " is not on its forward's stage " +
                                      std::to_string(fwd->second));
            }
            if (!ok)
                return make_error("schedule: " + what +
                                  (dep ? " starts before its dependency ends" : ": a dependency is missing"));
        }
    for (std::uint32_t j = 0; j < M; ++j) {
        for (std::uint32_t ls = 0; ls < S; ++ls)
            if (!end_of(OpKind::Forward, ls, j) || !end_of(OpKind::Backward, ls, j))
                return make_error("schedule: micro-batch " + std::to_string(j) + " misses stage " + std::to_string(ls));
        if (l.encoders && !end_of(OpKind::EncoderForward, 0, j))
            return make_error("schedule: encoder forward " + std::to_string(j) + " is missing");
        if (l.encoders && has_backward(enc, j) != (end_of(OpKind::EncoderBackward, 0, j) != nullptr))
            return make_error("schedule: encoder backward " + std::to_string(j) + " is missing or extra");
        if (!l.encoders && (end_of(OpKind::EncoderForward, 0, j) || end_of(OpKind::EncoderBackward, 0, j)))
            return make_error("schedule: encoder work in the LLM-only schedule");
    }
    return Status::success();
}

Result<std::vector<double>> peak_memory(const Schedule &s, const std::vector<double> &llm,
                                        const std::vector<double> &enc) {
    std::uint32_t M = 0;
    for (const auto &st : s.stages)
        for (const Op &o : st) M = std::max(M, o.micro + 1);
    if (llm.size() < M || enc.size() < M)
        return make_error("peak_memory: activations for " + std::to_string(std::min(llm.size(), enc.size())) +
                          " micro-batches; the schedule has " + std::to_string(M));
    // Per GPU: (time, +size) at an allocation, (time, -size) at a release; releases first at
    // a tie (a backward's end frees before the next forward's start allocates).
    std::vector<std::vector<std::pair<double, double>>> events(s.stages.size());
    std::vector<double> eb_end(M, -1);
    for (const auto &st : s.stages)
        for (const Op &o : st)
            if (o.kind == OpKind::EncoderBackward) eb_end[o.micro] = o.end;
    for (std::size_t g = 0; g < s.stages.size(); ++g) {
        std::vector<double> f_start(M, -1);
        for (const Op &o : s.stages[g]) switch (o.kind) {
                case OpKind::Forward:
                    f_start[o.micro] = o.start;
                    break;
                case OpKind::Backward:
                    if (f_start[o.micro] >= 0) {
                        events[g].push_back({f_start[o.micro], llm[o.micro]});
                        events[g].push_back({o.end, -llm[o.micro]});
                    }
                    break;
                case OpKind::EncoderForward:
                    events[g].push_back({o.start, enc[o.micro]});
                    events[g].push_back({eb_end[o.micro] >= 0 ? eb_end[o.micro] : o.end, -enc[o.micro]});
                    break;
                default:
                    break;
            }
    }
    std::vector<double> peak(s.stages.size(), 0);
    for (std::size_t g = 0; g < events.size(); ++g) {
        std::sort(events[g].begin(), events[g].end());
        double now = 0;
        for (const auto &ev : events[g]) peak[g] = std::max(peak[g], now += ev.second);
    }
    return peak;
}

}  // namespace omni::balance
