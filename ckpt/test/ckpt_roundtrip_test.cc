// Round trips, layout, resharding, incremental chains and merge, asynchronous writers,
// rewrites and gc of libomni-ckpt.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "config.h"
#include "ckpt/blocks.h"
#include "ckpt/bounded_map.h"
#include "ckpt/box.h"
#include "ckpt/format.h"
#include "ckpt/fsio.h"
#include "ckpt/h5.h"
#include "ckpt/hash.h"
#include "ckpt/ref_shard.h"
#include "ckpt/writer_internal.h"
#include "omni/ckpt_cpp.h"

#include "test_util.h"
#include "unit_helpers.h"

// H5Ovisit2's callback takes the 1.10-layout object info (with addr): H5O_info_t up to 1.10,
// H5O_info1_t from 1.12 on, where H5O_info_t became the token-based H5O_info2_t.
#if H5_VERSION_GE(1, 12, 0)
using H5VisitInfo = H5O_info1_t;
#else
using H5VisitInfo = H5O_info_t;
#endif

using namespace omni::ckpt;
namespace t = omni::ckpt::test;
using t::TempDir;

using namespace t;


TEST(Box, CopyRegionMergesWholeTrailingDimensions) {
    // A 4x6 source at rows 2..5 of a 10x6 tensor, copied into a request of rows 3..7.
    std::vector<int> src(4 * 6), dst(5 * 6, -1);
    for (int i = 0; i < 24; ++i) src[i] = i;
    Box sb{{2, 0}, {4, 6}}, db{{3, 0}, {5, 6}};
    auto in = intersect(sb, db);
    ASSERT_TRUE(in.has_value());
    EXPECT_EQ(in->offset, (Shape{3, 0}));
    EXPECT_EQ(in->count, (Shape{3, 6}));
    copy_region(*in, src.data(), sb, dst.data(), db, sizeof(int));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 6; ++c) EXPECT_EQ(dst[r * 6 + c], (r + 1) * 6 + c);
    EXPECT_EQ(dst[3 * 6], -1);
    EXPECT_TRUE(is_contiguous_in(Box{{1, 0}, {2, 6}}, Box{{0, 0}, {5, 6}}));
    EXPECT_FALSE(is_contiguous_in(Box{{1, 1}, {2, 5}}, Box{{0, 0}, {5, 6}}));
    EXPECT_TRUE(is_contiguous_in(Box{{1, 1}, {1, 5}}, Box{{0, 0}, {5, 6}}));
    EXPECT_FALSE(intersect(Box{{0}, {3}}, Box{{3}, {2}}).has_value());
}

TEST(Fsio, WritebackStartsOnlyOnWholePagesOfTheSlice) {
    using P = std::pair<std::uint64_t, std::uint64_t>;
    EXPECT_EQ(fsio::whole_pages(0, 8192, 4096), (P{0, 8192}));
    EXPECT_EQ(fsio::whole_pages(100, 10000, 4096), (P{4096, 8192}));   // 100..10100
    EXPECT_EQ(fsio::whole_pages(4096, 4095, 4096), (P{4096, 4096}));   // no whole page
    EXPECT_EQ(fsio::whole_pages(4095, 4098, 4096), (P{4096, 8192}));   // 4095..8193
    EXPECT_EQ(fsio::whole_pages(5000, 0, 4096), (P{8192, 8192}));
    EXPECT_EQ(fsio::whole_pages(65536, 1 << 20, 65536), (P{65536, 65536 + (1 << 20)}));
    // Advisory: on what it cannot start write-back for it does nothing, and the bytes written
    // are what is read back.
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    fsio::start_writeback(pipe_fds[1], 0, 1 << 20);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    TempDir d;
    const std::string path = d / "f";
    const std::string bytes(3 * 4096 + 17, 'x');
    ASSERT_TRUE(fsio::write_file(path, bytes));
    fsio::Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_GE(fd.get(), 0);
    fsio::start_writeback(fd.get(), 5, bytes.size() - 5);
    ASSERT_EQ(::fsync(fd.get()), 0);
    auto back = fsio::read_file(path, 1 << 20);
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back.value(), bytes);
}

