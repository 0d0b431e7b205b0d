// The generation protocol; see protocol.h for the model.
#include "coord/protocol.h"

#include <algorithm>

namespace omni::launcher {
namespace {

std::string u(std::uint64_t v) { return std::to_string(v); }

bool id_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == ':' || c == '@' || c == '-';
}

}  // namespace

Status check_member_id(std::string_view id) {
    if (id.empty() || id.size() > kMaxMemberIdLength)
        return make_error("member id must be 1.." + u(kMaxMemberIdLength) + " characters");
    for (char c : id)
        if (!id_char_ok(c))
            return make_error("member id '" + std::string(id.substr(0, 64)) +
                              "': only letters, digits and . _ : @ - are allowed");
    return Status::success();
}

Status check_node_name(std::string_view node) {
    if (node.empty() || node.size() > kMaxNodeNameLength)
        return make_error("node name must be 1.." + u(kMaxNodeNameLength) + " characters");
    for (char c : node)
        if (!id_char_ok(c) || c == ':' || c == '@')
            return make_error("node name '" + std::string(node.substr(0, 64)) +
                              "': only letters, digits and . _ - are allowed");
    return Status::success();
}

Status check_resize_cause(std::string_view cause) {
    for (const char *c : {kCausePlanned, kCausePreemption, kCausePolicy, kCauseScontrol})
        if (cause == c) return Status::success();
    return make_error("'cause' is '" + std::string(cause.substr(0, 32)) + "': expected " + kCausePlanned + ", " +
                      kCausePreemption + ", " + kCausePolicy + " or " + kCauseScontrol);
}

Status check_grow_via(std::string_view via) {
    for (const char *v : {kViaAllocation, kViaSatellite, kViaExpand, kViaAuto})
        if (via == v) return Status::success();
    return make_error("'via' is '" + std::string(via.substr(0, 32)) + "': expected " + kViaAuto + ", " +
                      kViaSatellite + ", " + kViaExpand + " or " + kViaAllocation);
}

const Member *Layout::find(std::string_view id) const {
    for (const auto &m : members)
        if (m.id == id) return &m;
    return nullptr;
}

std::optional<std::uint32_t> Layout::rank_of(std::uint32_t unit, std::uint32_t slot) const {
    if (units.empty() || world % units.size() != 0) return std::nullopt;
    const std::uint32_t unit_size = world / static_cast<std::uint32_t>(units.size());
    if (slot >= unit_size) return std::nullopt;
    for (std::size_t i = 0; i < units.size(); ++i)
        if (units[i] == unit) return static_cast<std::uint32_t>(i) * unit_size + slot;
    return std::nullopt;
}

const char *to_string(DecisionKind k) {
    switch (k) {
    case DecisionKind::Continue: return "continue";
    case DecisionKind::Reshaped: return "reshaped";
    case DecisionKind::Stop: return "stop";
    }
    return "?";
}

const char *to_string(Phase p) {
    switch (p) {
    case Phase::Forming: return "forming";
    case Phase::Running: return "running";
    case Phase::Stopped: return "stopped";
    }
    return "?";
}

Status validate(const ProtocolConfig &c) {
    if (c.unit_size < 1 || c.unit_size > kMaxUnitSizeRanks)
        return make_error("unit size " + u(c.unit_size) + " must be in 1.." + u(kMaxUnitSizeRanks));
    if (c.min_units < 1 || c.min_units > c.max_units || c.max_units > kMaxUnits)
        return make_error("elastic range " + u(c.min_units) + ":" + u(c.max_units) +
                          " must satisfy 1 <= MIN <= MAX <= " + u(kMaxUnits));
    if (c.initial_units < c.min_units || c.initial_units > c.max_units)
        return make_error("initial units " + u(c.initial_units) + " must be in " +
                          u(c.min_units) + ".." + u(c.max_units));
    if (std::uint64_t(c.max_units) * c.unit_size > kMaxWorld)
        return make_error("MAX units x unit size exceeds " + u(kMaxWorld) + " ranks");
    if (c.boundary_timeout_ms <= 0 || c.formation_timeout_ms <= 0 || c.grow_wait_ms < 0 ||
        c.liveness_timeout_ms < 0)
        return make_error("timeouts must be positive");
    return Status::success();
}

