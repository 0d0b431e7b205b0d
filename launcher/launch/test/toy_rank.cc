// Test rank for omni-launch: joins the coordinator as (OMNI_UNIT_ID, OMNI_UNIT_SLOT) with the
// id OMNI_MEMBER_ID, then reaches a boundary after every "step" (a sleep) until STEPS steps
// are done, a STOP arrives, or a reshape leaves its unit out. It uses only launcher/client.h,
// so omni-launch's tests do not depend on the full rank runtime.
//
//   toy_rank STEPS SLEEP_MS [FAIL_AT_STEP]
//
// Prints one line per change of generation ("toy u3.s0: generation 2 rank 1 of 3 at step 7")
// and exits 0; with FAIL_AT_STEP, unit 0 exits 3 at that step (a crashing rank). Like the
// runtime it reports ready after every change (the end of its pause); TOY_READY=0 does not,
// as a rank of an older runtime or one that died in the change would not.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/parse.h"
#include "coord/client.h"
#include "coord/secret.h"

using namespace omni::launcher;

namespace {

constexpr std::int64_t kJoinWaitMs = 300000;  // joiners wait for a grow to admit them
constexpr std::int64_t kBoundaryWaitMs = 120000;

const char *env(const char *name) { return std::getenv(name); }

int fail(const std::string &msg) {
    std::fprintf(stderr, "toy_rank: %s\n", msg.c_str());
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) return fail("usage: toy_rank STEPS SLEEP_MS [FAIL_AT_STEP]");
    auto steps = omni::parse_uint(argv[1], 1, 1000000, "STEPS");
    auto sleep_ms = omni::parse_uint(argv[2], 0, 60000, "SLEEP_MS");
    auto fail_at = omni::parse_uint(argc == 4 ? argv[3] : "0", 0, 1000000, "FAIL_AT_STEP");
    if (!steps || !sleep_ms || !fail_at) return fail("bad numbers");
    const char *u = env("OMNI_UNIT_ID"), *s = env("OMNI_UNIT_SLOT"), *id_env = env("OMNI_MEMBER_ID");
    auto unit = omni::parse_uint(u ? u : "", 0, UINT32_MAX, "OMNI_UNIT_ID");
    auto slot = omni::parse_uint(s ? s : "", 0, UINT32_MAX, "OMNI_UNIT_SLOT");
    if (!unit || !slot) return fail(!unit ? unit.error() : slot.error());
    auto loc = locate_coordinator("", "", env);
    if (!loc) return fail(loc.error());
    auto client = CoordinatorClient::connect(loc.value().endpoint, loc.value().secret);
    if (!client) return fail(client.error());
    const std::string id = id_env ? id_env : "toy-" + std::to_string(unit.value());
    const auto my_unit = static_cast<std::uint32_t>(unit.value());
    const auto my_slot = static_cast<std::uint32_t>(slot.value());

    // Where it runs, as real ranks say it (omni-ctl shrink releases whole nodes by it).
    const char *node_env = std::getenv("SLURMD_NODENAME");
    const std::string node = node_env && check_node_name(node_env) ? node_env : "";
    auto d = client.value()->join(id, my_unit, my_slot, kJoinWaitMs, node);
    // An announced grow names a joiner a boundary early (CONTINUE with the coming layout):
    // it joins again and is admitted when the change applies.
    while (d && d.value().kind == DecisionKind::Continue) {
        std::printf("toy %s: announced as rank %u of %u\n", id.c_str(),
                    d.value().next.rank_of(my_unit, my_slot).value_or(0), d.value().next.world);
        std::fflush(stdout);
        d = client.value()->join(id, my_unit, my_slot, kJoinWaitMs, node);
    }
    if (!d) return fail("join: " + d.error());
    if (d.value().kind == DecisionKind::Stop) return 0;
    std::uint64_t gen = d.value().next.generation;
    std::uint64_t step = d.value().step;  // joiners continue at the step of their admission
    auto announce = [&](const Layout &l) {
        auto r = l.rank_of(my_unit, my_slot);
        std::printf("toy %s: generation %llu rank %u of %u at step %llu\n", id.c_str(),
                    static_cast<unsigned long long>(l.generation), r ? *r : 0u, l.world,
                    static_cast<unsigned long long>(step));
        std::fflush(stdout);
    };
    // TOY_BATCH=B/b: the ledger geometry it reports at boundaries, as a trainer's would.
    BatchGeometry batch;
    if (const char *b = env("TOY_BATCH")) {
        const std::string text = b;
        const auto slash = text.find('/');
        auto gb = omni::parse_uint(text.substr(0, slash), 1, 1u << 30, "TOY_BATCH (B)");
        auto mb = omni::parse_uint(slash == std::string::npos ? "" : text.substr(slash + 1), 1, 1u << 30,
                                   "TOY_BATCH (b)");
        if (!gb || !mb) return fail(!gb ? gb.error() : mb.error());
        batch = {gb.value(), mb.value()};
    }
    const char *ready_env = env("TOY_READY");
    const bool report_ready = !ready_env || std::string(ready_env) != "0";
    auto ready = [&] {
        if (report_ready)
            if (auto st = client.value()->ready(id, gen, kBoundaryWaitMs); !st) std::fprintf(stderr, "toy_rank: ready: %s\n", st.error().c_str());
    };
    announce(d.value().next);
    ready();
    while (step < steps.value()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms.value()));
        ++step;
        if (fail_at.value() && step == fail_at.value() && my_unit == 0) return 3;
        auto b = client.value()->boundary(id, gen, step, kBoundaryWaitMs, batch);
        if (!b) return fail("boundary " + std::to_string(step) + ": " + b.error());
        if (b.value().kind == DecisionKind::Stop) return 0;
        if (b.value().kind == DecisionKind::Reshaped) {
            if (!b.value().next.rank_of(my_unit, my_slot)) {
                std::printf("toy %s: leaves at step %llu\n", id.c_str(), static_cast<unsigned long long>(step));
                return 0;
            }
            gen = b.value().next.generation;
            announce(b.value().next);
            ready();
        }
    }
    return 0;
}
