// The generation protocol as a pure state machine, driven with invented times. Expected
// layouts are worked out by hand from the rules in protocol.h (units in order, rank =
// position * unit_size + slot, shrink drops the last units, joiners appended by unit id).
#include <gtest/gtest.h>

#include <set>

#include "coord/protocol.h"

using namespace omni::launcher;
using omni::Result;

namespace {

ProtocolConfig config(std::uint32_t unit_size, std::uint32_t initial, std::uint32_t min,
                      std::uint32_t max) {
    ProtocolConfig c;
    c.unit_size = unit_size;
    c.initial_units = initial;
    c.min_units = min;
    c.max_units = max;
    c.boundary_timeout_ms = 1000;
    c.formation_timeout_ms = 5000;
    c.grow_wait_ms = 3000;
    return c;
}

std::vector<Delivery> ok(Result<std::vector<Delivery>> r) {
    EXPECT_TRUE(r) << r.error();
    return r ? r.value() : std::vector<Delivery>{};
}

std::set<std::string> recipients(const std::vector<Delivery> &d) {
    std::set<std::string> s;
    for (const auto &x : d) s.insert(x.to);
    return s;
}

// Every delivery carries the very same decision object.
std::shared_ptr<const Decision> same_decision(const std::vector<Delivery> &d) {
    EXPECT_FALSE(d.empty());
    if (d.empty()) return nullptr;
    for (const auto &x : d) EXPECT_EQ(x.decision.get(), d.front().decision.get());
    return d.front().decision;
}

std::uint32_t rank_of(const Decision &d, const std::string &id) {
    const Member *m = d.next.find(id);
    EXPECT_NE(m, nullptr) << id;
    return m ? m->rank : 9999;
}

// Forms generation 1 with single-rank units named u0, u1, ... (unit i).
Protocol formed(const ProtocolConfig &c, std::uint32_t units) {
    Protocol p(c);
    for (std::uint32_t i = 0; i < units; ++i) (void)p.join("u" + std::to_string(i), i, 0, 0);
    EXPECT_EQ(p.phase(), Phase::Running);
    return p;
}

// A decision that drops the ranks `lost` and rewinds, to generation 2 of `world` ranks.
void expect_lost_rewind(const std::shared_ptr<const Decision> &decision, const std::vector<std::string> &lost,
                        std::uint32_t world) {
    if (!decision) return ADD_FAILURE() << "no decision";
    const Decision &d = *decision;
    EXPECT_EQ(d.kind, DecisionKind::Reshaped);
    EXPECT_EQ(d.reason, "lost");
    EXPECT_TRUE(d.rewind);
    EXPECT_EQ(d.lost, lost);
    EXPECT_EQ(d.next.world, world);
    EXPECT_EQ(d.next.generation, 2u);
}

std::vector<Delivery> all_arrive(Protocol &p, std::uint64_t gen, std::uint64_t step,
                                 const std::vector<std::string> &ids, std::int64_t now = 10,
                                 BatchGeometry batch = {}) {
    std::vector<Delivery> last;
    for (const auto &id : ids) last = ok(p.boundary(id, gen, step, now, batch));
    return last;
}

// The last resize status() reports: its kind, its units before and after, and its step.
void expect_last_resize(Protocol &p, const std::string &kind, std::uint32_t old_units, std::uint32_t new_units,
                        std::uint64_t step) {
    auto r = p.status().last_resize;
    ASSERT_TRUE(r);
    EXPECT_EQ(r->kind, kind);
    EXPECT_EQ(r->old_units, old_units);
    EXPECT_EQ(r->new_units, new_units);
    EXPECT_EQ(r->step, step);
}

}  // namespace

TEST(ProtocolConfig, Validation) {
    EXPECT_TRUE(validate(config(4, 2, 1, 4)));
    EXPECT_FALSE(validate(config(0, 1, 1, 1)));
    EXPECT_FALSE(validate(config(1, 1, 2, 1)));  // MIN > MAX
    EXPECT_FALSE(validate(config(1, 5, 1, 4)));  // initial above MAX
    EXPECT_FALSE(validate(config(1, 1, 0, 4)));
    auto c = config(1, 1, 1, 1);
    c.boundary_timeout_ms = 0;
    EXPECT_FALSE(validate(c));
    c = config(1, 1, 1, 1);
    c.liveness_timeout_ms = -1;
    EXPECT_FALSE(validate(c));
}

TEST(Protocol, FormsWhenInitialUnitsAreComplete) {
    Protocol p(config(2, 2, 1, 4));
    // Units 5 and 3, two ranks each; joins arrive out of order.
    EXPECT_TRUE(ok(p.join("a", 5, 1, 0)).empty());
    EXPECT_TRUE(ok(p.join("b", 3, 0, 0)).empty());
    EXPECT_TRUE(ok(p.join("c", 5, 0, 0)).empty());
    EXPECT_EQ(p.phase(), Phase::Forming);
    auto out = ok(p.join("d", 3, 1, 0));
    EXPECT_EQ(recipients(out), (std::set<std::string>{"a", "b", "c", "d"}));
    auto d = same_decision(out);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->reason, "formed");
    EXPECT_EQ(d->next.generation, 1u);
    EXPECT_EQ(d->next.world, 4u);
    // Units in id order: 3 then 5. Rank = position * 2 + slot.
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{3, 5}));
    EXPECT_EQ(rank_of(*d, "b"), 0u);
    EXPECT_EQ(rank_of(*d, "d"), 1u);
    EXPECT_EQ(rank_of(*d, "c"), 2u);
    EXPECT_EQ(rank_of(*d, "a"), 3u);
    EXPECT_EQ(d->joining, (std::vector<std::string>{"a", "b", "c", "d"}));
    // A repeated join (lost reply) gets the formation decision again.
    auto again = ok(p.join("a", 5, 1, 1));
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].decision.get(), d.get());
}

