// The coordinator's generation protocol as a pure state machine: no sockets, no clocks, no
// threads. The service (coordinator.h) feeds it requests with the current monotonic time and
// sends the replies it returns; tests drive it directly with invented times.
//
// Model (doc/design.md, "Generation protocol"):
//  - Ranks belong to elastic units of `unit_size` ranks; units are the grain of every change.
//    A rank is identified by a caller-chosen id and joins as (unit id, slot in unit).
//  - Generation 1 forms when `initial_units` complete units have joined (or, at the formation
//    timeout, with at least `min_units` complete units). Every later generation is the
//    result of a boundary decision.
//  - After every optimizer step each member calls boundary(generation, step). When every
//    member of the generation has arrived, one Decision is made and the same Decision is
//    returned to every member (and to the joiners it admits): CONTINUE, RESHAPED (the next
//    layout: world size, every member's new rank, who leaves, who joins) or STOP.
//  - Ranks are numbered unit by unit: rank = (position of the unit) * unit_size + slot.
//    Surviving units keep their relative order and joiners are appended in unit-id order, so
//    rank 0 stays rank 0 unless its unit leaves. A planned shrink removes the last units.
//  - A member that has not arrived `boundary_timeout_ms` after the first arrival, or that
//    the launcher reports dead (lost()), is lost; its whole unit is dropped at that boundary
//    (an unplanned reshape with rewind = true: survivors restore the last checkpoint).
//    Below `min_units` the decision is STOP.
//  - Liveness (liveness_timeout_ms > 0): members send heartbeat() from a thread of their own
//    (runtime/liveness.h), and any request counts as one. A member silent for the timeout is
//    lost at once, with no boundary in progress: a stopped (SIGSTOP) or hung process keeps
//    its TCP connections open, so its peers wait for it inside a collective and never reach
//    the boundary whose timeout would catch it. The survivors learn of the loss from their
//    heartbeat replies (abandon), leave their collectives and meet at the boundary, which
//    answers REWIND as for any loss.
//  - Fencing: a member declared lost is fenced out for good (ids are never reused): its
//    join, boundary, ready and heartbeat are refused, so a lost rank that comes back (SIGCONT)
//    can change nothing and learns that it must exit.
//  - A planned grow waits for complete joiner units (launched by omni-launch, pending here)
//    and applies them when all the units it asked for are in, or after `grow_wait_ms` with
//    whatever complete units are in; until then boundaries CONTINUE. With announce_planned,
//    the announcing CONTINUE also goes to the pending joiners of the announced units (an
//    early admission: they learn their coming rank and can prepare during the announced
//    step); they stay pending, repeat their join, and are admitted when the change applies.
//  - Requests are idempotent: a member that repeats boundary(g, s) after the decision (a
//    lost reply) gets the same Decision again.
//  - Members say at their boundaries which global batch B and micro-batch b their ledger
//    has. From then on every world is one where GA = B / (b x world) is whole: a planned
//    reshape to another unit count is refused when asked for, a grow takes only as many
//    complete joiner units as keep GA whole, and after a loss the last surviving units leave
//    until it is (STOP when that is below `min_units`). Without it the ranks would refuse the
//    new generation only after the coordinator had moved to it.
#ifndef OMNI_LAUNCHER_PROTOCOL_H
#define OMNI_LAUNCHER_PROTOCOL_H

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

constexpr std::size_t kMaxMemberIdLength = 128;
constexpr std::uint32_t kMaxUnits = 65536;
constexpr std::uint32_t kMaxUnitSizeRanks = 4096;
constexpr std::uint32_t kMaxWorld = 1u << 20;
constexpr std::size_t kRateWindow = 16;  // boundaries behind ProtocolStatus::samples_per_s