TEST(RoundTrip, EveryDtypeAndStateBitwise) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 10, 3, kMixed);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const auto &s : kMixed) expect_logical(*r.value(), s);
    const Manifest &m = r.value()->manifest();
    EXPECT_EQ(m.meta.step, 10u);
    EXPECT_EQ(m.meta.generation, 3u);
    EXPECT_EQ(m.meta.unit_layout, "4@pcie");
    EXPECT_EQ(m.meta.lr.kind, "cosine");
    EXPECT_DOUBLE_EQ(m.meta.lr.base_lr, 1.5e-4);
    EXPECT_EQ(m.meta.ledger.seed, 42u);
    EXPECT_EQ(m.writers, 3u);
    EXPECT_EQ(r.value()->find("model/blk.0/w")->dtype, DType::bf16);
    auto rs = r.value()->rank_state(2);
    ASSERT_TRUE(rs.ok()) << rs.error();
    EXPECT_EQ(rs.value().rng, (std::vector<std::uint8_t>{2, 10, 0xab}));
    EXPECT_EQ(rs.value().consumed, (std::vector<std::int64_t>{2, 5}));
    EXPECT_FALSE(r.value()->rank_state(3).ok());
    // The latest symlink and open_latest agree.
    auto latest = Reader::open_latest(d / "root");
    ASSERT_TRUE(latest.ok()) << latest.error();
    EXPECT_EQ(fsio::basename(latest.value()->path()), "step-0000000010");
    EXPECT_TRUE(fsio::is_dir(d / "root/latest"));
}

TEST(RoundTrip, SlicesLargerThanAStreamBlock) {
    // 2.8 MiB slices (several blocks of rows) and rows of 2.4 MiB (one row per block).
    TempDir d;
    const std::vector<Spec> specs = {{"big", DType::fp32, {1400, 1024}, 3},
                                     {"wide", DType::fp32, {3, 1, 600000}, 4}};
    const std::string ck = write_ckpt(d / "root", 1, 2, specs);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const auto &s : specs) expect_logical(*r.value(), s);
    auto v = verify(ck);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v.value().ok());
    auto rs = reshard(ck, 3, d / "r3");
    ASSERT_TRUE(rs.ok()) << rs.error();
    auto r3 = Reader::open(rs.value());
    ASSERT_TRUE(r3.ok());
    for (const auto &s : specs) expect_logical(*r3.value(), s);
}

// Every source of a checkpoint records where its bytes are (data_offset), which is where
// HDF5 has the dataset: written in full, referenced from a base by an incremental, and
// rewritten by merge and reshard. A load with checksums reads them there without HDF5.
TEST(Layout, EverySourceRecordsWhereItsBytesAre) {
    TempDir d;
    const std::string base = write_ckpt(d / "root", 1, 3, kMixed);
    ASSERT_FALSE(base.empty());
    const std::string inc = write_ckpt(d / "root", 2, 3, kMixed, base);   // all unchanged
    ASSERT_FALSE(inc.empty());
    auto merged = merge(inc, d / "merged");
    ASSERT_TRUE(merged.ok()) << merged.error();
    auto resharded = reshard(base, 2, d / "r2");
    ASSERT_TRUE(resharded.ok()) << resharded.error();
    for (const std::string &ck : {base, inc, merged.value(), resharded.value()}) {
        SCOPED_TRACE(ck);
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        std::size_t n = 0, in_base = 0;
        for (const auto &t : r.value()->manifest().tensors)
            for (const auto &s : t.sources) {
                SCOPED_TRACE(t.name + " " + s.file);
                EXPECT_NE(s.data_offset, 0u);
                EXPECT_EQ(s.data_offset, dataset_offset(ck + "/" + s.file, s.dataset.c_str()));
                in_base += s.file.rfind("../", 0) == 0;
                ++n;
            }
        std::size_t want = 0;   // a writer gets no slice of a tensor with fewer rows than writers
        for (const auto &sp : kMixed) want += std::min<std::uint64_t>(sp.shape[0], ck == resharded.value() ? 2 : 3);
        EXPECT_EQ(n, want);
        EXPECT_EQ(in_base, ck == inc ? n : 0u);   // the incremental references every slice
    }
}