TEST(Protocol, JoinValidation) {
    Protocol p(config(2, 2, 1, 4));
    EXPECT_FALSE(p.join("a", 0, 2, 0));           // slot outside 0..1
    EXPECT_FALSE(p.join("bad id", 0, 0, 0));      // space
    EXPECT_FALSE(p.join("", 0, 0, 0));
    EXPECT_TRUE(p.join("a", 0, 0, 0));
    EXPECT_TRUE(ok(p.join("a", 0, 0, 0)).empty());  // same join again: harmless
    EXPECT_FALSE(p.join("a", 0, 1, 0));           // same id, other slot
    EXPECT_FALSE(p.join("b", 0, 0, 0));           // slot taken
    EXPECT_FALSE(p.boundary("a", 1, 1, 0));       // not formed yet
    EXPECT_FALSE(p.request_reshape(2, 0));
}

// After formation: a member cannot join again as something else; the waiting room holds at
// most every rank of the elastic range; a joiner reported lost leaves it and frees its slot;
// a rank declared lost cannot report a boundary.
TEST(Protocol, MembersJoinersAndLostRanksAreKeptApart) {
    auto p = formed(config(1, 2, 1, 3), 2);
    auto again = p.join("u0", 5, 0, 0);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error(), "join: 'u0' is already rank 0 of generation 1");
    // max 3 units of 1 rank: 3 may wait, the 4th may not.
    for (const char *j : {"j1", "j2", "j3"}) EXPECT_TRUE(ok(p.join(j, j[1] - '0' + 10, 0, 0)).empty());
    auto full = p.join("j4", 14, 0, 0);
    ASSERT_FALSE(full);
    EXPECT_EQ(full.error(), "join: too many ranks waiting to join (3)");
    // A joiner lost before it was admitted: gone, its slot free for another.
    EXPECT_TRUE(ok(p.lost("j1", 0)).empty());
    EXPECT_FALSE(p.join("j5", 12, 0, 0));   // j2's slot is still taken
    EXPECT_TRUE(ok(p.join("j5", 11, 0, 0)).empty());
    // A member declared lost has no boundary to report.
    EXPECT_TRUE(ok(p.lost("u1", 10)).empty());
    auto late = p.boundary("u1", 1, 1, 20);
    ASSERT_FALSE(late);
    EXPECT_EQ(late.error(), "boundary: 'u1' was declared lost in generation 1 and is fenced out");
}

// A stop asked for before generation 1 has formed reaches the ranks waiting for it at once.
TEST(Protocol, StopBeforeFormationReachesTheWaitingRanks) {
    Protocol p(config(1, 3, 1, 3));
    (void)ok(p.join("a", 0, 0, 0));
    (void)ok(p.join("b", 1, 0, 0));
    auto out = ok(p.request_stop("sigterm"));
    EXPECT_EQ(recipients(out), (std::set<std::string>{"a", "b"}));
    auto d = same_decision(out);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->kind, DecisionKind::Stop);
    EXPECT_EQ(d->reason, "sigterm");
    EXPECT_EQ(p.phase(), Phase::Stopped);
    auto late = p.join("c", 2, 0, 0);
    ASSERT_FALSE(late);
    EXPECT_EQ(late.error(), "join: the job is stopping");
}

TEST(Protocol, ContinueGoesToEveryRankOnlyWhenAllArrived) {
    auto p = formed(config(1, 3, 1, 4), 3);
    EXPECT_TRUE(ok(p.boundary("u0", 1, 1, 10)).empty());
    EXPECT_TRUE(ok(p.boundary("u2", 1, 1, 10)).empty());
    EXPECT_EQ(p.status().arrived, 2u);
    auto out = ok(p.boundary("u1", 1, 1, 10));
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "u2"}));
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Continue);
    EXPECT_EQ(d->generation, 1u);
    EXPECT_EQ(d->step, 1u);
    EXPECT_EQ(p.generation(), 1u);
    // A repeat of a decided boundary returns the same decision.
    auto rep = ok(p.boundary("u0", 1, 1, 11));
    ASSERT_EQ(rep.size(), 1u);
    EXPECT_EQ(rep[0].decision.get(), d.get());
    // Wrong generation, unknown member, step mismatch.
    EXPECT_FALSE(p.boundary("u0", 2, 2, 12));
    EXPECT_FALSE(p.boundary("nobody", 1, 2, 12));
    EXPECT_TRUE(p.boundary("u0", 1, 2, 12));
    auto mismatch = p.boundary("u1", 1, 3, 12);
    ASSERT_FALSE(mismatch);
    EXPECT_NE(mismatch.error().find("differs"), std::string::npos);
}

