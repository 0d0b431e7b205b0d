// The sample ledger; see ledger.h for the model.
#include "runtime/ledger.h"

#include <limits>

#include <nlohmann/json.hpp>

namespace omni::launcher {
namespace {

// splitmix64's finaliser: a well-mixed 64-bit function, used both to derive the round keys
// from (seed, epoch) and as the Feistel round function.
std::uint64_t mix64(std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

unsigned bit_width(std::uint64_t v) {
    unsigned w = 0;
    while (v) { ++w; v >>= 1; }
    return w;
}

constexpr int kFormatVersion = 1;
constexpr const char *kPermutationName = "feistel6-splitmix64";

}  // namespace

Permutation::Permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) : n_(n) {
    // A balanced Feistel network needs an even number of bits; round up so that the domain
    // 2^(2h) is at most 4n and cycle-walking takes fewer than 4 rounds trips on average.
    unsigned bits = bit_width(n > 1 ? n - 1 : 1);
    half_bits_ = (bits + 1) / 2;
    half_mask_ = (std::uint64_t(1) << half_bits_) - 1;
    std::uint64_t k = mix64(seed ^ mix64(epoch + 0x632be59bd9b4e019ULL));
    for (auto &key : keys_) key = k = mix64(k);
}

std::uint64_t Permutation::round(unsigned r, std::uint64_t half) const {
    return mix64(keys_[r] ^ half) & half_mask_;
}

std::uint64_t Permutation::operator()(std::uint64_t i) const {
    // Cycle-walking: apply the bijection of [0, 2^(2h)) until the value lands in [0, n).
    // Because the network is a bijection, this restricted walk is a bijection of [0, n).
    std::uint64_t x = i;
    do {
        std::uint64_t left = x >> half_bits_, right = x & half_mask_;
        for (unsigned r = 0; r < 6; ++r) {
            std::uint64_t next = left ^ round(r, right);
            left = right;
            right = next;
        }
        x = (left << half_bits_) | right;
    } while (x >= n_);
    return x;
}

Result<std::uint32_t> derive_grad_accum(std::uint64_t global_batch, std::uint64_t micro_batch,
                                        std::uint32_t dp_size) {
    if (global_batch == 0 || micro_batch == 0 || dp_size == 0)
        return make_error("gradient accumulation: global batch, micro-batch and DP size must "
                          "be positive (B=" + std::to_string(global_batch) + ", b=" +
                          std::to_string(micro_batch) + ", DP=" + std::to_string(dp_size) + ")");
    if (global_batch > kMaxGlobalBatch || micro_batch > kMaxGlobalBatch || dp_size > kMaxDpSize)
        return make_error("gradient accumulation: B=" + std::to_string(global_batch) + ", b=" +
                          std::to_string(micro_batch) + " or DP=" + std::to_string(dp_size) +
                          " exceeds the supported range");
    std::uint64_t per_micro = micro_batch * dp_size;  // < 2^60, no overflow
    if (global_batch % per_micro != 0)
        return make_error("gradient accumulation: global batch " + std::to_string(global_batch) +
                          " is not a multiple of micro-batch " + std::to_string(micro_batch) +
                          " x DP size " + std::to_string(dp_size) + " = " +
                          std::to_string(per_micro));
    std::uint64_t ga = global_batch / per_micro;
    if (ga > std::numeric_limits<std::uint32_t>::max())
        return make_error("gradient accumulation: GA " + std::to_string(ga) + " is too large");
    return static_cast<std::uint32_t>(ga);
}

Result<Ledger> Ledger::create(const LedgerConfig &cfg, std::uint32_t dp_size) {
    if (cfg.dataset_size == 0 || cfg.dataset_size > kMaxDatasetSize)
        return make_error("ledger: dataset size " + std::to_string(cfg.dataset_size) +
                          " must be in 1.." + std::to_string(kMaxDatasetSize));
    auto ga = derive_grad_accum(cfg.global_batch, cfg.micro_batch, dp_size);
    if (!ga) return Error{ga.error()};
    return Ledger(cfg, dp_size, ga.value(), 0);
}

std::uint64_t Ledger::epoch() const { return step_ * cfg_.global_batch / cfg_.dataset_size; }

std::uint64_t Ledger::consumed_in_epoch() const {
    return step_ * cfg_.global_batch % cfg_.dataset_size;
}

std::uint64_t Ledger::sample_at(std::uint64_t position) const {
    // Constructing a Permutation is a handful of multiplications; no cache needed here.
    Permutation p(cfg_.dataset_size, cfg_.seed, position / cfg_.dataset_size);
    return p(position % cfg_.dataset_size);
}

Result<std::vector<std::uint64_t>> Ledger::share(std::uint32_t rank) const {
    std::vector<std::uint64_t> out;
    out.reserve(cfg_.global_batch / dp_size_);
    for (std::uint32_t m = 0; m < ga_; ++m) {
        auto mb = micro_batch(rank, m);
        if (!mb) return mb;
        out.insert(out.end(), mb.value().begin(), mb.value().end());
    }
    return out;
}

Result<std::vector<std::uint64_t>> Ledger::micro_batch(std::uint32_t rank,
                                                       std::uint32_t micro) const {
    if (rank >= dp_size_)
        return make_error("ledger: DP rank " + std::to_string(rank) + " is outside 0.." +
                          std::to_string(dp_size_ - 1));
    if (micro >= ga_)
        return make_error("ledger: micro-step " + std::to_string(micro) + " is outside 0.." +
                          std::to_string(ga_ - 1) + " (GA)");
    const std::uint64_t b = cfg_.micro_batch;
    const std::uint64_t start = step_ * cfg_.global_batch +
                                std::uint64_t(rank) * (cfg_.global_batch / dp_size_) +
                                std::uint64_t(micro) * b;
    std::vector<std::uint64_t> out;
    out.reserve(b);
    // One Permutation per epoch touched (a micro-batch crosses at most a few epochs).
    std::uint64_t cur_epoch = start / cfg_.dataset_size;
    Permutation perm(cfg_.dataset_size, cfg_.seed, cur_epoch);
    for (std::uint64_t pos = start; pos < start + b; ++pos) {
        if (pos / cfg_.dataset_size != cur_epoch) {
            cur_epoch = pos / cfg_.dataset_size;
            perm = Permutation(cfg_.dataset_size, cfg_.seed, cur_epoch);
        }
        out.push_back(perm(pos % cfg_.dataset_size));
    }
    return out;
}

std::vector<std::uint64_t> Ledger::step_samples() const {
    std::vector<std::uint64_t> out;
    out.reserve(cfg_.global_batch);
    const std::uint64_t start = step_ * cfg_.global_batch;
    std::uint64_t cur_epoch = start / cfg_.dataset_size;
    Permutation perm(cfg_.dataset_size, cfg_.seed, cur_epoch);
    for (std::uint64_t pos = start; pos < start + cfg_.global_batch; ++pos) {
        if (pos / cfg_.dataset_size != cur_epoch) {
            cur_epoch = pos / cfg_.dataset_size;
            perm = Permutation(cfg_.dataset_size, cfg_.seed, cur_epoch);
        }
        out.push_back(perm(pos % cfg_.dataset_size));
    }
    return out;
}

Status Ledger::commit_step() {
    // Positions are step * B; keep them below 2^63 (B <= 2^40, so steps <= 2^22 * ... is
    // bounded by kMaxSteps / B).
    if (step_ + 1 > kMaxSteps / cfg_.global_batch)
        return make_error("ledger: step counter would overflow at step " + std::to_string(step_));
    ++step_;
    return Status::success();
}

Status Ledger::resize(std::uint32_t dp_size) {
    auto ga = derive_grad_accum(cfg_.global_batch, cfg_.micro_batch, dp_size);
    if (!ga) return Error{ga.error()};
    dp_size_ = dp_size;
    ga_ = ga.value();
    return Status::success();
}

Status Ledger::resume_as(const LedgerConfig &cfg, std::uint32_t dp_size) {
    const struct {
        const char *what;
        std::uint64_t saved, run;
    } order[] = {{"dataset size", cfg_.dataset_size, cfg.dataset_size},
                 {"global batch", cfg_.global_batch, cfg.global_batch},
                 {"seed", cfg_.seed, cfg.seed}};
    for (const auto &f : order)
        if (f.saved != f.run)
            return make_error("ledger: the checkpoint's " + std::string(f.what) + " is " +
                              std::to_string(f.saved) + ", this run's " + std::to_string(f.run) +
                              ": a resumed run keeps the data order it started with (dataset "
                              "size, global batch and seed); start from an empty checkpoint "
                              "directory to change them");
    auto ga = derive_grad_accum(cfg_.global_batch, cfg.micro_batch, dp_size);
    if (!ga) return Error{ga.error()};
    cfg_.micro_batch = cfg.micro_batch;
    dp_size_ = dp_size;
    ga_ = ga.value();
    return Status::success();
}

std::string Ledger::serialise() const {
    nlohmann::json j = {{"format", "omni-ledger"},
                        {"version", kFormatVersion},
                        {"permutation", kPermutationName},
                        {"dataset_size", cfg_.dataset_size},
                        {"global_batch", cfg_.global_batch},
                        {"micro_batch", cfg_.micro_batch},
                        {"seed", cfg_.seed},
                        {"dp_size", dp_size_},
                        {"step", step_},
                        // Derived, for humans reading a checkpoint; load() checks them.
                        {"epoch", epoch()},
                        {"consumed_in_epoch", consumed_in_epoch()}};
    return j.dump();
}

Result<Ledger> Ledger::load(std::string_view text) {
    if (text.size() > 4096) return make_error("ledger state: longer than 4096 bytes");
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return make_error("ledger state: not a JSON object");
    auto get_u64 = [&](const char *key) -> Result<std::uint64_t> {
        auto it = j.find(key);
        if (it == j.end() || !it->is_number_unsigned())
            return make_error(std::string("ledger state: '") + key +
                              "' missing or not an unsigned integer");
        return it->get<std::uint64_t>();
    };
    auto fmt = j.find("format");
    if (fmt == j.end() || *fmt != "omni-ledger")
        return make_error("ledger state: 'format' is not \"omni-ledger\"");
    auto ver = get_u64("version");
    if (!ver) return Error{ver.error()};
    if (ver.value() != kFormatVersion)
        return make_error("ledger state: version " + std::to_string(ver.value()) +
                          " is not supported (expected " + std::to_string(kFormatVersion) + ")");
    auto perm = j.find("permutation");
    if (perm == j.end() || *perm != kPermutationName)
        return make_error(std::string("ledger state: 'permutation' is not \"") +
                          kPermutationName + "\"; this build cannot reproduce its sample order");
    LedgerConfig cfg;
    std::uint64_t dp = 0, step = 0, epoch = 0, consumed = 0;
    for (auto [key, dst] : {std::pair{"dataset_size", &cfg.dataset_size},
                            std::pair{"global_batch", &cfg.global_batch},
                            std::pair{"micro_batch", &cfg.micro_batch},
                            std::pair{"seed", &cfg.seed}, std::pair{"dp_size", &dp},
                            std::pair{"step", &step}, std::pair{"epoch", &epoch},
                            std::pair{"consumed_in_epoch", &consumed}}) {
        auto v = get_u64(key);
        if (!v) return Error{v.error()};
        *dst = v.value();
    }
    if (dp == 0 || dp > kMaxDpSize)
        return make_error("ledger state: 'dp_size' " + std::to_string(dp) + " out of range");
    auto led = create(cfg, static_cast<std::uint32_t>(dp));
    if (!led) return Error{"ledger state: " + led.error()};
    if (step > kMaxSteps / cfg.global_batch)
        return make_error("ledger state: 'step' " + std::to_string(step) + " out of range");
    led.value().step_ = step;
    if (led.value().epoch() != epoch || led.value().consumed_in_epoch() != consumed)
        return make_error("ledger state: 'epoch'/'consumed_in_epoch' disagree with 'step'");
    return led;
}

}  // namespace omni::launcher