// A loader opening a shard's datasets reads their object headers; on a cold cache each
// separate place costs a device round trip (an RPC on a parallel file system). Every object
// header of a shard of 60 tensors, the rank state's and the manifest's included, must lie
// in one run before the first slice's data, not between the slices (HDF5's default puts
// them there every few slices).
TEST(Layout, ShardMetadataIsOneRunBeforeTheData) {
    TempDir d;
    std::vector<Spec> specs;
    for (std::uint64_t i = 0; i < 60; ++i)   // 32 KiB slices: above HDF5's small-data blocks
        specs.push_back({"model/layer" + std::to_string(i) + "/w", DType::fp32, {64, 128}, i});
    const std::string ck = write_ckpt(d / "root", 1, 1, specs);
    ASSERT_FALSE(ck.empty());
    hid_t f = H5Fopen((ck + "/shard-00000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    struct Seen {
        std::vector<haddr_t> headers, data;
    } seen;
    ASSERT_GE(H5Ovisit2(
                  f, H5_INDEX_NAME, H5_ITER_NATIVE,
                  [](hid_t loc, const char *name, const H5VisitInfo *info, void *op) -> herr_t {
                      auto &sn = *static_cast<Seen *>(op);
                      sn.headers.push_back(info->addr);
                      if (info->type == H5O_TYPE_DATASET) {
                          hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
                          if (ds < 0) return -1;
                          const haddr_t off = H5Dget_offset(ds);
                          H5Dclose(ds);
                          if (off != HADDR_UNDEF) sn.data.push_back(off);
                      }
                      return 0;
                  },
                  &seen, H5O_INFO_BASIC),
              0);
    H5Fclose(f);
    ASSERT_GE(seen.data.size(), specs.size());
    const haddr_t last_header = *std::max_element(seen.headers.begin(), seen.headers.end());
    const haddr_t first_data = *std::min_element(seen.data.begin(), seen.data.end());
    EXPECT_LT(last_header, first_data) << seen.headers.size() << " object headers, " << seen.data.size()
                                       << " datasets with data";
    EXPECT_LT(last_header, h5::kMetaBlockBytes);
}

TEST(Reshard, AnyNToAnyMIsBitwiseEqual) {
    const std::vector<std::uint32_t> sizes = {1, 2, 3, 4, 8};
    const std::vector<Spec> specs = {{"w", DType::fp32, {29, 3}, 11}, {"v", DType::bf16, {9, 2, 2}, 12},
                                     {"s", DType::int64, {5}, 13}};
    for (auto n : sizes) {
        TempDir d;
        const std::string ck = write_ckpt(d / "root", 1, n, specs);
        // Loading at M ranks: each rank reads its own slice of every tensor.
        for (auto m : sizes) {
            auto r = Reader::open(ck);
            ASSERT_TRUE(r.ok()) << r.error();
            for (const auto &s : specs) {
                const auto want = t::logical(s.dtype, s.shape, s.seed);
                std::vector<char> got;
                for (const auto &[r0, rows] : t::uneven_split(s.shape[0], m)) {
                    if (!rows) continue;
                    Shape off(s.shape.size(), 0), cnt = s.shape;
                    off[0] = r0;
                    cnt[0] = rows;
                    std::vector<char> part(element_count(cnt) * dtype_size(s.dtype));
                    auto st = r.value()->read(s.name, off, cnt, part.data(), part.size());
                    ASSERT_TRUE(st.ok()) << st.error();
                    got.insert(got.end(), part.begin(), part.end());
                }
                EXPECT_TRUE(got == want) << s.name << " N=" << n << " M=" << m;
            }
            // And rewriting for M writers.
            const std::string out = d / ("r" + std::to_string(m));
            auto rw = reshard(ck, m, out);
            ASSERT_TRUE(rw.ok()) << rw.error();
            auto rr = Reader::open(out);
            ASSERT_TRUE(rr.ok()) << rr.error();
            EXPECT_EQ(rr.value()->manifest().writers, m);
            for (const auto &s : specs) expect_logical(*rr.value(), s);
            EXPECT_EQ(rr.value()->rank_state(n - 1).value().consumed,
                      (std::vector<std::int64_t>{n - 1, 2 * n - 1}));
        }
    }
}

TEST(Reshard, SlicesAlongInnerDimensions) {
    // Two writers splitting columns; read back rows (crossing both sources) and a 2-D block.
    TempDir d;
    const Shape shape{6, 8};
    const auto all = t::logical(DType::fp32, shape, 3);
    for (std::uint32_t w = 0; w < 2; ++w) {
        auto sw = ShardWriter::open(d / "root", 5, w);
        ASSERT_TRUE(sw.ok());
        std::vector<float> part;
        for (int r = 0; r < 6; ++r)
            for (int c = 0; c < 4; ++c) {
                float f;
                std::memcpy(&f, all.data() + (r * 8 + w * 4 + c) * 4, 4);
                part.push_back(f);
            }
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, shape, {0, w * 4u}, {6, 4}, part.data()).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    }
    ASSERT_TRUE(commit(d / "root", 2, meta_for(5, 2)).ok());
    auto r = Reader::open(d / "root/step-0000000005");
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<float> block(3 * 5);
    ASSERT_TRUE(r.value()->read("x", {2, 1}, {3, 5}, block.data(), block.size() * 4).ok());
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j)
            EXPECT_EQ(0, std::memcmp(&block[i * 5 + j], all.data() + ((2 + i) * 8 + 1 + j) * 4, 4));
}