TEST(Protocol, PlannedShrinkDropsTheLastUnits) {
    // 2 ranks per unit, units 0,1,2 -> ranks a0 a1 | b0 b1 | c0 c1.
    Protocol p(config(2, 3, 1, 4));
    for (auto [id, unit, slot] : {std::tuple{"a0", 0u, 0u}, {"a1", 0u, 1u}, {"b0", 1u, 0u},
                                  {"b1", 1u, 1u}, {"c0", 2u, 0u}, {"c1", 2u, 1u}})
        (void)ok(p.join(id, unit, slot, 0));
    ASSERT_EQ(p.generation(), 1u);
    EXPECT_FALSE(p.request_reshape(5, 0));  // above MAX
    EXPECT_FALSE(p.request_reshape(0, 0));
    ASSERT_TRUE(p.request_reshape(1, 0));
    EXPECT_EQ(p.status().target_units, 1u);
    auto out = all_arrive(p, 1, 7, {"a0", "a1", "b0", "b1", "c0", "c1"});
    EXPECT_EQ(out.size(), 6u);  // leavers hear it too
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->reason, "planned");
    EXPECT_FALSE(d->rewind);
    EXPECT_EQ(d->next.generation, 2u);
    EXPECT_EQ(d->next.world, 2u);
    EXPECT_EQ(rank_of(*d, "a0"), 0u);
    EXPECT_EQ(rank_of(*d, "a1"), 1u);
    EXPECT_EQ(d->leaving, (std::vector<std::string>{"b0", "b1", "c0", "c1"}));
    EXPECT_EQ(d->leaving_units, (std::vector<std::uint32_t>{1, 2}));
    EXPECT_TRUE(d->joining.empty());
    EXPECT_EQ(d->next.rank_of(0, 1), 1u);
    EXPECT_EQ(d->next.rank_of(1, 0), std::nullopt);
    EXPECT_EQ(p.generation(), 2u);
    EXPECT_FALSE(p.status().target_units);
    // A leaver repeating its boundary learns the same decision.
    auto rep = ok(p.boundary("c1", 1, 7, 20));
    ASSERT_EQ(rep.size(), 1u);
    EXPECT_EQ(rep[0].decision.get(), d.get());
    // The next boundary involves the two survivors only.
    auto next = all_arrive(p, 2, 8, {"a0", "a1"});
    EXPECT_EQ(same_decision(next)->kind, DecisionKind::Continue);
    // Status keeps the last change apart from the last (routine) decision.
    auto st = p.status();
    ASSERT_TRUE(st.last_decision && st.last_change);
    EXPECT_EQ(st.last_decision->kind, DecisionKind::Continue);
    EXPECT_EQ(st.last_change->kind, DecisionKind::Reshaped);
    EXPECT_EQ(st.last_change->step, 7u);
    EXPECT_EQ(st.last_change->next.world, 2u);
}

TEST(Protocol, PlannedGrowWaitsForItsJoiners) {
    auto p = formed(config(1, 2, 1, 4), 2);
    ASSERT_TRUE(p.request_reshape(4, 100));
    EXPECT_TRUE(ok(p.join("j7", 7, 0, 100)).empty());
    EXPECT_FALSE(p.join("j0", 0, 0, 100));  // unit 0 is in the generation
    // Only one of two joiner units is in: CONTINUE, grow still pending.
    auto out = all_arrive(p, 1, 1, {"u0", "u1"}, 200);
    EXPECT_EQ(same_decision(out)->kind, DecisionKind::Continue);
    EXPECT_EQ(p.status().pending_joiners, (std::vector<std::string>{"j7"}));
    EXPECT_TRUE(ok(p.join("j5", 5, 0, 300)).empty());
    out = all_arrive(p, 1, 2, {"u0", "u1"}, 400);
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "j5", "j7"}));
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1, 5, 7}));
    EXPECT_EQ(rank_of(*d, "u0"), 0u);
    EXPECT_EQ(rank_of(*d, "u1"), 1u);
    EXPECT_EQ(rank_of(*d, "j5"), 2u);
    EXPECT_EQ(rank_of(*d, "j7"), 3u);
    EXPECT_EQ(d->joining, (std::vector<std::string>{"j5", "j7"}));
    EXPECT_EQ(d->joining_units, (std::vector<std::uint32_t>{5, 7}));
    EXPECT_TRUE(d->leaving_units.empty());
    EXPECT_EQ(d->next.rank_of(7, 0), 3u);
    EXPECT_TRUE(p.status().pending_joiners.empty());
}

TEST(Protocol, PartialGrowAfterTheGrowWait) {
    auto p = formed(config(1, 2, 1, 4), 2);
    ASSERT_TRUE(p.request_reshape(4, 1000));
    (void)ok(p.join("j2", 2, 0, 1000));
    // grow_wait_ms = 3000: before it, CONTINUE; at 1000 + 3000, take what is there.
    EXPECT_EQ(same_decision(all_arrive(p, 1, 1, {"u0", "u1"}, 3999))->kind, DecisionKind::Continue);
    auto d = same_decision(all_arrive(p, 1, 2, {"u0", "u1"}, 4000));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->next.world, 3u);
    EXPECT_EQ(p.status().target_units, 4u);  // still wanted
}

TEST(Protocol, BoundaryTimeoutIsAnUnplannedShrink) {
    auto p = formed(config(1, 3, 1, 4), 3);
    (void)ok(p.boundary("u0", 1, 5, 1000));
    (void)ok(p.boundary("u1", 1, 5, 1200));
    EXPECT_EQ(p.next_deadline(), 2000);  // first arrival + 1000 ms
    EXPECT_TRUE(p.tick(1999).empty());
    auto out = p.tick(2000);
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1"}));
    auto d = same_decision(out);
    expect_lost_rewind(d, {"u2"}, 2);
    // The slow rank shows up late: it was fenced out, and is refused.
    auto late = p.boundary("u2", 1, 5, 2500);
    ASSERT_FALSE(late);
    EXPECT_NE(late.error().find("declared lost in generation 1 and is fenced out"), std::string::npos) << late.error();
}

namespace {
ProtocolConfig with_liveness(ProtocolConfig c, std::int64_t ms) {
    c.liveness_timeout_ms = ms;
    return c;
}
}  // namespace

