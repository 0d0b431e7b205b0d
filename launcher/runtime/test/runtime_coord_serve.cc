// Test helper for the runtime's integration test: a coordinator with no simulated ranks, for
// real ranks started by srun.
//
//   runtime_coord_serve DIR UNITS RESHAPE_TO [SECONDS]
//
// Listens on 127.0.0.1 (the local cluster's nodes all share this host), writes DIR/secret
// and DIR/coordinator, waits for UNITS single-rank units to form generation 1, asks for a
// planned reshape to RESHAPE_TO units (0: none), and once that generation exists asks the
// job to stop. Prints the endpoint, then one line per generation seen; exits 0 when the job
// stopped, 1 on SECONDS (default 60) without that. OMNI_SERVE_TIMEOUT_MS sets the boundary
// and liveness timeout (default 20000, as omni-launch's default --boundary-timeout);
// OMNI_SERVE_LINGER_MS keeps the coordinator serving that long after the stop (default 0),
// for a rank that was stopped (SIGSTOP) to learn, once resumed, that it is fenced out.
// OMNI_SERVE_STOP_STEP holds the stop until the job has finished that step (default 0): a
// joiner that is admitted at once would otherwise leave a run of two or three steps.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/parse.h"
#include "coord/client.h"
#include "coord/test/served_coordinator.h"

using namespace omni::launcher;

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        std::fprintf(stderr, "usage: runtime_coord_serve DIR UNITS RESHAPE_TO [SECONDS]\n");
        return 2;
    }
    auto units = omni::parse_uint(argv[2], 1, 64, "UNITS");
    auto target = omni::parse_uint(argv[3], 0, 64, "RESHAPE_TO");
    auto secs = omni::parse_uint(argc == 5 ? argv[4] : "60", 1, 3600, "SECONDS");
    if (!units || !target || !secs) {
        std::fprintf(stderr, "runtime_coord_serve: bad numbers\n");
        return 2;
    }
    ProtocolConfig pc;
    pc.unit_size = 1;
    pc.initial_units = static_cast<std::uint32_t>(units.value());
    pc.min_units = 1;
    pc.max_units = static_cast<std::uint32_t>(std::max(units.value(), target.value()));
    const char *timeout_text = std::getenv("OMNI_SERVE_TIMEOUT_MS");
    auto timeout = omni::parse_uint(timeout_text ? timeout_text : "20000", 1000, 600000, "OMNI_SERVE_TIMEOUT_MS");
    if (!timeout) {
        std::fprintf(stderr, "runtime_coord_serve: %s\n", timeout.error().c_str());
        return 2;
    }
    pc.boundary_timeout_ms = pc.liveness_timeout_ms = static_cast<std::int64_t>(timeout.value());
    const char *stop_text = std::getenv("OMNI_SERVE_STOP_STEP");
    auto stop_step = omni::parse_uint(stop_text ? stop_text : "0", 0, 1000000, "OMNI_SERVE_STOP_STEP");
    if (!stop_step) {
        std::fprintf(stderr, "runtime_coord_serve: %s\n", stop_step.error().c_str());
        return 2;
    }
    auto served = omni::launcher::test::serve_coordinator("runtime_coord_serve", argv[1], pc);
    if (!served) return 1;
    const std::string endpoint = served->endpoint;
    std::printf("%s\n", endpoint.c_str());
    std::fflush(stdout);
    auto ctl = CoordinatorClient::connect(endpoint, served->secret);
    if (!ctl) return 1;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs.value());
    std::uint64_t seen = 0;
    bool reshape_sent = target.value() == 0, stop_sent = false;
    while (std::chrono::steady_clock::now() < end) {
        Request st;
        st.op = Op::Status;
        auto s = ctl.value()->call(st, 2000);
        if (s) {
            const auto &j = s.value().body["status"];
            const std::uint64_t gen = j["generation"].get<std::uint64_t>();
            if (j["phase"] == "stopped") {
                std::printf("stopped at generation %llu\n", static_cast<unsigned long long>(gen));
                std::fflush(stdout);
                const char *linger = std::getenv("OMNI_SERVE_LINGER_MS");
                auto ms = omni::parse_uint(linger ? linger : "0", 0, 600000, "OMNI_SERVE_LINGER_MS");
                if (ms) std::this_thread::sleep_for(std::chrono::milliseconds(ms.value()));
                return 0;
            }
            if (gen != seen) {
                seen = gen;
                std::printf("generation %llu world %u\n", static_cast<unsigned long long>(gen),
                            j["world"].get<unsigned>());
                std::fflush(stdout);
            }
            Request r;
            if (gen == 1 && !reshape_sent) {
                r.op = Op::Reshape;
                r.units = static_cast<std::uint32_t>(target.value());
                reshape_sent = bool(ctl.value()->call(r, 2000));
            } else if (gen >= 1 && reshape_sent && !stop_sent &&
                       (target.value() == 0 || gen >= 2) &&
                       j["last_step"].get<std::uint64_t>() >= stop_step.value()) {
                r.op = Op::Stop;
                r.reason = "runtime_coord_serve done";
                stop_sent = bool(ctl.value()->call(r, 2000));
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "runtime_coord_serve: the job did not stop within %s s\n",
                 argc == 5 ? argv[4] : "60");
    return 1;
}