// Member ids: 1..128 characters from [A-Za-z0-9._:@-] (host names, job.step.task, pids).
Status check_member_id(std::string_view id);
// Node names as Slurm gives them (SLURMD_NODENAME): 1..64 characters from [A-Za-z0-9._-].
constexpr std::size_t kMaxNodeNameLength = 64;
Status check_node_name(std::string_view node);
// Where the units of a planned grow start, as omni-launch reads it from the status: in the
// job's own allocation ("allocation", the default), in a satellite job omni-launch submits
// ("satellite"), on nodes Slurm's job expansion adds to the job ("expand",
// launch/expansion.h), or by expansion where the job qualifies and by satellite otherwise
// ("auto"). The coordinator only keeps it with the target.
inline constexpr const char *kViaAllocation = "allocation";
inline constexpr const char *kViaSatellite = "satellite";
inline constexpr const char *kViaExpand = "expand";
inline constexpr const char *kViaAuto = "auto";
Status check_grow_via(std::string_view via);
// Who asked for a planned reshape, kept with the target and reported as the kind of the
// resize it makes (ProtocolStatus::last_resize): a person or script through omni-ctl
// ("planned", the default), a satellite leaving because Slurm preempts it ("preemption"),
// the elastic policy ("policy"), or a node-count change of the job in Slurm ("scontrol").
// A resize that recovers from lost ranks is of kind "lost".
inline constexpr const char *kCausePlanned = "planned";
inline constexpr const char *kCausePreemption = "preemption";
inline constexpr const char *kCausePolicy = "policy";
inline constexpr const char *kCauseScontrol = "scontrol";
inline constexpr const char *kResizeLost = "lost";
Status check_resize_cause(std::string_view cause);

// The last change of membership after the formation, as status reports it.
struct ResizeRecord {
    std::string kind;  // kCause* or kResizeLost
    std::uint64_t generation = 0;  // the generation it made
    std::uint64_t step = 0;        // the boundary it applied at
    std::uint32_t old_units = 0, new_units = 0, old_world = 0, new_world = 0;
};

struct Member {
    std::string id;
    std::uint32_t unit = 0;  // launcher-assigned unit id (stable across generations)
    std::uint32_t slot = 0;  // 0..unit_size-1 inside the unit
    std::uint32_t rank = 0;  // rank in the generation
    bool operator==(const Member &o) const {
        return id == o.id && unit == o.unit && slot == o.slot && rank == o.rank;
    }
};

struct Layout {
    std::uint64_t generation = 0;
    std::uint32_t world = 0;
    std::vector<std::uint32_t> units;  // unit ids in rank order
    // Sorted by rank; members[r].rank == r. Inside the coordinator every member has its id;
    // a layout received over the wire has (unit, slot, rank) only (see wire.h).
    std::vector<Member> members;
    const Member *find(std::string_view id) const;
    // The rank of (unit, slot) in this layout, if that unit is in it. Ranks use this after a
    // RESHAPED decision: no rank id is needed to find one's new rank.
    std::optional<std::uint32_t> rank_of(std::uint32_t unit, std::uint32_t slot) const;
};

enum class DecisionKind { Continue, Reshaped, Stop };
const char *to_string(DecisionKind k);

struct Decision {
    DecisionKind kind = DecisionKind::Continue;
    std::uint64_t generation = 0;  // the generation that reached the boundary (0: formation)
    std::uint64_t step = 0;        // the boundary's step (0 for formation)
    std::string reason;            // "formed", "planned", "lost", "stop-requested", ...
    bool rewind = false;           // ranks were lost: restore the last checkpoint
    Layout next;                   // RESHAPED: the new generation; CONTINUE: empty, or the
                                   // generation announced for the next boundary; STOP: empty
    std::vector<std::string> leaving, joining, lost;  // member ids, sorted
    std::vector<std::uint32_t> leaving_units, joining_units;  // unit ids, sorted
};

// A reply the service must deliver: to `to` (a member id), the decision. One Decision is
// shared by every delivery of a boundary: all ranks get the very same answer.
struct Delivery {
    std::string to;
    std::shared_ptr<const Decision> decision;
};