// A hung rank (issue #46): its peers wait for it inside a collective and never reach the
// boundary, so only its silence can tell.
TEST(Protocol, SilentMemberIsLostWithoutAnyBoundaryArrival) {
    auto p = formed(with_liveness(config(1, 3, 1, 4), 1000), 3);  // every member seen at 0
    EXPECT_EQ(p.next_deadline(), 1000);
    for (std::int64_t t : {300, 600, 900}) {
        for (const char *id : {"u0", "u1"}) {
            auto a = p.heartbeat(id, 1, t);
            ASSERT_TRUE(a) << a.error();
            EXPECT_FALSE(a.value().fenced);
            EXPECT_EQ(a.value().abandon_generation, 0u);
            EXPECT_EQ(a.value().timeout_ms, 1000);
            EXPECT_GT(a.value().interval_ms, 0);
            EXPECT_LT(a.value().interval_ms, 1000 / 2);
        }
        EXPECT_TRUE(p.tick(t).empty());
    }
    EXPECT_TRUE(p.tick(999).empty());
    EXPECT_TRUE(p.status().lost.empty());
    // u2 said nothing for the timeout: lost, with nobody at a boundary (no decision yet).
    EXPECT_TRUE(p.tick(1000).empty());
    EXPECT_EQ(p.status().lost, (std::vector<std::string>{"u2"}));
    EXPECT_FALSE(p.status().boundary_step);
    // The survivors hear it in their heartbeats, leave their collective and come.
    auto a = p.heartbeat("u0", 1, 1100);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a.value().abandon_generation, 1u);
    EXPECT_FALSE(a.value().unit_lost);
    EXPECT_TRUE(ok(p.boundary("u0", 1, 7, 1150)).empty());
    auto out = ok(p.boundary("u1", 1, 7, 1200));
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1"}));
    expect_lost_rewind(same_decision(out), {"u2"}, 2);
    // The new generation has nothing to abandon.
    a = p.heartbeat("u1", 2, 1300);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a.value().abandon_generation, 0u);
}

// The lost rank comes back (SIGCONT): everything it says is refused, and its heartbeat
// tells it so.
TEST(Protocol, AFencedMemberIsRefused) {
    auto p = formed(with_liveness(config(1, 3, 1, 4), 1000), 3);
    (void)p.heartbeat("u0", 1, 900);
    (void)p.heartbeat("u1", 1, 900);
    (void)p.tick(1000);
    EXPECT_TRUE(p.fenced("u2"));
    EXPECT_FALSE(p.fenced("u0"));
    // Refused even before the decision: it cannot join the boundary it was lost at.
    auto early = p.boundary("u2", 1, 7, 1050);
    ASSERT_FALSE(early);
    EXPECT_NE(early.error().find("fenced out"), std::string::npos) << early.error();
    (void)all_arrive(p, 1, 7, {"u0", "u1"}, 1100);
    ASSERT_EQ(p.generation(), 2u);
    auto a = p.heartbeat("u2", 1, 5000);
    ASSERT_TRUE(a) << a.error();
    EXPECT_TRUE(a.value().fenced);
    EXPECT_EQ(a.value().fenced_generation, 1u);
    auto b = p.boundary("u2", 1, 7, 5000);  // even the boundary that dropped it
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().find("'u2' was declared lost in generation 1 and is fenced out"), std::string::npos)
        << b.error();
    EXPECT_FALSE(p.boundary("u2", 2, 8, 5000));
    EXPECT_FALSE(p.ready("u2", 1, 5000));
    EXPECT_FALSE(p.join("u2", 2, 0, 5000));
    // Nothing it sent changed the job.
    EXPECT_EQ(p.generation(), 2u);
    EXPECT_EQ(p.status().world, 2u);
    EXPECT_TRUE(p.status().lost.empty());
    EXPECT_FALSE(p.heartbeat("stranger", 1, 5000));
}

// A leaver's heartbeat that comes after its planned change is acknowledged (it is out, not
// lost), but the protocol forgets leavers a minute later (at the next change after that):
// a job that resizes for weeks would otherwise hold every leaver it ever had. Without the
// pruning, the last check fails (u3's heartbeat is still acknowledged).
TEST(Protocol, LeaversAreForgottenAMinuteAfterTheyLeft) {
    Protocol p = formed(config(1, 4, 1, 4), 4);
    ASSERT_TRUE(p.request_reshape(3, 0));
    (void)all_arrive(p, 1, 1, {"u0", "u1", "u2", "u3"}, 100);
    ASSERT_EQ(p.generation(), 2u);
    auto late = p.heartbeat("u3", 1, 200);
    ASSERT_TRUE(late) << late.error();
    EXPECT_FALSE(late.value().fenced);
    // Still known at the next change within the minute.
    ASSERT_TRUE(p.request_reshape(2, 300));
    (void)all_arrive(p, 2, 2, {"u0", "u1", "u2"}, 60000);
    ASSERT_EQ(p.generation(), 3u);
    EXPECT_TRUE(p.heartbeat("u3", 1, 60050));
    EXPECT_TRUE(p.heartbeat("u2", 2, 60050));
    // A change more than a minute after u3 left drops it; u2 (left at 60000) stays.
    ASSERT_TRUE(p.request_reshape(1, 60100));
    (void)all_arrive(p, 3, 3, {"u0", "u1"}, 60101);
    ASSERT_EQ(p.generation(), 4u);
    auto gone = p.heartbeat("u3", 1, 60150);
    ASSERT_FALSE(gone);
    EXPECT_NE(gone.error().find("neither a member nor a joiner"), std::string::npos) << gone.error();
    EXPECT_TRUE(p.heartbeat("u2", 2, 60150));
    EXPECT_TRUE(p.heartbeat("u1", 3, 60150));
}

TEST(Protocol, HeartbeatsKeepAMemberThatNeverReachesABoundary) {
    auto p = formed(with_liveness(config(1, 2, 1, 2), 1000), 2);
    for (std::int64_t t = 400; t <= 20000; t += 400) {
        for (const char *id : {"u0", "u1"}) ASSERT_TRUE(p.heartbeat(id, 1, t));
        EXPECT_TRUE(p.tick(t).empty());
    }
    EXPECT_TRUE(p.status().lost.empty());
    // Any request counts as a sign of life: u1 at the boundary, u0 heartbeating.
    (void)ok(p.boundary("u1", 1, 3, 20100));
    (void)p.heartbeat("u0", 1, 20500);
    EXPECT_TRUE(p.tick(20900).empty());
    EXPECT_TRUE(p.status().lost.empty());
}

