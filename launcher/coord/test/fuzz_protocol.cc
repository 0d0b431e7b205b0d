// libFuzzer target for the generation protocol driven by parsed wire requests: any sequence of
// joins, boundaries, losses, ready reports, reshapes, stops and clock ticks must keep the state machine
// consistent (ranks 0..world-1 in order, world = units x unit size, one shared decision per
// batch of deliveries, generations never going back).
// Input: lines; a line "t" advances the clock by 700 ms, any other line is a request header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "coord/protocol.h"
#include "coord/wire.h"

using namespace omni::launcher;
using omni::Result;

static void check(bool ok) {
    if (!ok) __builtin_trap();
}

static void check_deliveries(const std::vector<Delivery> &out) {
    for (const auto &d : out) check(d.decision && d.decision.get() == out.front().decision.get());
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    ProtocolConfig cfg;
    cfg.unit_size = 2;
    cfg.initial_units = 2;
    cfg.min_units = 1;
    cfg.max_units = 4;
    cfg.boundary_timeout_ms = 1000;
    cfg.formation_timeout_ms = 2000;
    cfg.grow_wait_ms = 1500;
    Protocol p(cfg);
    std::int64_t now = 0;
    std::uint64_t last_gen = 0;
    std::string_view in(reinterpret_cast<const char *>(data), size);
    int events = 0;
    while (!in.empty() && events++ < 256) {
        auto nl = in.find('\n');
        std::string_view line = in.substr(0, nl);
        in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
        if (line == "t") {
            now += 700;
            check_deliveries(p.tick(now));
        } else {
            auto r = parse_request(line, nullptr);
            if (!r) continue;
            const Request &q = r.value();
            Result<std::vector<Delivery>> out = std::vector<Delivery>{};
            switch (q.op) {
            case Op::Join: out = p.join(q.id, q.unit, q.slot, now, q.node); break;
            case Op::Boundary: out = p.boundary(q.id, q.generation, q.step, now, q.batch); break;
            case Op::Lost: out = p.lost(q.id, now); break;
            case Op::Ready: (void)p.ready(q.id, q.generation, now); break;
            case Op::Reshape: (void)p.request_reshape(q.units, now, q.leave, q.via); break;
            case Op::Stop: out = p.request_stop(q.reason); break;
            default: break;
            }
            if (out) check_deliveries(out.value());
        }
        auto s = p.status();
        check(s.generation >= last_gen);
        last_gen = s.generation;
        check(s.world == s.units * cfg.unit_size);
        check(s.layout.members.size() == s.world);
        check(!s.change_pause_ms || *s.change_pause_ms >= 0);  // never before its decision
        for (std::size_t r = 0; r < s.layout.members.size(); ++r)
            check(s.layout.members[r].rank == r &&
                  s.layout.members[r].unit == s.layout.units[r / cfg.unit_size] &&
                  s.layout.members[r].slot == r % cfg.unit_size);
        if (s.phase == Phase::Running) check(s.units >= cfg.min_units && s.units <= cfg.max_units);
    }
    return 0;
}