Protocol::Protocol(const ProtocolConfig &cfg) : cfg_(cfg) {}

std::vector<std::uint32_t> Protocol::complete_pending_units() const {
    std::vector<std::uint32_t> out;
    for (auto [unit, n] : pending_per_unit_)
        if (n == cfg_.unit_size) out.push_back(unit);  // std::map: ascending unit ids
    return out;
}

void Protocol::add_pending(std::string_view id, std::uint32_t unit, std::uint32_t slot) {
    pending_.emplace(std::string(id), Pending{std::string(id), unit, slot});
    pending_slots_.emplace(std::make_pair(unit, slot), std::string(id));
    if (++pending_per_unit_[unit] == cfg_.unit_size) ++pending_complete_;
}

void Protocol::remove_pending(std::string_view id) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    const std::uint32_t unit = it->second.unit;
    pending_slots_.erase({unit, it->second.slot});
    pending_.erase(it);
    auto n = pending_per_unit_.find(unit);
    if (n->second-- == cfg_.unit_size) --pending_complete_;
    if (n->second == 0) pending_per_unit_.erase(n);
}

void Protocol::clear_pending() {
    pending_.clear();
    pending_slots_.clear();
    pending_per_unit_.clear();
    pending_complete_ = 0;
}

const Member *Protocol::member(std::string_view id) const {
    auto it = rank_by_id_.find(id);
    return it == rank_by_id_.end() ? nullptr : &layout_.members[it->second];
}

Layout Protocol::make_layout(std::uint64_t generation,
                             const std::vector<std::uint32_t> &units) const {
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::string> current;
    for (const auto &m : layout_.members) current[{m.unit, m.slot}] = m.id;
    Layout l;
    l.generation = generation;
    l.units = units;
    l.world = static_cast<std::uint32_t>(units.size()) * cfg_.unit_size;
    l.members.reserve(l.world);
    for (std::size_t i = 0; i < units.size(); ++i) {
        for (std::uint32_t s = 0; s < cfg_.unit_size; ++s) {
            Member m;
            auto it = current.find({units[i], s});
            m.id = it != current.end() ? it->second : pending_slots_.at({units[i], s});
            m.unit = units[i];
            m.slot = s;
            m.rank = static_cast<std::uint32_t>(i) * cfg_.unit_size + s;
            l.members.push_back(std::move(m));
        }
    }
    return l;
}

void Protocol::generation_began(std::int64_t now_ms) {
    generation_since_ms_ = now_ms;
    ready_.clear();
    change_pause_ms_.reset();
    // Every member was heard just now (its join or its boundary), and the silence of a rank
    // that left counts no longer.
    last_seen_.clear();
    by_silence_.clear();
    rank_by_id_.clear();
    for (const auto &m : layout_.members) {
        last_seen_[m.id] = now_ms;
        by_silence_.emplace(now_ms, m.id);
        rank_by_id_.emplace(m.id, m.rank);
    }
}

void Protocol::seen(std::string_view id, std::int64_t now_ms) {
    auto it = last_seen_.find(id);
    if (it == last_seen_.end() || now_ms <= it->second) return;
    // Lost members are out of by_silence_ for good; only the others move. The node moves
    // with its id (extract, re-key, insert): no allocation at every request.
    if (auto node = by_silence_.extract({it->second, it->first})) {
        node.value().first = now_ms;
        by_silence_.insert(std::move(node));
    }
    it->second = now_ms;
}

Status Protocol::refuse_fenced(const char *op, std::string_view id) const {
    auto it = fenced_.find(id);
    if (it == fenced_.end()) return Status::success();
    return make_error(std::string(op) + ": '" + std::string(id) + "' was declared lost in generation " +
                      u(it->second) + " and is fenced out");
}

void Protocol::mark_lost(std::string_view id) {
    lost_.emplace(id);
    arrived_.erase(std::string(id));
    fenced_.emplace(std::string(id), layout_.generation);
    if (auto it = last_seen_.find(id); it != last_seen_.end()) by_silence_.erase({it->second, it->first});
}