TEST(Protocol, WithoutLivenessSilenceIsNoLoss) {
    auto p = formed(config(1, 2, 1, 2), 2);
    EXPECT_FALSE(p.next_deadline());
    EXPECT_TRUE(p.tick(1000000).empty());
    EXPECT_TRUE(p.status().lost.empty());
}

// A silent rank takes its whole unit, and its unit's ranks are told their MP group is gone.
TEST(Protocol, ASilentRankTellsItsUnitMatesTheirGroupIsGone) {
    Protocol p(with_liveness(config(2, 2, 1, 2), 1000));
    for (auto [id, unit, slot] : {std::tuple{"a0", 0u, 0u}, {"a1", 0u, 1u}, {"b0", 1u, 0u}, {"b1", 1u, 1u}})
        (void)ok(p.join(id, unit, slot, 0));
    for (const char *id : {"a0", "b0", "b1"}) (void)p.heartbeat(id, 1, 800);
    (void)p.tick(1000);
    EXPECT_EQ(p.status().lost, (std::vector<std::string>{"a1"}));
    auto a0 = p.heartbeat("a0", 1, 1100), b0 = p.heartbeat("b0", 1, 1100);
    ASSERT_TRUE(a0 && b0);
    EXPECT_TRUE(a0.value().unit_lost);
    EXPECT_FALSE(b0.value().unit_lost);
    EXPECT_EQ(b0.value().abandon_generation, 1u);
}

TEST(Protocol, EverySilentMemberAtTheBoundaryIsDecidedAtOnce) {
    auto p = formed(with_liveness(config(1, 3, 1, 3), 1000), 3);
    (void)ok(p.boundary("u0", 1, 4, 100));
    (void)ok(p.boundary("u1", 1, 4, 100));
    (void)p.heartbeat("u0", 1, 600);
    (void)p.heartbeat("u1", 1, 600);
    // u2 is silent: lost at 1000, and the others are all at the boundary already.
    auto out = p.tick(1000);
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1"}));
    expect_lost_rewind(same_decision(out), {"u2"}, 2);
}

TEST(Protocol, LostRankDropsItsWholeUnit) {
    Protocol p(config(2, 2, 1, 2));
    for (auto [id, unit, slot] :
         {std::tuple{"a0", 0u, 0u}, {"a1", 0u, 1u}, {"b0", 1u, 0u}, {"b1", 1u, 1u}})
        (void)ok(p.join(id, unit, slot, 0));
    EXPECT_TRUE(ok(p.lost("b1", 50)).empty());
    EXPECT_FALSE(p.lost("stranger", 50));
    auto out = all_arrive(p, 1, 3, {"a0", "a1", "b0"}, 60);
    auto d = same_decision(out);
    EXPECT_EQ(recipients(out), (std::set<std::string>{"a0", "a1", "b0"}));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->lost, (std::vector<std::string>{"b1"}));
    EXPECT_EQ(d->leaving, (std::vector<std::string>{"b0", "b1"}));
    EXPECT_EQ(d->leaving_units, (std::vector<std::uint32_t>{1}));
    EXPECT_EQ(d->next.world, 2u);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0}));
}

TEST(Protocol, BelowMinimumStops) {
    auto p = formed(config(1, 2, 2, 4), 2);
    (void)ok(p.boundary("u0", 1, 1, 0));
    auto out = ok(p.lost("u1", 5));
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Stop);
    EXPECT_EQ(d->reason, "below-min");
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0"}));
    EXPECT_EQ(p.phase(), Phase::Stopped);
    EXPECT_FALSE(p.boundary("u0", 1, 2, 10));
    EXPECT_FALSE(p.join("x", 9, 0, 10));
}

TEST(Protocol, StopRequestReachesMembersAndJoiners) {
    auto p = formed(config(1, 2, 1, 4), 2);
    ASSERT_TRUE(p.request_reshape(3, 0));
    (void)ok(p.join("j", 9, 0, 0));
    EXPECT_TRUE(ok(p.request_stop("sigterm")).empty());  // waits for the boundary
    auto out = all_arrive(p, 1, 4, {"u0", "u1"});
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "j"}));
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Stop);
    EXPECT_EQ(d->reason, "sigterm");
}

TEST(Protocol, FormationTimeout) {
    {
        Protocol p(config(1, 3, 2, 4));
        (void)ok(p.join("a", 0, 0, 100));
        (void)ok(p.join("b", 1, 0, 200));
        EXPECT_EQ(p.next_deadline(), 5100);
        EXPECT_TRUE(p.tick(5099).empty());
        auto d = same_decision(p.tick(5100));
        EXPECT_EQ(d->kind, DecisionKind::Reshaped);
        EXPECT_EQ(d->reason, "formed-at-timeout");
        EXPECT_EQ(d->next.world, 2u);
    }
    {
        Protocol p(config(1, 3, 3, 4));
        (void)ok(p.join("a", 0, 0, 100));
        auto out = p.tick(5100);
        EXPECT_EQ(recipients(out), (std::set<std::string>{"a"}));
        EXPECT_EQ(same_decision(out)->kind, DecisionKind::Stop);
        EXPECT_EQ(p.phase(), Phase::Stopped);
    }
}

TEST(Protocol, ReshapeBackToCurrentCancels) {
    auto p = formed(config(1, 2, 1, 4), 2);
    ASSERT_TRUE(p.request_reshape(1, 0));
    ASSERT_TRUE(p.request_reshape(2, 0));
    EXPECT_FALSE(p.status().target_units);
    EXPECT_EQ(same_decision(all_arrive(p, 1, 1, {"u0", "u1"}))->kind, DecisionKind::Continue);
}

