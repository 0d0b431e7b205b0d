// Test helper: a coordinator on 127.0.0.1 with simulated ranks, for the omni-ctl test and for
// trying omni-ctl by hand.
//
//   coord_serve DIR UNITS MIN MAX [SECONDS]
//
// Writes DIR/secret and DIR/coordinator (the job-directory layout omni-launch uses), starts
// UNITS single-rank units that join and then reach a boundary every 20 ms, and serves until
// SIGTERM/SIGINT or SECONDS (default 60) pass. Ranks that a reshape removes stop.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/parse.h"
#include "coord/client.h"
#include "coord/test/served_coordinator.h"

using namespace omni::launcher;

static std::atomic<bool> g_stop{false};
static void on_signal(int) { g_stop = true; }

static void rank_loop(std::string endpoint, std::string secret, std::uint32_t unit) {
    auto c = CoordinatorClient::connect(endpoint, secret);
    if (!c) return;
    std::string id = "sim-" + std::to_string(unit);
    auto d = c.value()->join(id, unit, 0, 10000);
    if (!d) return;
    std::uint64_t gen = d.value().next.generation, step = 0;
    (void)c.value()->ready(id, gen, 2000);  // as libomni does after every change
    while (!g_stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto b = c.value()->boundary(id, gen, ++step, 2000);
        if (!b) continue;  // e.g. the coordinator is stopping
        if (b.value().kind == DecisionKind::Stop) return;
        if (b.value().kind == DecisionKind::Reshaped) {
            if (!b.value().next.rank_of(unit, 0)) return;  // this unit leaves
            gen = b.value().next.generation;
            (void)c.value()->ready(id, gen, 2000);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 6) {
        std::fprintf(stderr, "usage: coord_serve DIR UNITS MIN MAX [SECONDS]\n");
        return 2;
    }
    auto units = omni::parse_uint(argv[2], 1, 64, "UNITS");
    auto mn = omni::parse_uint(argv[3], 1, 64, "MIN");
    auto mx = omni::parse_uint(argv[4], 1, 64, "MAX");
    auto secs = omni::parse_uint(argc == 6 ? argv[5] : "60", 1, 3600, "SECONDS");
    if (!units || !mn || !mx || !secs) {
        std::fprintf(stderr, "coord_serve: bad numbers\n");
        return 2;
    }
    std::string dir = argv[1];
    ProtocolConfig pc;
    pc.unit_size = 1;
    pc.initial_units = static_cast<std::uint32_t>(units.value());
    pc.min_units = static_cast<std::uint32_t>(mn.value());
    pc.max_units = static_cast<std::uint32_t>(mx.value());
    pc.boundary_timeout_ms = 5000;
    auto served = omni::launcher::test::serve_coordinator("coord_serve", dir, pc);
    if (!served) return 1;
    const std::string endpoint = served->endpoint;
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::vector<std::thread> ranks;
    for (std::uint32_t u = 0; u < units.value(); ++u)
        ranks.emplace_back(rank_loop, endpoint, served->secret, u);
    std::printf("%s\n", endpoint.c_str());
    std::fflush(stdout);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs.value());
    while (!g_stop && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g_stop = true;
    served->coordinator->stop();
    for (auto &t : ranks) t.join();
    return 0;
}