bool Protocol::declare_silent_lost(std::int64_t now_ms) {
    bool any = false;
    while (!by_silence_.empty() && now_ms - by_silence_.begin()->first >= cfg_.liveness_timeout_ms) {
        const std::string id = by_silence_.begin()->second;
        mark_lost(id);  // takes it out of by_silence_
        any = true;
    }
    return any;
}

Result<HeartbeatAck> Protocol::heartbeat(std::string_view id, std::uint64_t generation, std::int64_t now_ms) {
    (void)generation;  // the rank's own view; what it abandons is named in the ack
    HeartbeatAck ack;
    ack.timeout_ms = cfg_.liveness_timeout_ms;
    // About 8 heartbeats a timeout, so that one late one never costs a rank its place.
    ack.interval_ms = cfg_.liveness_timeout_ms > 0 ? std::clamp<std::int64_t>(cfg_.liveness_timeout_ms / 8, 50, 1000)
                                                   : 5000;
    if (auto it = fenced_.find(id); it != fenced_.end()) {
        ack.fenced = true;
        ack.fenced_generation = it->second;
        return ack;
    }
    if (const Member *me = member(id); me && phase_ != Phase::Forming) {
        seen(id, now_ms);
        if (phase_ == Phase::Running && !lost_.empty()) {
            ack.abandon_generation = layout_.generation;
            for (const auto &lost_id : lost_)
                if (const Member *m = member(lost_id); m && m->unit == me->unit) ack.unit_lost = true;
        }
        return ack;
    }
    if (pending_.count(id)) return ack;
    // A rank that left in the last planned change may heartbeat before it has acted on its
    // LEFT (its first heartbeat can come after a quick change): it is out, not lost.
    if (left_.count(id)) return ack;
    return make_error("heartbeat: '" + std::string(id) + "' is neither a member nor a joiner of the job");
}

void Protocol::prune_left(std::int64_t now_ms) {
    const std::int64_t keep =
        std::max({kLeftKeepMs, 4 * cfg_.liveness_timeout_ms, 4 * cfg_.boundary_timeout_ms});
    for (auto it = left_.begin(); it != left_.end();)
        it = now_ms - it->second > keep ? left_.erase(it) : std::next(it);
}

std::vector<Delivery> Protocol::form(const std::vector<std::uint32_t> &units,
                                     std::string reason, std::int64_t now_ms) {
    auto d = std::make_shared<Decision>();
    d->kind = DecisionKind::Reshaped;
    d->generation = 0;
    d->step = 0;
    d->reason = std::move(reason);
    d->next = make_layout(1, units);
    std::vector<Delivery> out;
    for (const auto &m : d->next.members) {
        d->joining.push_back(m.id);
        remove_pending(m.id);
    }
    std::sort(d->joining.begin(), d->joining.end());
    d->joining_units = d->next.units;
    std::sort(d->joining_units.begin(), d->joining_units.end());
    layout_ = d->next;
    generation_began(now_ms);
    phase_ = Phase::Running;
    last_ = last_change_ = d;
    ++changes_[d->reason];
    last_members_.clear();
    last_step_ = 0;
    for (const auto &m : layout_.members) out.push_back({m.id, d});
    return out;
}