// Where a grow's units start is kept with its target, shown in the status, and dropped with
// it; it means nothing to a shrink.
TEST(Protocol, GrowViaTravelsWithTheTarget) {
    auto p = formed(config(1, 2, 1, 4), 2);
    EXPECT_FALSE(p.request_reshape(1, 0, {}, kViaSatellite));  // a shrink
    EXPECT_FALSE(p.request_reshape(4, 0, {}, "elsewhere"));
    EXPECT_FALSE(p.request_reshape(1, 0, {}, kViaExpand));  // a shrink
    ASSERT_TRUE(p.request_reshape(4, 0, {}, kViaExpand));
    EXPECT_EQ(p.status().target_via, kViaExpand);
    ASSERT_TRUE(p.request_reshape(4, 0, {}, kViaAuto));
    EXPECT_EQ(p.status().target_via, kViaAuto);
    ASSERT_TRUE(p.request_reshape(4, 0, {}, kViaSatellite));
    EXPECT_EQ(p.status().target_units, std::optional<std::uint32_t>(4));
    EXPECT_EQ(p.status().target_via, kViaSatellite);
    // The same target asked again without it: now in the allocation.
    ASSERT_TRUE(p.request_reshape(4, 0));
    EXPECT_EQ(p.status().target_via, kViaAllocation);
    ASSERT_TRUE(p.request_reshape(4, 0, {}, kViaSatellite));
    ASSERT_TRUE(p.request_reshape(2, 0));  // back to the current size: cancelled
    EXPECT_FALSE(p.status().target_units);
}

// Status names who asked for the last resize: omni-ctl (planned), a preempted satellite,
// or a loss; the formation is none.
TEST(Protocol, LastResizeSaysItsKind) {
    auto p = formed(config(1, 3, 1, 4), 3);
    EXPECT_FALSE(p.status().last_resize);
    EXPECT_FALSE(p.request_reshape(2, 0, {}, {}, "whim"));
    ASSERT_TRUE(p.request_reshape(2, 0, {2}, {}, kCausePreemption));
    (void)all_arrive(p, 1, 4, {"u0", "u1", "u2"});
    expect_last_resize(p, kCausePreemption, 3, 2, 4);
    EXPECT_EQ(p.status().last_resize->generation, 2u);
    EXPECT_EQ(p.status().last_resize->old_world, 3u);
    EXPECT_EQ(p.status().last_resize->new_world, 2u);
    ASSERT_TRUE(p.request_reshape(1, 0));
    (void)all_arrive(p, 2, 5, {"u0", "u1"});
    EXPECT_EQ(p.status().last_resize->kind, kCausePlanned);
    EXPECT_EQ(p.status().last_resize->new_units, 1u);
}

TEST(Protocol, ALossIsAResizeOfKindLost) {
    auto p = formed(config(1, 3, 1, 4), 3);
    (void)ok(p.boundary("u0", 1, 5, 1000));
    (void)ok(p.boundary("u1", 1, 5, 1200));
    (void)p.tick(2000);
    expect_last_resize(p, kResizeLost, 3, 2, 5);
}

TEST(Protocol, AnnouncedShrinkAppliesAtTheFollowingBoundary) {
    auto c = config(1, 4, 1, 4);
    c.announce_planned = true;
    auto p = formed(c, 4);
    ASSERT_TRUE(p.request_reshape(2, 0));
    // Boundary 1: CONTINUE, carrying the coming layout (units 0, 1) for everyone to prepare.
    auto out = all_arrive(p, 1, 1, {"u0", "u1", "u2", "u3"});
    EXPECT_EQ(out.size(), 4u);
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Continue);
    EXPECT_EQ(d->reason, "announced");
    EXPECT_EQ(d->next.generation, 2u);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1}));
    EXPECT_EQ(d->leaving_units, (std::vector<std::uint32_t>{2, 3}));
    EXPECT_EQ(p.generation(), 1u);  // nothing applied yet
    EXPECT_FALSE(p.status().last_change && p.status().last_change->step == 1);
    // Boundary 2: the announced change, exactly.
    d = same_decision(all_arrive(p, 1, 2, {"u0", "u1", "u2", "u3"}));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->reason, "planned");
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1}));
    EXPECT_EQ(p.generation(), 2u);
    // Boundary 3: routine again, with no layout.
    d = same_decision(all_arrive(p, 2, 3, {"u0", "u1"}));
    EXPECT_EQ(d->kind, DecisionKind::Continue);
    EXPECT_EQ(d->next.world, 0u);
}

TEST(Protocol, AnAnnouncementGivesWayToANewTargetOrALoss) {
    auto c = config(1, 4, 1, 4);
    c.announce_planned = true;
    auto p = formed(c, 4);
    ASSERT_TRUE(p.request_reshape(2, 0));
    auto d = same_decision(all_arrive(p, 1, 1, {"u0", "u1", "u2", "u3"}));
    ASSERT_EQ(d->reason, "announced");
    // The target moves to 3 before the change applies: announced afresh, applied a boundary later.
    ASSERT_TRUE(p.request_reshape(3, 5));
    d = same_decision(all_arrive(p, 1, 2, {"u0", "u1", "u2", "u3"}));
    EXPECT_EQ(d->kind, DecisionKind::Continue);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1, 2}));
    // A rank lost before the announced change applies: the loss applies at once (rewind).
    auto lost = ok(p.lost("u3", 20));
    d = same_decision(all_arrive(p, 1, 3, {"u0", "u1", "u2"}, 30));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_TRUE(d->rewind);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1, 2}));
    EXPECT_EQ(p.generation(), 2u);
}