TEST(Incremental, ChainOfFiveMergeEqualsFullCheckpoint) {
    TempDir d;
    const std::string root = d / "root";
    std::vector<Spec> specs = kMixed;
    std::string prev = write_ckpt(root, 1, 4, specs);
    std::uint64_t full_bytes = 0;
    for (const auto &s : specs) full_bytes += element_count(s.shape) * dtype_size(s.dtype);
    for (std::uint64_t step = 2; step <= 5; ++step) {
        specs[step % specs.size()].seed += 100;   // one tensor changes per step
        std::uint64_t written = 0;
        prev = write_ckpt(root, step, 4, specs, prev, &written);
        const auto &changed = specs[step % specs.size()];
        EXPECT_EQ(written, element_count(changed.shape) * dtype_size(changed.dtype)) << "step " << step;
        EXPECT_LT(written, full_bytes) << "step " << step << ": an increment wrote a full checkpoint's bytes";
        auto r = Reader::open(prev);
        ASSERT_TRUE(r.ok()) << r.error();
        for (const auto &s : specs) expect_logical(*r.value(), s);
    }
    // References always point at the checkpoint holding the data, never through a chain.
    auto entries = list(root);
    ASSERT_TRUE(entries.ok());
    ASSERT_EQ(entries.value().size(), 5u);
    EXPECT_FALSE(entries.value().back().bases.empty());
    for (const auto &b : entries.value().back().bases) EXPECT_TRUE(fsio::is_dir(root + "/" + b)) << b;

    // merge(step 5) == a full checkpoint of the same state, tensor for tensor and slice for slice.
    auto merged = merge(prev, d / "merged");
    ASSERT_TRUE(merged.ok()) << merged.error();
    const std::string full = write_ckpt(d / "fullroot", 5, 4, specs);
    auto a = Reader::open(merged.value());
    auto b = Reader::open(full);
    ASSERT_TRUE(a.ok() && b.ok());
    const Manifest &ma = a.value()->manifest(), &mb = b.value()->manifest();
    EXPECT_EQ(manifest_to_json([&] { Manifest x = ma; x.created_unix = 0; return x; }()),
              manifest_to_json([&] { Manifest x = mb; x.created_unix = 0; return x; }()));
    for (const auto &s : specs) expect_logical(*a.value(), s);
    for (const auto &t2 : ma.tensors)
        for (const auto &s : t2.sources) EXPECT_EQ(s.file.find(".."), std::string::npos);
    ASSERT_TRUE(verify(merged.value()).value().ok());

    // gc keeps step 5 and the files it references in older checkpoints, nothing else.
    GcPolicy p;
    p.keep_last = 1;
    p.grace_seconds = 0;
    auto g = gc(root, p);
    ASSERT_TRUE(g.ok()) << g.error();
    EXPECT_EQ(g.value().kept, (std::vector<std::string>{"step-0000000005"}));
    EXPECT_FALSE(g.value().retained_for_references.empty());
    auto v = verify(root + "/step-0000000005");
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v.value().ok()) << v.value().issues[0].problem;
    auto r5 = Reader::open_latest(root);
    ASSERT_TRUE(r5.ok()) << r5.error();
    for (const auto &s : specs) expect_logical(*r5.value(), s);
    // Retired checkpoints read as incomplete and hold no index.
    auto after = list(root);
    ASSERT_TRUE(after.ok());
    for (const auto &e : after.value()) {
        if (e.name != "step-0000000005") {
            EXPECT_FALSE(e.complete) << e.name;
        }
    }
}

TEST(Incremental, BaseGivenAsLatestLinkIsReferencedByItsRealName) {
    TempDir d;
    const std::vector<Spec> specs = {{"w", DType::fp32, {8, 2}, 1}, {"v", DType::int64, {3}, 2}};
    write_ckpt(d / "root", 1, 2, specs);
    std::vector<Spec> next = specs;
    next[1].seed = 9;
    write_ckpt(d / "root", 2, 2, next, d / "root/latest");
    write_ckpt(d / "root", 3, 2, next, d / "root/latest");   // moves the link again
    for (const char *step : {"step-0000000002", "step-0000000003"}) {
        auto r = Reader::open(d / ("root/" + std::string(step)));
        ASSERT_TRUE(r.ok()) << r.error();
        for (const auto &t2 : r.value()->manifest().tensors)
            for (const auto &s : t2.sources) EXPECT_EQ(s.file.find("latest"), std::string::npos) << s.file;
        for (const auto &s : next) expect_logical(*r.value(), s);
    }
    EXPECT_FALSE(ShardWriter::open(d / "root", 4, 0, WriterOptions{"0", d / "root/nope", true}).ok());
    EXPECT_FALSE(ShardWriter::open(d / "other", 4, 0, WriterOptions{"0", d / "root/latest", true}).ok());
}