Result<std::vector<Delivery>> Protocol::join(std::string_view id, std::uint32_t unit,
                                             std::uint32_t slot, std::int64_t now_ms,
                                             std::string_view node) {
    if (auto st = check_member_id(id); !st) return Error{st.error()};
    if (!node.empty())
        if (auto st = check_node_name(node); !st) return make_error("join: " + st.error());
    if (slot >= cfg_.unit_size)
        return make_error("join: slot " + u(slot) + " is outside 0.." + u(cfg_.unit_size - 1) +
                          " (unit size " + u(cfg_.unit_size) + ")");
    if (phase_ == Phase::Stopped) return make_error("join: the job is stopping");
    if (auto st = refuse_fenced("join", id); !st) return Error{st.error()};
    if (const Member *m = member(id)) {
        // A member repeating its join (the formation reply was lost) gets that reply again.
        if (m->unit == unit && m->slot == slot && last_ &&
            last_->kind == DecisionKind::Reshaped && last_->next.generation == layout_.generation)
            return std::vector<Delivery>{{std::string(id), last_}};
        return make_error("join: '" + std::string(id) + "' is already rank " + u(m->rank) +
                          " of generation " + u(layout_.generation));
    }
    if (auto it = pending_.find(id); it != pending_.end()) {
        if (it->second.unit == unit && it->second.slot == slot) return std::vector<Delivery>{};
        return make_error("join: '" + std::string(id) + "' already joined as unit " +
                          u(it->second.unit) + " slot " + u(it->second.slot));
    }
    if (std::find(layout_.units.begin(), layout_.units.end(), unit) != layout_.units.end())
        return make_error("join: unit " + u(unit) + " is already in generation " +
                          u(layout_.generation));
    if (auto it = pending_slots_.find({unit, slot}); it != pending_slots_.end())
        return make_error("join: unit " + u(unit) + " slot " + u(slot) + " is taken by '" +
                          it->second + "'");
    // Bound the waiting room: at most every unit of the elastic range, once.
    if (pending_.size() >= std::size_t(cfg_.max_units) * cfg_.unit_size)
        return make_error("join: too many ranks waiting to join (" + u(pending_.size()) + ")");
    add_pending(id, unit, slot);
    if (!node.empty()) nodes_[std::string(id)] = std::string(node);
    if (phase_ == Phase::Forming) {
        if (forming_since_ms_ < 0) forming_since_ms_ = now_ms;
        if (pending_complete_ >= cfg_.initial_units) {
            auto complete = complete_pending_units();
            complete.resize(cfg_.initial_units);
            return form(complete, "formed", now_ms);
        }
    }
    return std::vector<Delivery>{};
}

bool Protocol::feasible(std::size_t units) const {
    if (!batch_ || batch_->global_batch == 0) return true;
    std::uint64_t per_step = 0;  // samples per micro-step of the whole world
    if (batch_->mp == 0 || cfg_.unit_size % batch_->mp != 0) return false;
    const std::uint64_t dp = std::uint64_t(units) * (cfg_.unit_size / batch_->mp);
    if (__builtin_mul_overflow(batch_->micro_batch, dp, &per_step))
        return false;  // more than any global batch
    return per_step != 0 && batch_->global_batch % per_step == 0;
}

Result<std::vector<Delivery>> Protocol::boundary(std::string_view id, std::uint64_t generation,
                                                 std::uint64_t step, std::int64_t now_ms,
                                                 BatchGeometry batch) {
    // Before the repeat below: a lost member must not get the decision that dropped it.
    if (auto st = refuse_fenced("boundary", id); !st) return Error{st.error()};
    // A repeated request for the boundary that was decided last gets the same decision.
    if (last_ && last_->generation == generation && generation > 0 && last_->step == step &&
        last_members_.count(id))
        return std::vector<Delivery>{{std::string(id), last_}};
    if (phase_ == Phase::Forming) return make_error("boundary: generation 1 has not formed yet");
    if (phase_ == Phase::Stopped) return make_error("boundary: the job has stopped");
    if (generation != layout_.generation)
        return make_error("boundary: generation " + u(generation) +
                          " is not the current generation " + u(layout_.generation));
    if (!member(id))
        return make_error("boundary: '" + std::string(id) + "' is not a member of generation " +
                          u(layout_.generation));
    if ((batch.global_batch == 0) != (batch.micro_batch == 0) ||
        (batch.global_batch != 0 && batch.global_batch % batch.micro_batch != 0))
        return make_error("boundary: global batch " + u(batch.global_batch) + " and micro-batch " +
                          u(batch.micro_batch) + ": expected both 0 (no ledger) or B a multiple of b");
    if (batch.mp == 0 || cfg_.unit_size % batch.mp != 0)
        return make_error("boundary: model-parallel size " + u(batch.mp) + " does not divide the unit size " +
                          u(cfg_.unit_size));
    if (batch_ && !(*batch_ == batch))
        return make_error(batch.mp == batch_->mp
                              ? "boundary: '" + std::string(id) + "' has global batch " +
                                    u(batch.global_batch) + " / micro-batch " + u(batch.micro_batch) +
                                    ", the other ranks " + u(batch_->global_batch) + " / " +
                                    u(batch_->micro_batch)
                              : "boundary: '" + std::string(id) + "' has model-parallel size " +
                                    u(batch.mp) + ", the other ranks " + u(batch_->mp));
    if (!boundary_step_) {
        boundary_step_ = step;
        boundary_since_ms_ = now_ms;
    } else if (*boundary_step_ != step && lost_.empty()) {
        // After a loss survivors may stand at different steps; they rewind anyway.
        return make_error("boundary: step " + u(step) + " differs from step " +
                          u(*boundary_step_) + " reported by other ranks of generation " +
                          u(layout_.generation));
    }
    if (!batch_) batch_ = batch;
    seen(id, now_ms);
    arrived_.emplace(id);
    if (arrived_.size() + lost_.size() == layout_.members.size()) return decide(now_ms);
    return std::vector<Delivery>{};
}