TEST(Protocol, ChangePauseIsKnownWhenEveryNewMemberIsReady) {
    Protocol p = formed(config(1, 3, 1, 3), 3);
    // Generation 1 formed at time 0; its members report ready at 4, 9 and 12.
    ASSERT_TRUE(p.ready("u0", 1, 4));
    ASSERT_TRUE(p.ready("u1", 1, 9));
    EXPECT_FALSE(p.status().change_pause_ms);
    ASSERT_TRUE(p.ready("u1", 1, 10));  // a repeat changes nothing
    EXPECT_FALSE(p.status().change_pause_ms);
    ASSERT_TRUE(p.ready("u2", 1, 12));
    EXPECT_EQ(p.status().change_pause_ms, 12);
    // A shrink decided at 100: the pause runs from the decision, for the new members only.
    ASSERT_TRUE(p.request_reshape(2, 50));
    (void)all_arrive(p, 1, 5, {"u0", "u1", "u2"}, 100);
    ASSERT_EQ(p.generation(), 2u);
    EXPECT_FALSE(p.status().change_pause_ms);
    EXPECT_FALSE(p.ready("u2", 2, 110));    // the leaver is no member of generation 2
    EXPECT_TRUE(p.ready("u2", 1, 110));     // a late report for generation 1 is ignored
    ASSERT_TRUE(p.ready("u1", 2, 131));
    EXPECT_FALSE(p.status().change_pause_ms);
    ASSERT_TRUE(p.ready("u0", 2, 137));
    EXPECT_EQ(p.status().change_pause_ms, 37);
    // A later report (ready again after a lost reply) keeps the first measurement.
    ASSERT_TRUE(p.ready("u0", 2, 150));
    EXPECT_EQ(p.status().change_pause_ms, 37);
}

TEST(Protocol, AnnouncedGrowAdmitsItsJoinersEarly) {
    auto c = config(1, 2, 1, 4);
    c.announce_planned = true;
    auto p = formed(c, 2);
    ASSERT_TRUE(p.request_reshape(3, 0));
    ASSERT_TRUE(ok(p.join("j5", 5, 0, 1)).empty());  // the joiner waits
    ASSERT_TRUE(ok(p.join("j6", 6, 0, 1)).empty());  // a spare unit the grow does not need
    // Boundary 1 announces units 0, 1, 5: the members and joiner j5 hear it, j6 does not.
    auto out = all_arrive(p, 1, 1, {"u0", "u1"});
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "j5"}));
    auto d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Continue);
    EXPECT_EQ(d->reason, "announced");
    EXPECT_EQ(d->joining_units, (std::vector<std::uint32_t>{5}));
    EXPECT_EQ(d->next.rank_of(5, 0), 2u);
    // Still pending: repeating its join waits again, and it is not a member yet.
    EXPECT_TRUE(ok(p.join("j5", 5, 0, 20)).empty());
    EXPECT_EQ(p.status().pending_joiners.size(), 2u);
    // Boundary 2 applies the change: j5 gets the admission.
    out = all_arrive(p, 1, 2, {"u0", "u1"});
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "j5"}));
    d = same_decision(out);
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->joining, std::vector<std::string>{"j5"});
    EXPECT_EQ(rank_of(*d, "j5"), 2u);
    EXPECT_EQ(p.status().pending_joiners, std::vector<std::string>{"j6"});
}

// B = 12 samples per step in micro-batches of 1: GA = 12 / DP is whole for DP 1, 2, 3, 4, 6
// and 12 and for no other (single-rank units, so DP = units).
TEST(Protocol, EveryWorldKeepsGradientAccumulationWhole) {
    const BatchGeometry b12{12, 1};
    auto p = formed(config(1, 4, 1, 8), 4);
    // Before any rank said what its batch is, any count in range is taken.
    EXPECT_TRUE(p.request_reshape(4, 0));
    (void)all_arrive(p, 1, 1, {"u0", "u1", "u2", "u3"}, 10, b12);
    auto r = p.request_reshape(5, 20);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), "reshape: 5 units are 5 data-parallel ranks, and the global batch 12 is not a "
                         "whole number of micro-batches of 1 per rank (GA = B / (b x DP)); unit counts "
                         "that work: 1, 2, 3, 4, 6");
    EXPECT_FALSE(p.request_reshape(8, 20));
    EXPECT_TRUE(p.request_reshape(6, 20));
    EXPECT_TRUE(p.request_reshape(4, 20));  // cancels it again

    // Every rank must report the same geometry, and a consistent one.
    auto other = p.boundary("u0", 1, 2, 30, BatchGeometry{24, 1});
    ASSERT_FALSE(other);
    EXPECT_EQ(other.error(), "boundary: 'u0' has global batch 24 / micro-batch 1, the other ranks 12 / 1");
    EXPECT_FALSE(p.boundary("u0", 1, 2, 30, BatchGeometry{12, 5}));
    EXPECT_FALSE(p.boundary("u0", 1, 2, 30, BatchGeometry{12, 0}));

    // A loss leaves 3 units: 12 / 3 is whole, so all three go on.
    (void)ok(p.lost("u3", 40));
    auto d = same_decision(all_arrive(p, 1, 2, {"u0", "u1", "u2"}, 50, b12));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1, 2}));
}