// A rank whose slices are all references writes a reference shard, not fsynced
// (omni-ckpt(5)): once committed, nothing may need it, so a crash that loses it loses nothing.
TEST(Incremental, ShardHoldingOnlyReferencesIsNotNeededAfterCommit) {
    TempDir d;
    const std::string root = d / "root";
    // "v" has one row, so writer 1 holds no slice of it; only "v" changes at step 2.
    std::vector<Spec> specs = {{"w", DType::fp32, {8, 2}, 1}, {"v", DType::int64, {1}, 2}};
    const std::string base = write_ckpt(root, 1, 2, specs);
    specs[1].seed = 9;
    std::uint64_t written = 0;
    const std::string inc = write_ckpt(root, 2, 2, specs, base, &written);
    ASSERT_EQ(written, 8u);
    // Writer 0 wrote "v" into an HDF5 shard; writer 1 wrote nothing, so it left a .ref only.
    EXPECT_TRUE(fsio::exists(inc + "/shard-00000.h5"));
    EXPECT_FALSE(fsio::exists(inc + "/shard-00000.ref"));
    EXPECT_FALSE(fsio::exists(inc + "/shard-00001.h5"));
    ASSERT_TRUE(fsio::exists(inc + "/shard-00001.ref"));
    ASSERT_TRUE(fsio::remove_file(inc + "/shard-00001.ref").ok());   // as a power loss might

    auto v = verify(inc);
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_TRUE(v.value().ok()) << v.value().issues[0].problem;
    auto r = Reader::open(inc);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const auto &s : specs) expect_logical(*r.value(), s);
    auto rs = r.value()->rank_state(1);   // read from the index
    ASSERT_TRUE(rs.ok()) << rs.error();
    EXPECT_EQ(rs.value().consumed, (std::vector<std::int64_t>{1, 3}));
    EXPECT_EQ(rs.value().rng, (std::vector<std::uint8_t>{1, 2, 0xab}));
    auto entries = list(root);
    ASSERT_TRUE(entries.ok());
    ASSERT_EQ(entries.value().size(), 2u);
    EXPECT_TRUE(entries.value()[1].complete) << entries.value()[1].problem;
    // The next incremental checkpoint takes it as its base, merge materialises it, and gc
    // keeps what it references.
    specs[0].seed = 5;
    const std::string next = write_ckpt(root, 3, 2, specs, inc);
    ASSERT_FALSE(next.empty());
    auto merged = merge(inc, d / "merged");
    ASSERT_TRUE(merged.ok()) << merged.error();
    GcPolicy p;
    p.keep_last = 2;
    p.grace_seconds = 0;
    ASSERT_TRUE(gc(root, p).ok());
    for (const std::string &c : {inc, next, merged.value()}) {
        auto vc = verify(c);
        ASSERT_TRUE(vc.ok()) << vc.error();
        EXPECT_TRUE(vc.value().ok()) << c << ": " << vc.value().issues[0].problem;
    }
}

TEST(Incremental, UnchangedHintSkipsHashingButNeverLies) {
    TempDir d;
    const std::vector<Spec> specs = {{"frozen", DType::fp32, {16, 4}, 1}};
    const std::string base = write_ckpt(d / "root", 1, 1, specs);
    WriterOptions wo;
    wo.base = base;
    auto sw = ShardWriter::open(d / "root", 2, 0, wo);
    ASSERT_TRUE(sw.ok());
    const auto data = t::logical(DType::fp32, {16, 4}, 1);
    ASSERT_TRUE(sw.value()->add_tensor("frozen", DType::fp32, {16, 4}, {0, 0}, {16, 4}, data.data(), Change::unchanged).ok());
    // A slice the base does not have is written even when hinted unchanged.
    ASSERT_TRUE(sw.value()->add_tensor("new", DType::fp32, {16, 4}, {0, 0}, {16, 4}, data.data(), Change::unchanged).ok());
    EXPECT_EQ(sw.value()->bytes_reused(), 256u);
    EXPECT_EQ(sw.value()->bytes_written(), 256u);
    ASSERT_TRUE(sw.value()->finish().ok());
    ASSERT_TRUE(commit(d / "root", 1, meta_for(2, 1)).ok());
}

