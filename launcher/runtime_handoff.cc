// State hand-off building blocks; see runtime_handoff.h.
#include "runtime_handoff.h"

#include <cstring>

#include <nlohmann/json.hpp>

namespace omni::launcher {

ShardRange zero1_range(std::size_t length, std::uint32_t rank, std::uint32_t world) {
    const std::size_t base = length / world, extra = length % world;
    ShardRange r;
    r.begin = rank * base + std::min<std::size_t>(rank, extra);
    r.end = r.begin + base + (rank < extra ? 1 : 0);
    return r;
}

Result<std::vector<float>> gather_full(Communicator &comm, const std::vector<float> &shard,
                                       std::size_t length) {
    const auto world = static_cast<std::uint32_t>(comm.size());
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const ShardRange mine = zero1_range(length, rank, world);
    if (shard.size() != mine.size())
        return make_error("hand-off: rank " + std::to_string(rank) + " holds " +
                          std::to_string(shard.size()) + " elements of a vector of " +
                          std::to_string(length) + ", its range has " +
                          std::to_string(mine.size()));
    // Allgather needs equal counts: pad every shard to the largest one (rank 0's).
    const std::size_t pad = zero1_range(length, 0, world).size();
    std::vector<float> send(pad, 0.0f), recv(pad * world);
    std::copy(shard.begin(), shard.end(), send.begin());
    if (pad > 0) {
        if (auto st = comm.allgather(send.data(), recv.data(), pad, DType::fp32); !st)
            return make_error("hand-off: gathering optimizer shards: " + st.error());
    }
    std::vector<float> full(length);
    for (std::uint32_t r = 0; r < world; ++r) {
        const ShardRange rr = zero1_range(length, r, world);
        std::copy_n(recv.begin() + static_cast<std::ptrdiff_t>(r * pad), rr.size(),
                    full.begin() + static_cast<std::ptrdiff_t>(rr.begin));
    }
    return full;
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