TEST(Protocol, AfterALossTheLastSurvivorsLeaveUntilTheWorldFits) {
    const BatchGeometry b12{12, 1};
    auto p = formed(config(1, 6, 1, 8), 6);
    (void)all_arrive(p, 1, 1, {"u0", "u1", "u2", "u3", "u4", "u5"}, 10, b12);
    // 6 -> 5 survivors: 12 / 5 is not whole, 12 / 4 is: u4 leaves healthy with the lost u5.
    (void)ok(p.lost("u5", 20));
    auto out = all_arrive(p, 1, 2, {"u0", "u1", "u2", "u3", "u4"}, 30, b12);
    auto d = same_decision(out);
    EXPECT_EQ(recipients(out), (std::set<std::string>{"u0", "u1", "u2", "u3", "u4"}));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->reason, "lost");
    EXPECT_TRUE(d->rewind);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1, 2, 3}));
    EXPECT_EQ(d->leaving, (std::vector<std::string>{"u4", "u5"}));
    EXPECT_EQ(d->lost, (std::vector<std::string>{"u5"}));

    // MIN 4 and B = 20: losing one of 5 units keeps 4 (20 / 4 is whole).
    auto q = formed(config(1, 5, 4, 8), 5);
    (void)all_arrive(q, 1, 1, {"u0", "u1", "u2", "u3", "u4"}, 10, BatchGeometry{20, 1});
    (void)ok(q.lost("u0", 20));
    auto k = same_decision(all_arrive(q, 1, 2, {"u1", "u2", "u3", "u4"}, 30, BatchGeometry{20, 1}));
    EXPECT_EQ(k->kind, DecisionKind::Reshaped);
    EXPECT_EQ(k->next.world, 4u);
    // Losing one more: 3 does not divide 20, 2 would but is below MIN 4: STOP.
    (void)ok(q.lost("u1", 40));
    auto s = same_decision(all_arrive(q, 2, 3, {"u2", "u3", "u4"}, 50, BatchGeometry{20, 1}));
    EXPECT_EQ(s->kind, DecisionKind::Stop);
    EXPECT_EQ(s->reason, "below-min");
}

TEST(Protocol, APartialGrowTakesOnlyUnitsThatKeepTheWorldFitting) {
    const BatchGeometry b8{8, 1};
    auto p = formed(config(1, 2, 1, 8), 2);
    (void)all_arrive(p, 1, 1, {"u0", "u1"}, 10, b8);
    ASSERT_TRUE(p.request_reshape(8, 1000));
    for (std::uint32_t j = 2; j < 5; ++j) (void)ok(p.join("j" + std::to_string(j), j, 0, 1000));
    // After the wait 3 complete joiner units are in: 2 + 3 = 5 does not divide 8, 2 + 2 does.
    auto d = same_decision(all_arrive(p, 1, 2, {"u0", "u1"}, 4000, b8));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->next.world, 4u);
    EXPECT_EQ(d->joining, (std::vector<std::string>{"j2", "j3"}));
    EXPECT_EQ(p.status().pending_joiners, (std::vector<std::string>{"j4"}));
}

TEST(Protocol, PlannedShrinkRemovesTheUnitsItNames) {
    // Units 0..3 of one rank; omni-ctl shrink names units 1 and 3 (their nodes empty).
    Protocol p = formed(config(1, 4, 1, 4), 4);
    EXPECT_FALSE(p.request_reshape(2, 0, {1}));        // two must leave, one is named
    EXPECT_FALSE(p.request_reshape(2, 0, {1, 1}));     // named twice
    EXPECT_FALSE(p.request_reshape(2, 0, {1, 7}));     // 7 is not in generation 1
    EXPECT_FALSE(p.request_reshape(4, 0, {1}));        // not a shrink
    ASSERT_TRUE(p.request_reshape(2, 0, {3, 1}));
    EXPECT_EQ(p.status().target_leave, (std::vector<std::uint32_t>{1, 3}));
    auto d = same_decision(all_arrive(p, 1, 5, {"u0", "u1", "u2", "u3"}));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->leaving_units, (std::vector<std::uint32_t>{1, 3}));
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 2}));
    EXPECT_EQ(rank_of(*d, "u2"), 1u);  // survivors keep their order
    EXPECT_FALSE(p.status().target_units);
    EXPECT_TRUE(p.status().target_leave.empty());
}

TEST(Protocol, ANamedUnitLostBeforeTheShrinkCountsAsGone) {
    Protocol p = formed(config(1, 4, 1, 4), 4);
    ASSERT_TRUE(p.request_reshape(2, 0, {2, 3}));
    (void)ok(p.lost("u3", 1));
    auto d = same_decision(all_arrive(p, 1, 5, {"u0", "u1", "u2"}));
    EXPECT_EQ(d->kind, DecisionKind::Reshaped);
    EXPECT_EQ(d->next.units, (std::vector<std::uint32_t>{0, 1}));  // 3 lost, 2 left as asked
}

TEST(Protocol, RanksSayWhereTheyRun) {
    Protocol p(config(1, 2, 1, 3));
    (void)ok(p.join("u0", 0, 0, 0, "n1"));
    (void)ok(p.join("u1", 1, 0, 0));  // says nothing
    EXPECT_FALSE(p.join("u2", 2, 0, 0, "bad node"));
    EXPECT_FALSE(p.join("u2", 2, 0, 0, std::string(65, 'n')));
    auto st = p.status();
    EXPECT_EQ(st.nodes, (std::map<std::string, std::string, std::less<>>{{"u0", "n1"}}));
    // A joiner's node shows while it waits, and goes with it when it leaves.
    (void)ok(p.join("u2", 2, 0, 0, "n3"));
    EXPECT_EQ(p.status().nodes.count("u2"), 1u);
    ASSERT_TRUE(p.request_reshape(3, 0));
    (void)all_arrive(p, 1, 1, {"u0", "u1"});
    ASSERT_EQ(p.generation(), 2u);
    ASSERT_TRUE(p.request_reshape(1, 0, {0, 2}));
    (void)all_arrive(p, 2, 2, {"u0", "u1", "u2"});
    EXPECT_EQ(p.status().layout.units, (std::vector<std::uint32_t>{1}));
    EXPECT_TRUE(p.status().nodes.empty());
}