struct ProtocolConfig {
    std::uint32_t unit_size = 1;
    std::uint32_t initial_units = 1;
    std::uint32_t min_units = 1;
    std::uint32_t max_units = 1;
    std::int64_t boundary_timeout_ms = 30000;
    std::int64_t formation_timeout_ms = 120000;
    std::int64_t grow_wait_ms = 60000;
    // Planned changes are announced one boundary ahead: that boundary answers CONTINUE with
    // the coming layout in `next`, and the change applies at the following boundary if
    // nothing else changed (ranks allocate for their new ranges during that step, off the
    // pause). Losses apply at once. false: a planned change applies at the first boundary.
    bool announce_planned = false;
    // A member that sent nothing (heartbeat or any other request) for this long is lost, at
    // a boundary or not. 0: no liveness, members are lost only as above (omni-launch sets
    // it to boundary_timeout_ms).
    std::int64_t liveness_timeout_ms = 0;
};

// What a heartbeat tells a rank.
struct HeartbeatAck {
    // The rank was declared lost: it must stop, publish nothing and exit.
    bool fenced = false;
    std::uint64_t fenced_generation = 0;  // the generation it was lost from
    // Members of `generation` are lost and the survivors wait for them: leave that
    // generation's collectives and go to the boundary (0: nothing to abandon).
    std::uint64_t abandon_generation = 0;
    bool unit_lost = false;  // a rank of this rank's own unit is among them (its MP group)
    std::int64_t timeout_ms = 0;   // the coordinator's liveness timeout
    std::int64_t interval_ms = 0;  // how often to send heartbeats
};
Status validate(const ProtocolConfig &cfg);

enum class Phase { Forming, Running, Stopped };
const char *to_string(Phase p);

struct ProtocolStatus {
    Phase phase = Phase::Forming;
    std::uint64_t generation = 0;
    std::uint32_t units = 0, world = 0, unit_size = 0, min_units = 0, max_units = 0;
    std::optional<std::uint32_t> target_units;    // a planned reshape not yet applied
    std::vector<std::uint32_t> target_leave;      // the units it removes, when it names them
    std::string target_via;                       // a grow's: one of the kVia* words
    std::optional<std::uint64_t> boundary_step;   // a boundary in progress
    std::uint32_t arrived = 0;                    // members at that boundary
    std::uint64_t last_step = 0;                  // last decided boundary
    std::vector<std::string> pending_joiners;     // ids of ranks waiting to be admitted
    std::vector<std::string> lost;                // lost members of the current generation
    std::optional<Decision> last_decision;
    std::optional<Decision> last_change;          // the last RESHAPED/STOP (formation included)
    // From the decision that made the current generation until its last member was ready()
    // (absent until then): the pause of that change as the coordinator saw it.
    std::optional<std::int64_t> change_pause_ms;
    Layout layout;
    // The node each rank said it runs on when it joined (absent for ranks that did not say).
    std::map<std::string, std::string, std::less<>> nodes;
    // The ranks' ledger geometry, once a boundary reported it (the first BatchGeometry).
    std::optional<std::uint64_t> global_batch, micro_batch;
    std::uint32_t mp = 1;  // ranks per model-parallel group (the ranks' report; 1 until then)
    // Samples trained per second over the last boundaries (up to kRateWindow of them, since
    // the last rewind): global batch x steps / time. Absent until two boundaries are known.
    std::optional<double> samples_per_s;
    // Generation changes by reason ("formed", "planned", "lost"; a STOP is not one).
    std::map<std::string, std::uint64_t> changes;
    std::optional<ResizeRecord> last_resize;
};

// A rank's data ledger as it reports it at boundaries: global batch B and micro-batch b
// (both 0: the rank has no ledger, and any world will do), and its model-parallel size M
// (the ledger's DP size is world / M).
struct BatchGeometry {
    std::uint64_t global_batch = 0, micro_batch = 0;
    std::uint32_t mp = 1;
    bool operator==(const BatchGeometry &o) const {
        return global_batch == o.global_batch && micro_batch == o.micro_batch && mp == o.mp;
    }
};

class Protocol {
public:
    explicit Protocol(const ProtocolConfig &cfg);  // cfg must pass validate()