// An incremental writer whose process wrote its rank's shard of the base takes the base's
// slices from that shard's manifest, without reading the base's index (BaseSlices). Shown by
// damaging the index after the commit: the writer that may use its own shard does not notice,
// and every writer that may not (the shard file replaced, another rank, a slice the own
// shard lacks) reads the index and fails on it. With the index intact, every path gives a
// checkpoint that reads back right.
TEST(Incremental, WriterUsesItsOwnShardOfTheBaseInsteadOfTheIndex) {
    for (bool damage : {true, false}) {
        TempDir d;
        const std::string root = d / "root";
        std::vector<Spec> specs = {{"w", DType::fp32, {8, 3}, 1}, {"v", DType::int64, {6}, 2}};
        const std::string base = write_ckpt(root, 1, 2, specs);
        ASSERT_FALSE(base.empty());
        // Writer 1's shard gets a new identity with the same bytes: no longer "as written".
        const std::string shard1 = base + "/shard-00001.h5";
        const std::string bytes = read_all_bytes(shard1);
        ASSERT_TRUE(fsio::remove_file(shard1).ok());
        ASSERT_TRUE(fsio::write_file(shard1, bytes).ok());
        if (damage) {
            std::string idx = read_all_bytes(base + "/index.h5");
            ASSERT_TRUE(fsio::write_file(base + "/index.h5", std::string(idx.size(), 'x')).ok());
        }
        WriterOptions wo;
        wo.base = base;
        auto add_all = [&](ShardWriter &w, std::uint32_t rank, std::uint32_t writers) {
            for (const auto &s : specs) {
                const auto all = t::logical(s.dtype, s.shape, s.seed);
                const auto part = t::uneven_split(s.shape[0], writers)[rank];
                Shape off(s.shape.size(), 0), cnt = s.shape;
                off[0] = part.first;
                cnt[0] = part.second;
                const auto data = t::rows_of(all, s.shape, s.dtype, part.first, part.second);
                auto st = w.add_tensor(s.name, s.dtype, s.shape, off, cnt, data.data());
                if (!st) return st;
            }
            return omni::Status::success();
        };
        // Rank 0, same layout, its own shard unchanged: no index needed.
        auto w0 = ShardWriter::open(root, 2, 0, wo);
        ASSERT_TRUE(w0.ok()) << w0.error();
        ASSERT_TRUE(add_all(*w0.value(), 0, 2).ok());
        EXPECT_EQ(w0.value()->bytes_written(), 0u);
        ASSERT_TRUE(w0.value()->finish().ok());
        // Rank 1, whose shard file was replaced: reads the index when it opens.
        auto w1 = ShardWriter::open(root, 2, 1, wo);
        EXPECT_EQ(w1.ok(), !damage) << (w1.ok() ? std::string() : w1.error());
        // Rank 0 of 3 writers: its slices differ from its own shard's, so the first lookup
        // that misses reads the index.
        auto w3 = ShardWriter::open(root, 3, 0, wo);
        ASSERT_TRUE(w3.ok()) << w3.error();
        const omni::Status st3 = add_all(*w3.value(), 0, 3);
        EXPECT_EQ(st3.ok(), !damage) << (st3.ok() ? std::string() : st3.error());
        if (damage) continue;
        ASSERT_TRUE(add_all(*w1.value(), 1, 2).ok());
        EXPECT_EQ(w1.value()->bytes_written(), 0u);
        ASSERT_TRUE(w1.value()->finish().ok());
        auto c = commit(root, 2, meta_for(2, 2));
        ASSERT_TRUE(c.ok()) << c.error();
        auto v = verify(c.value());
        ASSERT_TRUE(v.ok()) << v.error();
        EXPECT_TRUE(v.value().ok()) << v.value().issues[0].problem;
        auto r = Reader::open(c.value());
        ASSERT_TRUE(r.ok()) << r.error();
        for (const auto &s : specs) expect_logical(*r.value(), s);
        for (const auto &t2 : r.value()->manifest().tensors)
            for (const auto &src : t2.sources) EXPECT_EQ(src.file.rfind("../step-0000000001/", 0), 0u) << src.file;
    }
}

// Loading at another data-parallel size reads about the checkpoint's bytes once, not every
// slice a rank touches whole: 4 slices of 2 MiB read by 3 ranks.
TEST(Reshard, LoadAtAnotherSizeReadsTheBytesOnce) {
    TempDir d;
    const Spec s{"w", DType::fp32, {4096, 512}, 8};   // 8 MiB, 2 MiB slices of 64 KiB blocks
    const std::string ck = write_ckpt(d / "root", 1, 4, {s});
    const auto all = t::logical(s.dtype, s.shape, s.seed);
    std::uint64_t total = 0;
    for (std::uint64_t k = 0; k < 3; ++k) {
        const std::uint64_t r0 = 4096 * k / 3, r1 = 4096 * (k + 1) / 3;
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        std::vector<char> got((r1 - r0) * 512 * 4);
        auto st = r.value()->read("w", {r0, 0}, {r1 - r0, 512}, got.data(), got.size());
        ASSERT_TRUE(st.ok()) << st.error();
        EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + r0 * 512 * 4)) << "rank " << k;
        total += r.value()->bytes_read();
    }
    // At most one block besides the bytes on each side of the two cuts inside a slice.
    EXPECT_GE(total, 8u << 20);
    EXPECT_LE(total, (8u << 20) + 4 * (64u << 10));
}