Result<std::vector<Delivery>> Protocol::lost(std::string_view id, std::int64_t now_ms) {
    if (pending_.count(id)) {
        remove_pending(id);
        return std::vector<Delivery>{};
    }
    if (phase_ != Phase::Running || !member(id))
        return make_error("lost: '" + std::string(id) + "' is not a member of the current generation");
    mark_lost(id);
    if (arrived_.size() + lost_.size() == layout_.members.size()) return decide(now_ms);
    return std::vector<Delivery>{};
}

std::vector<Delivery> Protocol::tick(std::int64_t now_ms) {
    if (phase_ == Phase::Forming && forming_since_ms_ >= 0 &&
        now_ms - forming_since_ms_ >= cfg_.formation_timeout_ms) {
        auto complete = complete_pending_units();
        if (complete.size() >= cfg_.min_units) {
            if (complete.size() > cfg_.initial_units) complete.resize(cfg_.initial_units);
            return form(complete, "formed-at-timeout", now_ms);
        }
        auto d = std::make_shared<Decision>();
        d->kind = DecisionKind::Stop;
        d->reason = "formation-timeout";
        std::vector<Delivery> out;
        for (const auto &[pid, p] : pending_) out.push_back({pid, d});
        clear_pending();
        phase_ = Phase::Stopped;
        last_ = last_change_ = d;
        return out;
    }
    // A silent member is lost now, not at a boundary that its peers, waiting for it in a
    // collective, would never reach. Survivors at the boundary already get the decision;
    // the others come when their heartbeats tell them (HeartbeatAck::abandon_generation).
    if (phase_ == Phase::Running && cfg_.liveness_timeout_ms > 0 && declare_silent_lost(now_ms) &&
        arrived_.size() + lost_.size() == layout_.members.size())
        return decide(now_ms);
    if (phase_ == Phase::Running && boundary_step_ &&
        now_ms - boundary_since_ms_ >= cfg_.boundary_timeout_ms) {
        for (const auto &m : layout_.members)
            if (!arrived_.count(m.id) && !lost_.count(m.id)) mark_lost(m.id);
        return decide(now_ms);
    }
    return {};
}

std::optional<std::int64_t> Protocol::next_deadline() const {
    if (phase_ == Phase::Forming && forming_since_ms_ >= 0)
        return forming_since_ms_ + cfg_.formation_timeout_ms;
    std::optional<std::int64_t> t;
    if (phase_ == Phase::Running && boundary_step_) t = boundary_since_ms_ + cfg_.boundary_timeout_ms;
    if (phase_ == Phase::Running && cfg_.liveness_timeout_ms > 0 && !by_silence_.empty()) {
        const std::int64_t at = by_silence_.begin()->first + cfg_.liveness_timeout_ms;
        t = std::min(t.value_or(at), at);
    }
    return t;
}

