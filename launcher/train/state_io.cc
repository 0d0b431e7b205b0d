// Reference trainer checkpoint I/O; see state_io.h.
#include "train/state_io.h"

#include "omni/ckpt_cpp.h"
#include "train/model.h"

namespace omni::train {

namespace ck = omni::ckpt;

namespace {

constexpr const char *kLrKind = "warmup_cosine";

ck::Meta meta_of(const TrainState &s, int world) {
    ck::Meta m;
    m.step = s.step;
    m.generation = s.generation;
    m.world_size = static_cast<std::uint64_t>(world);
    m.unit_layout = "omni-train-demo dp=" + std::to_string(world);
    m.lr.kind = kLrKind;
    m.lr.base_lr = s.lr.base;
    m.lr.warmup_steps = s.lr.warmup;
    m.lr.total_steps = s.lr.total;
    m.lr.last_step = s.step;
    m.ledger.epoch = s.data_epoch;
    m.ledger.seed = s.data_seed;
    return m;
}

}  // namespace

Status save_shard(const std::string &root, const TrainState &s, int rank, int world) {
    (void)world;  // the shard range in s.adam already says which part this rank holds
    ck::WriterOptions o;
    o.attempt = "g" + std::to_string(s.generation);
    auto w = ck::ShardWriter::open(root, s.step, static_cast<std::uint32_t>(rank), o);
    if (!w) return Error{w.error()};
    const ck::Shape p{kParams};
    const Range r = s.adam.range;
    if (rank == 0) {
        if (auto st = w.value()->add_tensor("model/params", ck::DType::fp32, p, {0}, p, s.params.data(),
                                            ck::Change::changed); !st)
            return st;
        const ck::Shape n{s.ledger_json.size()};
        if (auto st = w.value()->add_tensor("trainer/ledger", ck::DType::uint8, n, {0}, n,
                                            s.ledger_json.data(), ck::Change::changed); !st)
            return st;
    }
    if (r.size() > 0) {
        for (auto [name, v] : {std::pair{"optim/adam_m", &s.adam.m}, std::pair{"optim/adam_v", &s.adam.v}})
            if (auto st = w.value()->add_tensor(name, ck::DType::fp32, p, {r.begin}, {r.size()}, v->data(),
                                                ck::Change::changed); !st)
                return st;
    }
    ck::RankState rs;
    rs.rank = static_cast<std::uint32_t>(rank);
    if (auto st = w.value()->add_rank_state(rs); !st) return st;
    return w.value()->finish();
}

Result<std::string> commit_state(const std::string &root, const TrainState &s, int world) {
    ck::CommitOptions o;
    o.attempt = "g" + std::to_string(s.generation);
    return ck::commit(root, static_cast<std::uint32_t>(world), meta_of(s, world), o);
}

Result<bool> load_latest(const std::string &root, int rank, int world, TrainState &s) {
    auto entries = ck::list(root);
    if (!entries) return false;  // no root yet: nothing to resume
    bool any = false;
    for (const auto &e : entries.value()) any = any || e.complete;
    if (!any) return false;
    auto rd = ck::Reader::open_latest(root);
    if (!rd) return Error{rd.error()};
    ck::Reader &r = *rd.value();
    const ck::Meta &m = r.manifest().meta;
    if (m.lr.kind != kLrKind)
        return make_error(r.path() + ": LR scheduler '" + m.lr.kind + "', expected " + kLrKind);
    s.step = m.step;
    s.generation = m.generation;
    s.data_epoch = m.ledger.epoch;
    s.data_seed = m.ledger.seed;
    s.lr.base = m.lr.base_lr;
    s.lr.warmup = m.lr.warmup_steps;
    s.lr.total = m.lr.total_steps;
    s.params.assign(kParams, 0.0f);
    if (auto st = r.read_all("model/params", s.params.data(), kParams * sizeof(float)); !st)
        return Error{st.error()};
    s.adam = AdamShard(shard_range(kParams, rank, world));
    const Range rg = s.adam.range;
    if (rg.size() > 0) {
        for (auto [name, v] : {std::pair{"optim/adam_m", &s.adam.m}, std::pair{"optim/adam_v", &s.adam.v}})
            if (auto st = r.read(name, {rg.begin}, {rg.size()}, v->data(), rg.size() * sizeof(float)); !st)
                return Error{st.error()};
    }
    const ck::TensorInfo *led = r.find("trainer/ledger");
    if (!led || led->shape.size() != 1 || led->shape[0] > (1u << 20))
        return make_error(r.path() + ": no trainer/ledger tensor of at most 1 MiB");
    s.ledger_json.assign(led->shape[0], '\0');
    if (auto st = r.read_all("trainer/ledger", s.ledger_json.data(), s.ledger_json.size()); !st)
        return Error{st.error()};
    return true;
}

}  // namespace omni::train
