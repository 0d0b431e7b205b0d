// state_rank: the rank program of the restart-vs-resize benchmark (bench/restart-vs-resize).
// It holds a model's worth of training state without training: P fp32 parameters
// (replicated) and Adam's m and v as ZeRO-1 shards of P each, P = MiB * 2^20 / 12, registered
// with libomni so that a planned resize hands them over, and written to / read from a
// libomni-ckpt checkpoint when the job is stopped and restarted. Every step "computes" for
// --pace-ms, runs its first collective (a small allreduce) and calls omni_boundary; rank 0
// appends {"step", "world", "time_ms"} after that collective to --metrics. A benchmark tool:
// what it measures is the gap in those timestamps around a change.
//
//   state_rank --mib M --steps N --pace-ms T --ckpt DIR --metrics FILE
//
// At the end rank 0 prints the FNV-1a fingerprints of the parameters and of the gathered
// m and v, so that a run that resized and one that restarted can be compared.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/parse.h"
#include "omni/ckpt_cpp.h"
#include "runtime/runtime.h"

using namespace omni::launcher;
namespace ck = omni::ckpt;

namespace {

constexpr const char *kProg = "state_rank";

int fail(const std::string &msg) {
    std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
    return 1;
}

struct Options {
    std::uint64_t mib = 64, steps = 30, pace_ms = 100;
    std::string ckpt, metrics;
};

bool parse(int argc, char **argv, Options &o, std::string &err) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::printf("Usage: %s --mib M --steps N --pace-ms T --ckpt DIR --metrics FILE\n", kProg);
            std::exit(0);
        }
        if (i + 1 >= argc) {
            err = a + ": expected a value";
            return false;
        }
        const std::string v = argv[++i];
        auto num = [&](std::uint64_t &out, std::uint64_t lo, std::uint64_t hi) {
            auto r = omni::parse_uint(v, lo, hi, a);
            if (!r) err = r.error();
            else out = r.value();
            return r.ok();
        };
        if (a == "--mib") { if (!num(o.mib, 1, 4096)) return false; }
        else if (a == "--steps") { if (!num(o.steps, 1, 1000000)) return false; }
        else if (a == "--pace-ms") { if (!num(o.pace_ms, 0, 60000)) return false; }
        else if (a == "--ckpt") o.ckpt = v;
        else if (a == "--metrics") o.metrics = v;
        else {
            err = "unknown option " + a;
            return false;
        }
    }
    if (o.ckpt.empty() || o.metrics.empty()) {
        err = "--ckpt and --metrics are required";
        return false;
    }
    return true;
}

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Deterministic contents, the same whoever computes them.
float init_value(std::size_t i, std::uint32_t which) {
    return static_cast<float>((i * 2654435761u + which * 40503u) % 100003u) * 1e-5f;
}

}  // namespace

// One line per phase on stderr, for restart-vs-resize's breakdown of a restart:
// "state_rank: phase NAME rank R time_ms T" (wall clock, as the metrics' time_ms).
void phase(const char *name, std::int64_t rank, std::int64_t t) {
    std::fprintf(stderr, "%s: phase %s rank %" PRId64 " time_ms %" PRId64 "\n", kProg, name, rank, t);
    std::fflush(stderr);
}