std::vector<Delivery> Protocol::decide(std::int64_t now_ms) {
    auto d = std::make_shared<Decision>();
    d->generation = layout_.generation;
    d->step = boundary_step_.value_or(last_step_);
    d->lost.assign(lost_.begin(), lost_.end());
    d->rewind = !lost_.empty();

    // Whole units go when any of their ranks is lost.
    std::set<std::uint32_t> dropped;
    for (const auto &m : layout_.members)
        if (lost_.count(m.id)) dropped.insert(m.unit);
    std::vector<std::uint32_t> units;
    for (auto unit : layout_.units)
        if (!dropped.count(unit)) units.push_back(unit);

    // A planned change asked for before the ranks' batch geometry was known may not fit it.
    if (target_units_ && !feasible(*target_units_)) target_units_.reset();
    // After a loss the last survivors leave as well while the world would not divide the
    // global batch (the trainer could not run it); below MIN that ends in STOP.
    if (!dropped.empty())
        while (!units.empty() && !feasible(units.size())) units.pop_back();

    bool changed = !dropped.empty();
    std::vector<std::uint32_t> joining_units;
    if (stop_reason_) {
        d->kind = DecisionKind::Stop;
        d->reason = *stop_reason_;
    } else if (units.size() < cfg_.min_units) {
        d->kind = DecisionKind::Stop;
        d->reason = "below-min";
    } else {
        if (target_units_ && *target_units_ < units.size()) {
            // A planned shrink removes the units it names, then (none named, or some of them
            // lost meanwhile) the last units.
            std::size_t excess = units.size() - *target_units_;
            std::vector<std::uint32_t> kept;
            for (auto unit : units) {
                if (excess > 0 && std::binary_search(target_leave_.begin(), target_leave_.end(), unit)) {
                    --excess;
                    continue;
                }
                kept.push_back(unit);
            }
            units = std::move(kept);
            if (units.size() > *target_units_) units.resize(*target_units_);
            changed = true;
        } else if (target_units_ && *target_units_ > units.size()) {
            auto complete = complete_pending_units();
            std::size_t need = *target_units_ - units.size();
            bool waited = now_ms - target_since_ms_ >= cfg_.grow_wait_ms;
            // All the units asked for, or after the wait as many as are complete and keep
            // the world one the global batch divides.
            std::size_t take = std::min(need, complete.size());
            while (take > 0 && !feasible(units.size() + take)) --take;
            if ((complete.size() >= need || waited) && take > 0) {
                complete.resize(take);
                joining_units = complete;
                units.insert(units.end(), complete.begin(), complete.end());
                changed = true;
            }
        }
        d->kind = changed ? DecisionKind::Reshaped : DecisionKind::Continue;
        d->reason = !dropped.empty() ? "lost" : changed ? "planned" : "none";
        if (changed && dropped.empty() && cfg_.announce_planned && announced_ != units) {
            // Announce now, apply at the next boundary if it still holds (protocol.h).
            d->kind = DecisionKind::Continue;
            d->reason = "announced";
            d->next = make_layout(layout_.generation + 1, units);
            std::set<std::uint32_t> next_units(units.begin(), units.end());
            for (auto unit : layout_.units)
                if (!next_units.count(unit)) d->leaving_units.push_back(unit);
            d->joining_units = joining_units;
            std::sort(d->joining_units.begin(), d->joining_units.end());
            announced_ = units;
            changed = false;
            joining_units.clear();
        }
    }
    if (d->kind != DecisionKind::Continue || d->next.world == 0) announced_.clear();

    std::vector<Delivery> out;
    std::set<std::string, std::less<>> previous;
    for (const auto &m : layout_.members) previous.insert(m.id);
    if (d->kind == DecisionKind::Reshaped) {
        d->next = make_layout(layout_.generation + 1, units);
        std::set<std::string_view> next_ids;
        for (const auto &m : d->next.members) next_ids.insert(m.id);
        for (const auto &m : layout_.members)
            if (!next_ids.count(m.id)) d->leaving.push_back(m.id);
        for (const auto &m : d->next.members)
            if (!previous.count(m.id)) d->joining.push_back(m.id);
        std::sort(d->leaving.begin(), d->leaving.end());
        std::sort(d->joining.begin(), d->joining.end());
        std::set<std::uint32_t> next_units(units.begin(), units.end());
        for (auto unit : layout_.units)
            if (!next_units.count(unit)) d->leaving_units.push_back(unit);
        d->joining_units = joining_units;
        std::sort(d->leaving_units.begin(), d->leaving_units.end());
        std::sort(d->joining_units.begin(), d->joining_units.end());
    }
    // Every member that can still hear gets the decision; lost members cannot.
    for (const auto &m : layout_.members)
        if (!lost_.count(m.id)) out.push_back({m.id, d});
    if (d->kind == DecisionKind::Reshaped) {
        for (const auto &id : d->joining) {
            out.push_back({id, d});
            remove_pending(id);
        }
        for (const auto &id : d->leaving) nodes_.erase(id);
        ResizeRecord r;
        r.kind = d->rewind ? kResizeLost : target_units_ && *target_units_ == units.size() ? target_cause_
                                                                                           : kCausePlanned;
        r.generation = d->next.generation;
        r.step = d->step;
        r.old_units = static_cast<std::uint32_t>(layout_.units.size());
        r.new_units = static_cast<std::uint32_t>(d->next.units.size());
        r.old_world = layout_.world;
        r.new_world = d->next.world;
        last_resize_ = std::move(r);
        for (const auto &m : layout_.members)
            if (!d->next.find(m.id) && !lost_.count(m.id) && !fenced_.count(m.id)) left_[m.id] = now_ms;
        prune_left(now_ms);
        layout_ = d->next;
        generation_began(now_ms);
        if (target_units_ && *target_units_ == units.size()) {
            target_units_.reset();
            target_leave_.clear();
        }
    } else if (d->kind == DecisionKind::Continue && !d->joining_units.empty()) {
        // An announced grow: its joiners learn the rank they are to have now (an early
        // admission, protocol.h) and stay pending until the change applies.
        for (const auto &[pid, p] : pending_)
            if (std::binary_search(d->joining_units.begin(), d->joining_units.end(), p.unit) &&
                d->next.find(pid))
                out.push_back({pid, d});
    } else if (d->kind == DecisionKind::Stop) {
        // Joiners still waiting must not wait for a job that ends.
        for (const auto &[pid, p] : pending_) out.push_back({pid, d});
        clear_pending();
        phase_ = Phase::Stopped;
    }
    last_ = d;
    if (d->kind != DecisionKind::Continue) last_change_ = d;
    if (d->kind == DecisionKind::Reshaped) ++changes_[d->reason];
    last_members_ = std::move(previous);
    last_step_ = d->step;
    // A rewind goes back to a checkpoint's step: the rate starts over from there.
    if (d->rewind || (!decided_.empty() && d->step <= decided_.back().first)) decided_.clear();
    decided_.emplace_back(d->step, now_ms);
    if (decided_.size() > kRateWindow) decided_.pop_front();
    boundary_step_.reset();
    arrived_.clear();
    lost_.clear();
    return out;
}