TEST(Async, SnapshotPersistsTheSameBytesAsSync) {
    TempDir d;
    const std::vector<Spec> specs = {{"w", DType::fp32, {128, 64}, 9}};
    AsyncShardWriter a;
    for (std::uint64_t step : {1, 2}) {
        ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
        auto data = t::logical(DType::fp32, {128, 64}, 9);
        ASSERT_TRUE(a.add_tensor("w", DType::fp32, {128, 64}, {0, 0}, {128, 64}, data.data()).ok());
        std::fill(data.begin(), data.end(), 0);   // the snapshot must not alias the caller
        RankState rs;
        rs.rank = 0;
        rs.rng = {std::uint8_t(step), 7, 9};
        rs.consumed = {std::int64_t(step), 40, 41};
        ASSERT_TRUE(a.add_rank_state(rs).ok());
        rs.rng.assign(3, 0);   // nor the rank state
        rs.consumed.clear();
        ASSERT_TRUE(a.submit().ok());
        auto st = a.wait();
        ASSERT_TRUE(st.ok()) << st.error();
        ASSERT_TRUE(commit(d / "root", 1, meta_for(step, 1)).ok());
    }
    auto r = Reader::open_latest(d / "root");
    ASSERT_TRUE(r.ok());
    expect_logical(*r.value(), specs[0]);
    auto rs = r.value()->rank_state(0);
    ASSERT_TRUE(rs.ok()) << rs.error();
    EXPECT_EQ(rs.value().rng, (std::vector<std::uint8_t>{2, 7, 9}));
    EXPECT_EQ(rs.value().consumed, (std::vector<std::int64_t>{2, 40, 41}));
    EXPECT_FALSE(a.add_rank_state(RankState{}).ok());   // not begun
    EXPECT_FALSE(a.add_tensor("w", DType::fp32, {1}, {0}, {1}, "abcd").ok());   // not begun
}

// An asynchronous writer keeps its snapshots in blocks it reuses from one checkpoint to the
// next. With 1 MiB blocks (256 MiB outside this test), slices of changing sizes, some larger
// than a block, some not fitting in what is left of one, must never share snapshot memory:
// every checkpoint holds each slice as it was at add_tensor, although the caller overwrites
// each buffer right after adding it. In both snapshot modes (a copy-on-write slice's shadow
// is arena memory too).
TEST(Async, SnapshotsSpanningManyArenaBlocksNeverOverlap) {
    set_arena_block_bytes(1 << 20);
    struct Restore {
        ~Restore() { set_arena_block_bytes(0); }
    } restore;
    TempDir d;
    const std::vector<std::vector<std::uint64_t>> checkpoints = {   // fp32 elements per slice
        {75000, 225000, 640000, 25000, 200000},
        {640000, 25000, 225000, 75000, 300000},
        {30000, 30000, 700000, 260000, 260000, 1000},
    };
    std::uint64_t step = 0;
    for (Snapshot mode : {Snapshot::copy, Snapshot::copy_on_write}) {
        AsyncShardWriter a(mode);
        for (const auto &sizes : checkpoints) {
            ++step;
            SCOPED_TRACE("step " + std::to_string(step));
            ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
            std::vector<std::vector<char>> bufs;
            for (std::size_t i = 0; i < sizes.size(); ++i) {
                bufs.push_back(t::logical(DType::fp32, {sizes[i]}, step * 10 + i));
                ASSERT_TRUE(a.add_tensor("t" + std::to_string(i), DType::fp32, {sizes[i]}, {0}, {sizes[i]},
                                         bufs.back().data())
                                .ok());
                std::fill(bufs.back().begin(), bufs.back().end(), char(0x7f));
            }
            ASSERT_TRUE(a.submit().ok());
            auto st = a.wait();
            ASSERT_TRUE(st.ok()) << st.error();
            auto c = commit(d / "root", 1, meta_for(step, 1));
            ASSERT_TRUE(c.ok()) << c.error();
            auto r = Reader::open(c.value());
            ASSERT_TRUE(r.ok()) << r.error();
            for (std::size_t i = 0; i < sizes.size(); ++i)
                expect_logical(*r.value(), {"t" + std::to_string(i), DType::fp32, {sizes[i]}, step * 10 + i});
        }
    }
}