    // A rank joins as (unit, slot), running on `node` (empty: not said). Before generation
    // 1 it waits for the formation; later it waits as a joiner until a grow admits it.
    // Repeating the same join is harmless.
    Result<std::vector<Delivery>> join(std::string_view id, std::uint32_t unit,
                                       std::uint32_t slot, std::int64_t now_ms,
                                       std::string_view node = {});
    // A member reached the boundary after step `step` of `generation`, with the ledger
    // geometry `batch` (every member must report the same one).
    Result<std::vector<Delivery>> boundary(std::string_view id, std::uint64_t generation,
                                           std::uint64_t step, std::int64_t now_ms,
                                           BatchGeometry batch = {});
    // The launcher saw a rank die (task exit, node failure). Unknown ids are an error.
    Result<std::vector<Delivery>> lost(std::string_view id, std::int64_t now_ms);
    // A sign of life from `id`, which runs in `generation` (its own view: it may still be in
    // the previous one). Pending joiners may send it too. Errors: an id the job does not know.
    Result<HeartbeatAck> heartbeat(std::string_view id, std::uint64_t generation, std::int64_t now_ms);
    // The members of the current generation lost since its last boundary decision.
    const std::set<std::string, std::less<>> &lost_members() const { return lost_; }
    // Whether `id` was declared lost (and so is fenced out).
    bool fenced(std::string_view id) const { return fenced_.count(id) != 0; }
    // Timeouts: formation, boundaries that some members never reach, silent members (with
    // liveness), grow waits.
    std::vector<Delivery> tick(std::int64_t now_ms);

    // A member of `generation` has built its communicator and holds its state after the
    // change that made that generation (the end of its pause). When every member has said
    // so, the change's pause is known: status().change_pause_ms. A generation that is no
    // longer the current one is ignored (a slow rank; the job moved on); an id that is not a
    // member of the current one is an error.
    Status ready(std::string_view id, std::uint64_t generation, std::int64_t now_ms);
    // A planned reshape to `units` units (min..max, and a world the members' global batch
    // divides into whole micro-batches), applied at a coming boundary. A shrink removes the
    // last units unless `leave` names them: exactly (current units - `units`) distinct units
    // of the current generation (omni-ctl shrink picks them by node). A unit of `leave` lost
    // before the change applies counts as gone; the rest leave as asked. `via` (a grow only;
    // empty: kViaAllocation) says where omni-launch starts the joining units; `cause`
    // (empty: kCausePlanned) who asked, for status.
    Status request_reshape(std::uint32_t units, std::int64_t now_ms,
                           const std::vector<std::uint32_t> &leave = {},
                           std::string_view via = {}, std::string_view cause = {});
    // STOP at the next boundary (e.g. the launcher got SIGTERM). While forming, the job stops
    // at once and the waiting ranks get the STOP.
    Result<std::vector<Delivery>> request_stop(std::string_view reason);

    ProtocolStatus status() const;
    const ProtocolConfig &config() const { return cfg_; }
    std::uint64_t generation() const { return layout_.generation; }
    Phase phase() const { return phase_; }
    // The earliest time tick() has something to do, if any (for the service's poll timeout).
    std::optional<std::int64_t> next_deadline() const;

private:
    struct Pending {  // a joined rank not (yet) in a generation
        std::string id;
        std::uint32_t unit, slot;
    };
    std::vector<std::uint32_t> complete_pending_units() const;
    // The waiting room, with its count of ranks per unit kept alongside: formation checks
    // for complete units at every join, and a recount there made registration O(N^2).
    void add_pending(std::string_view id, std::uint32_t unit, std::uint32_t slot);
    void remove_pending(std::string_view id);
    void clear_pending();
    // Whether `units` units make a world the reported batch geometry allows.
    bool feasible(std::size_t units) const;
    std::vector<Delivery> form(const std::vector<std::uint32_t> &units, std::string reason,
                               std::int64_t now_ms);
    void generation_began(std::int64_t now_ms);
    std::vector<Delivery> decide(std::int64_t now_ms);
    Layout make_layout(std::uint64_t generation, const std::vector<std::uint32_t> &units) const;