Status Protocol::request_reshape(std::uint32_t units, std::int64_t now_ms,
                                 const std::vector<std::uint32_t> &leave, std::string_view via,
                                 std::string_view cause) {
    if (phase_ == Phase::Stopped) return make_error("reshape: the job is stopping");
    if (via.empty()) via = kViaAllocation;
    if (cause.empty()) cause = kCausePlanned;
    if (auto st = check_grow_via(via); !st) return make_error("reshape: " + st.error());
    if (auto st = check_resize_cause(cause); !st) return make_error("reshape: " + st.error());
    if (phase_ == Phase::Forming) return make_error("reshape: generation 1 has not formed yet");
    if (units < cfg_.min_units || units > cfg_.max_units)
        return make_error("reshape: " + u(units) + " units is outside the elastic range " +
                          u(cfg_.min_units) + ".." + u(cfg_.max_units));
    if (!feasible(units)) {
        std::string ok;
        for (std::uint32_t n = cfg_.min_units; n <= cfg_.max_units; ++n)
            if (feasible(n)) ok += (ok.empty() ? "" : ", ") + u(n);
        return make_error("reshape: " + u(units) + " units are " +
                          u(std::uint64_t(units) * cfg_.unit_size / batch_->mp) +
                          " data-parallel ranks, and the global batch " + u(batch_->global_batch) +
                          " is not a whole number of micro-batches of " + u(batch_->micro_batch) +
                          " per rank (GA = B / (b x DP)); unit counts that work: " +
                          (ok.empty() ? "none" : ok));
    }
    if (via != kViaAllocation && units <= layout_.units.size())
        return make_error("reshape: 'via " + std::string(via) + "' applies to a grow; " +
                          u(layout_.units.size()) + " -> " + u(units) + " units is not one");
    std::vector<std::uint32_t> named(leave);
    std::sort(named.begin(), named.end());
    if (!named.empty()) {
        if (units >= layout_.units.size() || named.size() != layout_.units.size() - units)
            return make_error("reshape: naming " + u(named.size()) + " leaving unit(s) needs a shrink by as many; " +
                              u(layout_.units.size()) + " -> " + u(units) + " units is not one");
        if (std::adjacent_find(named.begin(), named.end()) != named.end())
            return make_error("reshape: a leaving unit is named twice");
        for (auto unit : named)
            if (std::find(layout_.units.begin(), layout_.units.end(), unit) == layout_.units.end())
                return make_error("reshape: unit " + u(unit) + " is not in generation " +
                                  u(layout_.generation));
    }
    if (units == layout_.units.size()) {
        target_units_.reset();  // cancels a planned change that has not happened yet
        target_leave_.clear();
    } else if (target_units_ != units || target_leave_ != named || target_via_ != via) {
        target_units_ = units;
        target_leave_ = std::move(named);
        target_via_ = std::string(via);
        target_since_ms_ = now_ms;
    }
    target_cause_ = std::string(cause);  // the last one to ask names the change
    return Status::success();
}

