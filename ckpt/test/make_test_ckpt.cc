// Test helper: writes a checkpoint of deterministic content with W writers (one process
// playing every rank, then the commit), for the h5py, CLI and crash tests.
//
//   make_test_ckpt ROOT STEP WRITERS [--base CKPT] [--rows N] [--seed S] [--attempt A] [--async | --cow]
//                  [--only-rank R | --commit-only]
//
// --async writes through an AsyncShardWriter taking copies, --cow through one taking
// copy-on-write snapshots (and rewriting the buffers while the persist runs).
// --only-rank R writes just rank R's shard and exits (several processes can then play the
// ranks of one job concurrently); --commit-only writes nothing and commits.
//
// Tensors (values from test_util.h, seed = --seed, by default the step, unless noted; an
// incremental checkpoint with --seed of its base's step changes nothing, so every rank
// writes a reference shard):
//   model/embed       fp32  [37,5]
//   model/layers.0/w  bf16  [10,3]
//   model/frozen      fp32  [N,256]  seed 7 at every step (N = --rows, default 64): reused
//                                    by incremental checkpoints
//   optim/step        int64 [1]
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "common/parse.h"
#include "omni/ckpt_cpp.h"
#include "test_util.h"

using namespace omni::ckpt;

int main(int argc, char **argv) {
    if (argc < 4 || std::strcmp(argv[1], "--help") == 0) {
        std::fprintf(stderr, "usage: make_test_ckpt ROOT STEP WRITERS [--base CKPT] [--rows N] [--seed S] "
                             "[--attempt A] [--async | --cow] [--only-rank R | --commit-only]\n");
        return argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    const std::string root = argv[1];
    auto step = omni::parse_uint(argv[2], 0, UINT64_MAX, "STEP");
    auto writers = omni::parse_uint(argv[3], 1, 64, "WRITERS");
    if (!step || !writers) {
        std::fprintf(stderr, "make_test_ckpt: %s\n", (!step ? step.error() : writers.error()).c_str());
        return 2;
    }
    WriterOptions wo;
    std::uint64_t rows = 64;
    std::uint64_t seed = step.value();
    bool async = false, cow = false, commit_only = false;
    long only_rank = -1;
    for (int i = 4; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--base" && i + 1 < argc) wo.base = argv[++i];
        else if (a == "--attempt" && i + 1 < argc) wo.attempt = argv[++i];
        else if (a == "--async") async = true;
        else if (a == "--cow") async = cow = true;
        else if (a == "--commit-only") commit_only = true;
        else if (a == "--only-rank" && i + 1 < argc) {
            auto r = omni::parse_uint(argv[++i], 0, 63, "--only-rank");
            if (!r) return std::fprintf(stderr, "make_test_ckpt: %s\n", r.error().c_str()), 2;
            only_rank = static_cast<long>(r.value());
        }
        else if (a == "--seed" && i + 1 < argc) {
            auto r = omni::parse_uint(argv[++i], 0, UINT64_MAX, "--seed");
            if (!r) return std::fprintf(stderr, "make_test_ckpt: %s\n", r.error().c_str()), 2;
            seed = r.value();
        }
        else if (a == "--rows" && i + 1 < argc) {
            auto r = omni::parse_uint(argv[++i], 1, 1u << 24, "--rows");
            if (!r) return std::fprintf(stderr, "make_test_ckpt: %s\n", r.error().c_str()), 2;
            rows = r.value();
        } else {
            std::fprintf(stderr, "make_test_ckpt: unknown argument '%s'\n", a.c_str());
            return 2;
        }
    }
    struct T {
        const char *name;
        DType dtype;
        Shape shape;
        std::uint64_t seed;
    };
    const std::uint64_t s = step.value();
    const T tensors[] = {{"model/embed", DType::fp32, {37, 5}, seed},
                         {"model/layers.0/w", DType::bf16, {10, 3}, seed},
                         {"model/frozen", DType::fp32, {rows, 256}, 7},
                         {"optim/step", DType::int64, {1}, seed}};
    const auto W = static_cast<std::uint32_t>(writers.value());
    AsyncShardWriter aw(cow ? Snapshot::copy_on_write : Snapshot::copy);
    std::deque<std::vector<char>> kept;   // the slices' buffers, alive until the persist is done
    for (std::uint32_t w = 0; w < W && !commit_only; ++w) {
        if (only_rank >= 0 && w != static_cast<std::uint32_t>(only_rank)) continue;
        std::unique_ptr<ShardWriter> sw;
        if (async) {
            if (auto st = aw.begin(root, s, w, wo); !st)
                return std::fprintf(stderr, "make_test_ckpt: %s\n", st.error().c_str()), 1;
        } else {
            auto o = ShardWriter::open(root, s, w, wo);
            if (!o) return std::fprintf(stderr, "make_test_ckpt: %s\n", o.error().c_str()), 1;
            sw = std::move(o.value());
        }
        for (const auto &t : tensors) {
            const auto all = test::logical(t.dtype, t.shape, t.seed);
            const auto part = test::uneven_split(t.shape[0], W)[w];
            if (part.second == 0) continue;
            Shape off(t.shape.size(), 0), cnt = t.shape;
            off[0] = part.first;
            cnt[0] = part.second;
            auto &data = kept.emplace_back(test::rows_of(all, t.shape, t.dtype, part.first, part.second));
            auto st = async ? aw.add_tensor(t.name, t.dtype, t.shape, off, cnt, data.data())
                            : sw->add_tensor(t.name, t.dtype, t.shape, off, cnt, data.data());
            if (!st) return std::fprintf(stderr, "make_test_ckpt: %s\n", st.error().c_str()), 1;
        }
        RankState rs;
        rs.rank = w;
        rs.rng.assign(16, static_cast<std::uint8_t>(w + s));
        for (std::int64_t k = 0; k < 5; ++k) rs.consumed.push_back(static_cast<std::int64_t>(w) + k * W);
        auto st = async ? aw.add_rank_state(rs) : sw->add_rank_state(rs);
        if (st) st = async ? aw.submit() : sw->finish();
        // A copy-on-write snapshot must not see what the trainer writes after it.
        if (st && cow)
            for (auto &d : kept) std::fill(d.begin(), d.end(), char(0x5a));
        if (st && async) st = aw.wait();
        kept.clear();
        if (!st) return std::fprintf(stderr, "make_test_ckpt: %s\n", st.error().c_str()), 1;
    }
    if (only_rank >= 0) return 0;
    Meta m;
    m.step = s;
    m.generation = 1;
    m.world_size = W;
    m.unit_layout = "1@node";
    m.lr = {"cosine", 3e-4, 10, 1000, s};
    m.ledger = {0, 1234};
    CommitOptions co;
    co.attempt = wo.attempt;
    auto c = commit(root, W, m, co);
    if (!c) return std::fprintf(stderr, "make_test_ckpt: %s\n", c.error().c_str()), 1;
    std::printf("%s\n", c.value().c_str());
    return 0;
}
