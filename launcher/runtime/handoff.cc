// State hand-off building blocks; see runtime/handoff.h.
#include "runtime/handoff.h"

#include <algorithm>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace omni::launcher {

ShardRange zero1_range(std::size_t length, std::uint32_t rank, std::uint32_t world) {
    const std::size_t base = length / world, extra = length % world;
    ShardRange r;
    r.begin = rank * base + std::min<std::size_t>(rank, extra);
    r.end = r.begin + base + (rank < extra ? 1 : 0);
    return r;
}

namespace {

ShardRange intersect(const ShardRange &a, const ShardRange &b) {
    ShardRange r;
    r.begin = std::max(a.begin, b.begin);
    r.end = std::min(a.end, b.end);
    if (r.end < r.begin) r.end = r.begin;
    return r;
}

std::string show(const ShardRange &r) {
    return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace

Result<PeerPlan> plan_repartition(const Repartition &plan, std::uint32_t me) {
    const std::size_t n = plan.have.size();
    if (plan.want.size() != n || me >= n)
        return make_error("hand-off plan: " + std::to_string(plan.have.size()) + " held and " +
                          std::to_string(plan.want.size()) + " wanted ranges for rank " +
                          std::to_string(me));
    for (std::size_t r = 0; r < n; ++r) {
        if (plan.have[r].end < plan.have[r].begin || plan.want[r].end < plan.want[r].begin)
            return make_error("hand-off plan: rank " + std::to_string(r) + " has a reversed range");
        for (std::size_t q = r + 1; q < n; ++q)
            if (intersect(plan.have[r], plan.have[q]).size())
                return make_error("hand-off plan: ranks " + std::to_string(r) + " and " +
                                  std::to_string(q) + " both hold elements " +
                                  show(intersect(plan.have[r], plan.have[q])));
    }
    // Disjoint holders: a wanted range is covered when its overlaps add up to its size.
    for (std::size_t r = 0; r < n; ++r) {
        std::size_t covered = 0;
        for (const ShardRange &h : plan.have) covered += intersect(h, plan.want[r]).size();
        if (covered != plan.want[r].size())
            return make_error("hand-off plan: rank " + std::to_string(r) + " needs " +
                              show(plan.want[r]) + ", but only " + std::to_string(covered) +
                              " of those elements are held by any rank");
    }
    PeerPlan out;
    for (std::size_t r = 0; r < n; ++r) {
        if (r == me) continue;
        if (auto s = intersect(plan.have[me], plan.want[r]); s.size())
            out.sends.push_back({static_cast<int>(r), s});
        if (auto v = intersect(plan.have[r], plan.want[me]); v.size())
            out.recvs.push_back({static_cast<int>(r), v});
    }
    out.local = intersect(plan.have[me], plan.want[me]);
    return out;
}

Status repartition(Communicator &comm, const std::vector<RepartitionJob> &jobs) {
    const auto me = static_cast<std::uint32_t>(comm.rank());
    if (jobs.size() > kMaxLanes)
        return make_error("hand-off: " + std::to_string(jobs.size()) + " vectors in one exchange, at most " +
                          std::to_string(kMaxLanes));
    std::vector<PeerSend> sends;
    std::vector<PeerRecv> recvs;
    for (std::size_t lane = 0; lane < jobs.size(); ++lane) {
        const Repartition &plan = *jobs[lane].plan;
        if (plan.have.size() != static_cast<std::size_t>(comm.size()))
            return make_error("hand-off plan: " + std::to_string(plan.have.size()) +
                              " ranges for a communicator of " + std::to_string(comm.size()));
        auto p = plan_repartition(plan, me);
        if (!p) return Error{p.error()};
        const ShardRange &have = plan.have[me], &want = plan.want[me];
        const float *src = jobs[lane].src;
        float *dst = jobs[lane].dst;
        const auto l = static_cast<std::uint8_t>(lane);
        for (const auto &m : p.value().sends)
            sends.push_back({m.peer, src + (m.range.begin - have.begin), m.range.size() * sizeof(float), l});
        for (const auto &m : p.value().recvs)
            recvs.push_back({m.peer, dst + (m.range.begin - want.begin), m.range.size() * sizeof(float), l});
        const ShardRange &local = p.value().local;
        float *to = dst + (local.begin - want.begin);
        const float *from = src + (local.begin - have.begin);
        if (local.size() && to != from)  // equal: the caller receives in place (see header)
            std::memcpy(to, from, local.size() * sizeof(float));
    }
    if (auto st = comm.exchange(sends, recvs); !st) return make_error("hand-off: " + st.error());
    return Status::success();
}

void assign_zeroed(std::vector<float> &v, std::size_t n) {
#ifdef MADV_POPULATE_WRITE
    if (n * sizeof(float) >= (std::size_t(1) << 20) && v.capacity() < n) {
        std::vector<float>().swap(v);
        v.reserve(n);
        const long page = sysconf(_SC_PAGESIZE);
        if (page > 0) {
            const auto p = static_cast<std::uintptr_t>(page);
            const auto begin = (reinterpret_cast<std::uintptr_t>(v.data()) + p - 1) & ~(p - 1);
            const auto end = (reinterpret_cast<std::uintptr_t>(v.data() + n)) & ~(p - 1);
            // Only a hint: on failure (an older kernel: EINVAL) the pages fault in as written.
            if (end > begin) (void)madvise(reinterpret_cast<void *>(begin), end - begin, MADV_POPULATE_WRITE);
        }
    }
#endif
    v.assign(n, 0.0f);
}

std::optional<std::size_t> in_place_offset(const Repartition &plan, std::uint32_t me) {
    if (me >= plan.have.size() || me >= plan.want.size()) return std::nullopt;
    const ShardRange &h = plan.have[me], &w = plan.want[me];
    if (w.size() == 0 || w.begin < h.begin || w.end > h.end) return std::nullopt;
    return w.begin - h.begin;
}

Status repartition(Communicator &comm, const Repartition &plan, const float *src, float *dst) {
    return repartition(comm, std::vector<RepartitionJob>{{&plan, src, dst}});
}

Status broadcast_bytes(Communicator &comm, std::string &bytes, int root, std::size_t max_bytes) {
    // Broadcast copies bits: a uint64 travels as two fp32 "elements" unchanged.
    std::uint64_t n = comm.rank() == root ? bytes.size() : 0;
    float len_words[2];
    std::memcpy(len_words, &n, sizeof n);
    if (auto st = comm.broadcast(len_words, 2, DType::fp32, root); !st)
        return make_error("hand-off: broadcasting a length: " + st.error());
    std::memcpy(&n, len_words, sizeof n);
    if (n > max_bytes)
        return make_error("hand-off: rank " + std::to_string(root) + " sent " +
                          std::to_string(n) + " bytes, more than the " +
                          std::to_string(max_bytes) + " allowed");
    const std::size_t words = (n + 3) / 4;
    std::vector<float> buf(words, 0.0f);
    if (comm.rank() == root && n) std::memcpy(buf.data(), bytes.data(), n);
    if (words) {
        if (auto st = comm.broadcast(buf.data(), words, DType::fp32, root); !st)
            return make_error("hand-off: broadcasting " + std::to_string(n) + " bytes: " +
                              st.error());
    }
    if (comm.rank() != root) bytes.assign(reinterpret_cast<const char *>(buf.data()), n);
    return Status::success();
}

std::string encode_header(const HandoffHeader &h) {
    nlohmann::json j = {{"step", h.step},
                        {"generation", h.generation},
                        {"params", h.params},
                        {"shards", h.shard_lengths},
                        {"ledger", h.has_ledger ? nlohmann::json(h.ledger) : nlohmann::json()}};
    return j.dump();
}

Result<HandoffHeader> decode_header(const std::string &text) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) return make_error("hand-off: malformed header");
    HandoffHeader h;
    auto u64 = [&](const char *k, std::uint64_t &out) -> bool {
        auto it = j.find(k);
        if (it == j.end() || !it->is_number_unsigned()) return false;
        out = it->get<std::uint64_t>();
        return true;
    };
    if (!u64("step", h.step) || !u64("generation", h.generation) || !u64("params", h.params))
        return make_error("hand-off: header lacks step, generation or params");
    auto sh = j.find("shards");
    if (sh == j.end() || !sh->is_array() || sh->size() > kMaxShardVectors)
        return make_error("hand-off: header's shards are missing or too many");
    for (const auto &v : *sh) {
        if (!v.is_number_unsigned()) return make_error("hand-off: a shard length is not a number");
        h.shard_lengths.push_back(v.get<std::uint64_t>());
    }
    auto l = j.find("ledger");
    if (l == j.end() || !(l->is_null() || l->is_string()))
        return make_error("hand-off: header's ledger is malformed");
    h.has_ledger = l->is_string();
    if (h.has_ledger) h.ledger = l->get<std::string>();
    return h;
}

std::uint64_t fingerprint(const float *data, std::size_t count) {
    std::uint64_t h = 1469598103934665603ULL;
    const auto *p = reinterpret_cast<const unsigned char *>(data);
    for (std::size_t i = 0; i < count * sizeof(float); ++i) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

}  // namespace omni::launcher