Result<std::vector<Delivery>> Protocol::request_stop(std::string_view reason) {
    if (phase_ == Phase::Stopped) return std::vector<Delivery>{};
    if (reason.empty() || reason.size() > 64) return make_error("stop: reason must be 1..64 characters");
    stop_reason_ = std::string(reason);
    if (phase_ == Phase::Running) return std::vector<Delivery>{};
    auto d = std::make_shared<Decision>();
    d->kind = DecisionKind::Stop;
    d->reason = *stop_reason_;
    std::vector<Delivery> out;
    for (const auto &[pid, p] : pending_) out.push_back({pid, d});
    clear_pending();
    phase_ = Phase::Stopped;
    last_ = last_change_ = d;
    return out;
}

Status Protocol::ready(std::string_view id, std::uint64_t generation, std::int64_t now_ms) {
    if (auto st = refuse_fenced("ready", id); !st) return st;
    seen(id, now_ms);
    if (generation != layout_.generation || phase_ != Phase::Running) return Status::success();
    if (!member(id))
        return make_error("ready: '" + std::string(id) + "' is not a member of generation " +
                          u(layout_.generation));
    ready_.emplace(id);
    if (!change_pause_ms_ && ready_.size() == layout_.members.size())
        change_pause_ms_ = now_ms - generation_since_ms_;
    return Status::success();
}

ProtocolStatus Protocol::status() const {
    ProtocolStatus s;
    s.phase = phase_;
    s.generation = layout_.generation;
    s.units = static_cast<std::uint32_t>(layout_.units.size());
    s.world = layout_.world;
    s.unit_size = cfg_.unit_size;
    s.min_units = cfg_.min_units;
    s.max_units = cfg_.max_units;
    s.target_units = target_units_;
    s.target_leave = target_leave_;
    s.target_via = target_via_;
    s.boundary_step = boundary_step_;
    s.arrived = static_cast<std::uint32_t>(arrived_.size());
    s.last_step = last_step_;
    for (const auto &[pid, p] : pending_) s.pending_joiners.push_back(pid);
    s.lost.assign(lost_.begin(), lost_.end());
    if (last_) s.last_decision = *last_;
    if (last_change_) s.last_change = *last_change_;
    s.change_pause_ms = change_pause_ms_;
    s.layout = layout_;
    for (const auto &m : layout_.members)
        if (auto it = nodes_.find(m.id); it != nodes_.end()) s.nodes.emplace(m.id, it->second);
    for (const auto &[pid, p] : pending_)
        if (auto it = nodes_.find(pid); it != nodes_.end()) s.nodes.emplace(pid, it->second);
    if (batch_ && batch_->global_batch > 0) {
        s.global_batch = batch_->global_batch;
        s.micro_batch = batch_->micro_batch;
        s.mp = batch_->mp;
        if (decided_.size() >= 2 && decided_.back().second > decided_.front().second)
            s.samples_per_s = double(batch_->global_batch) *
                              double(decided_.back().first - decided_.front().first) * 1000.0 /
                              double(decided_.back().second - decided_.front().second);
    }
    s.changes = changes_;
    s.last_resize = last_resize_;
    return s;
}

}  // namespace omni::launcher