    ProtocolConfig cfg_;
    Phase phase_ = Phase::Forming;
    std::int64_t forming_since_ms_ = -1;          // first join
    Layout layout_;                               // the current generation (empty while forming)
    std::map<std::string, Pending, std::less<>> pending_;   // by id
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::string> pending_slots_;
    std::map<std::uint32_t, std::uint32_t> pending_per_unit_;  // unit -> its ranks waiting
    std::size_t pending_complete_ = 0;  // units with all unit_size ranks waiting
    // The current layout's members by id, with their rank: boundary, lost, ready and
    // heartbeat look a member up at every request, and a scan of the layout there made a
    // boundary O(N^2). Rebuilt with every new layout (generation_began).
    std::map<std::string, std::uint32_t, std::less<>> rank_by_id_;
    const Member *member(std::string_view id) const;
    // The boundary in progress.
    std::optional<std::uint64_t> boundary_step_;
    std::int64_t boundary_since_ms_ = 0;
    std::set<std::string, std::less<>> arrived_;
    std::set<std::string, std::less<>> lost_;
    // Planned changes.
    std::optional<std::uint32_t> target_units_;
    std::vector<std::uint32_t> target_leave_;  // sorted; empty: a shrink removes the last units
    std::string target_via_ = kViaAllocation;
    std::string target_cause_ = kCausePlanned;
    std::optional<ResizeRecord> last_resize_;
    std::int64_t target_since_ms_ = 0;
    std::vector<std::uint32_t> announced_;  // units of the change announced at the last boundary
    std::optional<std::string> stop_reason_;
    std::optional<BatchGeometry> batch_;  // the first geometry a member reported
    // The last decision, kept for repeated requests and for status.
    std::shared_ptr<const Decision> last_;
    std::set<std::string, std::less<>> last_members_;  // the generation that decided last_
    std::shared_ptr<const Decision> last_change_;
    // Members that left in a planned change (never lost), with the time they left: their
    // heartbeats, which may come after the change applied, are acknowledged, not refused
    // (ids are never reused). A leaver stops its heartbeats once it acts on its LEFT, within
    // a heartbeat interval or two, so an entry is kept kLeftKeepMs or a few timeouts, if
    // longer, and then dropped: a job that resizes for weeks would otherwise hold one per
    // leaver it ever had.
    std::map<std::string, std::int64_t, std::less<>> left_;
    static constexpr std::int64_t kLeftKeepMs = 60000;
    void prune_left(std::int64_t now_ms);
    std::uint64_t last_step_ = 0;
    // The current generation's start and which of its members are ready() since.
    std::int64_t generation_since_ms_ = 0;
    std::set<std::string, std::less<>> ready_;
    std::optional<std::int64_t> change_pause_ms_;
    // Where ranks run (join's `node`), for the members and the waiting joiners.
    std::map<std::string, std::string, std::less<>> nodes_;
    // (step, time) of the last decided boundaries, for samples_per_s; changes by reason.
    std::deque<std::pair<std::uint64_t, std::int64_t>> decided_;
    std::map<std::string, std::uint64_t> changes_;
    // Liveness: when each member of the current generation last sent anything; and the
    // members ever declared lost, by the generation they were lost from (fenced out).
    std::map<std::string, std::int64_t, std::less<>> last_seen_;
    // The same times ordered, lost members left out: the first entry is the next to fall
    // silent, so liveness costs O(log N) a request, where a scan of every member per
    // service loop made each boundary O(N^2).
    std::set<std::pair<std::int64_t, std::string>> by_silence_;
    std::map<std::string, std::uint64_t, std::less<>> fenced_;
    void seen(std::string_view id, std::int64_t now_ms);
    Status refuse_fenced(const char *op, std::string_view id) const;
    void mark_lost(std::string_view id);  // lost now, and fenced out for good
    // Members silent for the liveness timeout become lost (no decision yet).
    bool declare_silent_lost(std::int64_t now_ms);
};

}  // namespace omni::launcher

#endif