int main(int argc, char **argv) {
    const std::int64_t t_process = now_ms();
    Options o;
    std::string err;
    if (!parse(argc, argv, o, err)) {
        fail(err + " (see --help)");
        return 2;
    }
    const std::size_t P = o.mib * (std::size_t(1) << 20) / 12;

    // The parameters exist before the rank joins, as a model's do once it is built: a
    // joiner is admitted in from_environment() and the survivors wait for it from then on.
    std::vector<float> params(P), m, v;
    for (std::size_t i = 0; i < P; ++i) params[i] = init_value(i, 0);
    auto rtr = Runtime::from_environment();
    if (!rtr) return fail(rtr.error());
    Runtime &rt = *rtr.value();
    if (auto st = rt.register_params(params.data(), P); !st) return fail(st.error());
    for (auto *vec : {&m, &v})
        if (auto r = rt.register_shard(vec, P); !r) return fail(r.error());
    // A joiner's admission has happened by now: whatever it does before start() is in the
    // survivors' pause, so m and v get their initial values only when nobody sends them.
    auto started = rt.start();
    if (!started) return fail(started.error());
    const std::int64_t me = rt.rank();
    phase("process-start", me, t_process);
    phase("runtime-started", me, now_ms());
    std::uint64_t step = started.value().step;
    if (!started.value().joined) {
        const ShardRange r = rt.shard_range(P);
        for (std::size_t i = 0; i < r.size(); ++i) {
            m[i] = init_value(r.begin + i, 1);
            v[i] = init_value(r.begin + i, 2);
        }
    }

    // A fresh start resumes from the newest checkpoint, if any (the restart path).
    if (!started.value().joined) {
        auto entries = ck::list(o.ckpt);
        bool any = false;
        if (entries)
            for (const auto &e : entries.value()) any = any || e.complete;
        if (any) {
            auto rd = ck::Reader::open_latest(o.ckpt);
            if (!rd) return fail(rd.error());
            ck::Reader &r = *rd.value();
            step = r.manifest().meta.step;
            if (auto st = r.read_all("model/params", params.data(), P * sizeof(float)); !st)
                return fail(st.error());
            const ShardRange sr = rt.shard_range(P);
            for (auto [name, vec] : {std::pair{"optim/adam_m", &m}, std::pair{"optim/adam_v", &v}})
                if (sr.size())
                    if (auto st = r.read(name, {sr.begin}, {sr.size()}, vec->data(), sr.size() * sizeof(float)); !st)
                        return fail(st.error());
            phase("checkpoint-loaded", me, now_ms());
        }
    }

    FILE *metrics = nullptr;
    auto open_metrics = [&] {
        if (!metrics && rt.rank() == 0) metrics = std::fopen(o.metrics.c_str(), "a");
        return metrics != nullptr || rt.rank() != 0;
    };
    if (!open_metrics()) return fail("--metrics " + o.metrics + ": " + std::strerror(errno));

    auto checkpoint = [&]() -> omni::Status {
        ck::WriterOptions wo;
        wo.attempt = "g" + std::to_string(rt.generation());
        auto w = ck::ShardWriter::open(o.ckpt, step, rt.rank(), wo);
        if (!w) return omni::Error{w.error()};
        const ck::Shape shape{P};
        if (rt.rank() == 0)
            if (auto st = w.value()->add_tensor("model/params", ck::DType::fp32, shape, {0}, shape,
                                                params.data(), ck::Change::changed); !st)
                return st;
        const ShardRange sr = rt.shard_range(P);
        if (sr.size())
            for (auto [name, vec] : {std::pair{"optim/adam_m", &m}, std::pair{"optim/adam_v", &v}})
                if (auto st = w.value()->add_tensor(name, ck::DType::fp32, shape, {sr.begin}, {sr.size()},
                                                    vec->data(), ck::Change::changed); !st)
                    return st;
        if (auto st = w.value()->finish(); !st) return st;
        if (auto st = rt.comm().barrier(); !st) return st;
        if (rt.rank() == 0) {
            ck::Meta meta;
            meta.step = step;
            meta.generation = rt.generation();
            meta.world_size = rt.world();
            meta.unit_layout = "state_rank dp=" + std::to_string(rt.world());
            ck::CommitOptions co;
            co.attempt = wo.attempt;
            if (auto c = ck::commit(o.ckpt, rt.world(), meta, co); !c) return omni::Error{c.error()};
        }
        return rt.comm().barrier();
    };

    while (step < o.steps) {
        if (o.pace_ms) usleep(static_cast<useconds_t>(o.pace_ms * 1000));
        float token = 1.0f;  // the step's first collective
        if (auto st = rt.comm().allreduce(&token, 1, DType::fp32, ReduceOp::sum); !st) return fail(st.error());
        ++step;
        if (metrics) {
            std::fprintf(metrics, "{\"step\": %" PRIu64 ", \"world\": %u, \"time_ms\": %" PRId64 "}\n",
                         step, rt.world(), now_ms());
            std::fflush(metrics);
        }
        auto b = rt.boundary(step);
        if (!b) return fail(b.error());
        switch (b.value().outcome) {
            case Outcome::Continue: break;
            case Outcome::Reshaped:
                if (!open_metrics()) return fail("--metrics " + o.metrics + ": " + std::strerror(errno));
                break;
            case Outcome::Stop:
                phase("stop-decided", me, now_ms());
                if (auto st = checkpoint(); !st) return fail("checkpoint: " + st.error());
                phase("checkpoint-committed", me, now_ms());
                if (metrics) std::fclose(metrics);
                phase("exit", me, now_ms());
                return 0;
            case Outcome::Left: return 0;
            case Outcome::Rewind: return fail("ranks were lost: a benchmark run does not recover");
        }
    }
    // Fingerprints of the whole state, for comparing runs.
    std::vector<float> full_m(P), full_v(P);
    {
        Repartition plan;
        for (std::uint32_t r = 0; r < rt.world(); ++r) {
            plan.have.push_back(zero1_range(P, r, rt.world()));
            plan.want.push_back(r == 0 ? ShardRange{0, P} : ShardRange{});
        }
        for (auto [vec, full] : {std::pair{&m, &full_m}, std::pair{&v, &full_v}})
            if (auto st = repartition(rt.comm(), plan, vec->data(), rt.rank() == 0 ? full->data() : nullptr); !st)
                return fail(st.error());
        if (auto st = rt.comm().barrier(); !st) return fail(st.error());
    }
    if (rt.rank() == 0)
        std::printf("state_rank: step %" PRIu64 " world %u params %016" PRIx64 " m %016" PRIx64 " v %016" PRIx64 "\n",
                    step, rt.world(), fingerprint(params.data(), P), fingerprint(full_m.data(), P),
                    fingerprint(full_v.data(), P));
    if (metrics) std::fclose(metrics);
    return 0;
}
