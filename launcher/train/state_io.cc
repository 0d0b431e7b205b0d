// Reference trainer checkpoint I/O; see state_io.h.
#include "train/state_io.h"

#include <algorithm>

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
    m.unit_layout = "omni-train-demo ranks=" + std::to_string(world);
    m.lr.kind = kLrKind;
    m.lr.base_lr = s.lr.base;
    m.lr.warmup_steps = s.lr.warmup;
    m.lr.total_steps = s.lr.total;
    m.lr.last_step = s.step;
    m.ledger.epoch = s.data_epoch;
    m.ledger.seed = s.data_seed;
    return m;
}

// A part of the slice's flat vector in one logical tensor: elements [begin, begin + length)
// of tensor `tensor`, at `local` of the flat range it was cut from.
struct Piece {
    std::size_t tensor, begin, length, local;
};

// The pieces of the slice's flat range [from, to), cut at the tensors' borders; `local` is
// counted from `from`. Replicated segments only for MP rank 0 when `owned_only`.
std::vector<Piece> pieces_of(const Slice &sl, std::size_t from, std::size_t to, bool owned_only) {
    std::vector<Piece> out;
    for (const Segment &g : slice_segments(sl)) {
        if (owned_only && g.replicated && sl.mp_rank != 0) continue;
        const std::size_t a = std::max(from, g.local), b = std::min(to, g.local + g.length);
        if (a < b) out.push_back({g.tensor, g.begin + (a - g.local), b - a, a - from});
    }
    return out;
}

std::string tensor_name(const char *group, std::size_t tensor) {
    return std::string(group) + model_tensors()[tensor].name;
}

// The tensor must exist with the model's length: a checkpoint of another model (or of an
// older omni-train-demo, which stored model/params) is refused by name.
Status check_tensor(ck::Reader &r, const std::string &name, std::size_t length) {
    const ck::TensorInfo *t = r.find(name);
    if (!t) return make_error(r.path() + ": no tensor " + name + " (not a checkpoint of this omni-train-demo's model)");
    if (t->shape.size() != 1 || t->shape[0] != length || t->dtype != ck::DType::fp32)
        return make_error(r.path() + ": tensor " + name + " is not fp32 [" + std::to_string(length) +
                          "]: the checkpoint holds another model, which no layout of this one can load");
    return Status::success();
}

}  // namespace

Status save_shard(const std::string &root, const TrainState &s, const StateRank &at) {
    ck::WriterOptions o;
    o.attempt = "g" + std::to_string(s.generation);
    auto w = ck::ShardWriter::open(root, s.step, static_cast<std::uint32_t>(at.writer), o);
    if (!w) return Error{w.error()};
    const Slice &sl = at.slice;
    if (at.dp_rank == 0) {  // the slice's parameters, replicated over its DP group
        for (const Piece &p : pieces_of(sl, 0, sl.params(), true)) {
            const ck::Shape shape{model_tensors()[p.tensor].length};
            if (auto st = w.value()->add_tensor(tensor_name("model/", p.tensor), ck::DType::fp32, shape, {p.begin},
                                                {p.length}, s.params.data() + p.local, ck::Change::changed); !st)
                return st;
        }
        if (sl.mp_rank == 0) {
            const ck::Shape n{s.ledger_json.size()};
            if (auto st = w.value()->add_tensor("trainer/ledger", ck::DType::uint8, n, {0}, n,
                                                s.ledger_json.data(), ck::Change::changed); !st)
                return st;
        }
    }
    const Range r = s.adam.range;
    for (const Piece &p : pieces_of(sl, r.begin, r.end, true)) {
        const ck::Shape shape{model_tensors()[p.tensor].length};
        for (auto [group, v] : {std::pair{"optim/adam_m/", &s.adam.m}, std::pair{"optim/adam_v/", &s.adam.v}})
            if (auto st = w.value()->add_tensor(tensor_name(group, p.tensor), ck::DType::fp32, shape, {p.begin},
                                                {p.length}, v->data() + p.local, ck::Change::changed); !st)
                return st;
    }
    ck::RankState rs;
    rs.rank = static_cast<std::uint32_t>(at.writer);
    if (auto st = w.value()->add_rank_state(rs); !st) return st;
    return w.value()->finish();
}

static std::string attempt_of(const TrainState &s) { return "g" + std::to_string(s.generation); }

Status abandon_state(const std::string &root, const TrainState &s) { return ck::abandon(root, s.step, attempt_of(s)); }

Result<std::string> commit_state(const std::string &root, const TrainState &s, int world) {
    ck::CommitOptions o;
    o.attempt = attempt_of(s);
    return ck::commit(root, static_cast<std::uint32_t>(world), meta_of(s, world), o);
}

Result<bool> load_latest(const std::string &root, const StateRank &at, TrainState &s) {
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
    const Slice &sl = at.slice;
    for (const TensorSpec &t : model_tensors())
        for (const char *group : {"model/", "optim/adam_m/", "optim/adam_v/"})
            if (auto st = check_tensor(r, std::string(group) + t.name, t.length); !st) return Error{st.error()};
    s.params.assign(sl.params(), 0.0f);
    for (const Piece &p : pieces_of(sl, 0, sl.params(), false))
        if (auto st = r.read(tensor_name("model/", p.tensor), {p.begin}, {p.length}, s.params.data() + p.local,
                             p.length * sizeof(float)); !st)
            return Error{st.error()};
    s.adam = AdamShard(shard_range(sl.params(), at.dp_rank, at.dp_size));
    const Range rg = s.adam.range;
    for (const Piece &p : pieces_of(sl, rg.begin, rg.end, false))
        for (auto [group, v] : {std::pair{"optim/adam_m/", &s.adam.m}, std::pair{"optim/adam_v/", &s.adam.v}})
            if (auto st = r.read(tensor_name(group, p.tensor), {p.begin}, {p.length}, v->data() + p.local,
                                 p.length * sizeof(float)); !st)
                return Error{st.error()};
    const ck::TensorInfo *led = r.find("trainer/ledger");
    if (!led || led->shape.size() != 1 || led->shape[0] > (1u << 20))
        return make_error(r.path() + ": no trainer/ledger tensor of at most 1 MiB");
    s.ledger_json.assign(led->shape[0], '\0');
    if (auto st = r.read_all("trainer/ledger", s.ledger_json.data(), s.ledger_json.size()); !st)
        return Error{st.error()};
    return true;
}

}  // namespace omni::train