// A persist that fails is reported by wait(), or else by the next begin(), once; the writer
// goes on working after either.
TEST(Async, AFailedPersistIsReportedByWaitOrByTheNextBegin) {
    TempDir d;
    const std::string not_a_dir = d / "file";
    ASSERT_TRUE(fsio::write_file(not_a_dir, "x").ok());
    const float f[4] = {1, 2, 3, 4};
    AsyncShardWriter a;
    auto save = [&](const std::string &root, std::uint64_t step) {
        if (auto st = a.begin(root, step, 0); !st) return st;
        if (auto st = a.add_tensor("x", DType::fp32, {4}, {0}, {4}, f); !st) return st;
        return a.submit();
    };
    ASSERT_TRUE(save(not_a_dir, 1).ok());
    auto st = a.wait();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find(not_a_dir), std::string::npos) << st.error();
    ASSERT_TRUE(save(not_a_dir, 2).ok());   // collected by wait(): begin goes on
    auto b = a.begin(d / "root", 3, 0);     // not collected: begin reports it
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.error().rfind("the previous checkpoint's persist failed: ", 0), 0u) << b.error();
    EXPECT_NE(b.error().find(not_a_dir), std::string::npos) << b.error();
    ASSERT_TRUE(save(d / "root", 3).ok());   // once
    ASSERT_TRUE(a.wait().ok());
    auto c = commit(d / "root", 1, meta_for(3, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_TRUE(verify(c.value()).value().ok());
}

// A reshard or merge that fails part way (a damaged source here) removes what it wrote: no
// output, no partial directory.
TEST(Rewrite, AFailedRewriteLeavesNothingBehind) {
    TempDir d;
    const Spec s{"a", DType::fp32, {64, 4}, 1};
    const std::string ck = write_ckpt(d / "root", 1, 2, {s});
    const std::string shard = ck + "/shard-00001.h5";
    const haddr_t off = dataset_offset(shard, "/t/a");
    ASSERT_NE(off, HADDR_UNDEF);
    std::string bytes = read_all_bytes(shard);
    bytes[off + 5] ^= 1;
    ASSERT_TRUE(fsio::remove_file(shard).ok());
    ASSERT_TRUE(fsio::write_file(shard, bytes).ok());
    ASSERT_TRUE(fsio::make_dirs(d / "out").ok());
    for (int which = 0; which < 2; ++which) {
        const std::string out = d / "out/rewritten";
        auto r = which == 0 ? reshard(ck, 3, out) : merge(ck, out);
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.error().find("tensor a: " + shard + ": checksum mismatch"), std::string::npos) << r.error();
        auto left = fsio::list_dir(d / "out");
        ASSERT_TRUE(left.ok());
        EXPECT_TRUE(left.value().empty()) << left.value()[0];
    }
    auto zero = reshard(ck, 0, d / "out/r0");
    ASSERT_FALSE(zero.ok());
    EXPECT_EQ(zero.error(), "reshard: 0 writers: expected 1..1048576");
}

// reshard and merge move a slice a block at a time, reading from the source and writing to
// the new shard: memory does not grow with the slice (a 48 MiB one here), and the values are
// the source's.
TEST(Rewrite, ReshardAndMergeHoldOneBlockOfASlice) {
    TempDir d;
    const Spec s{"big", DType::fp32, {3072, 4096}, 8};   // 48 MiB, one slice per writer of 1
    const std::string ck = write_ckpt(d / "root", 1, 1, {s});
    for (int which = 0; which < 2; ++which) {
        const std::string out = d / (which == 0 ? "r1" : "m");
        if (const char *why = start_peak_rss()) GTEST_SKIP() << why;
        const long before = peak_rss_kb();
        auto r = which == 0 ? reshard(ck, 1, out) : merge(ck, out);
        const long grew = peak_rss_kb() - before;
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_LT(grew, 16 * 1024) << "KiB of peak memory to " << (which == 0 ? "reshard" : "merge")
                                   << " a 48 MiB slice";
        auto rd = Reader::open(r.value());
        ASSERT_TRUE(rd.ok()) << rd.error();
        expect_logical(*rd.value(), s);
    }
}

TEST(Gc, KeepsLastKAndEveryMthAndSkipsYoungPartials) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<Spec> specs = {{"w", DType::fp32, {4}, 1}};
    for (std::uint64_t s = 10; s <= 60; s += 10) write_ckpt(root, s, 1, specs);
    {
        auto sw = ShardWriter::open(root, 70, 0);   // a writer still running
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    }
    GcPolicy p;
    p.keep_last = 2;
    p.keep_every = 20;
    auto g = gc(root, p);
    ASSERT_TRUE(g.ok()) << g.error();
    EXPECT_EQ(g.value().kept, (std::vector<std::string>{"step-0000000020", "step-0000000040",
                                                        "step-0000000050", "step-0000000060"}));
    EXPECT_EQ(g.value().removed, (std::vector<std::string>{"step-0000000010", "step-0000000030"}));
    EXPECT_EQ(g.value().skipped, (std::vector<std::string>{".step-0000000070.partial-0"}));
    p.grace_seconds = 0;
    g = gc(root, p);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g.value().removed, (std::vector<std::string>{".step-0000000070.partial-0"}));
    p.keep_last = 0;
    EXPECT_FALSE(gc(root, p).ok());
}
