// Unit tests of libomni-ckpt: round trips, resharding, incremental chains and merge,
// corruption, commit validation, gc and the manifest parser.
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
#include "../blocks.h"
#include "../bounded_map.h"
#include "../box.h"
#include "../format.h"
#include "../fsio.h"
#include "../h5.h"
#include "../hash.h"
#include "../ref_shard.h"
#include "../writer_internal.h"
#include "omni/ckpt_cpp.h"
#include "test_util.h"

using namespace omni::ckpt;
namespace t = omni::ckpt::test;
using t::TempDir;

namespace {

struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
    std::uint64_t seed;
};

Meta meta_for(std::uint64_t step, std::uint64_t world) {
    Meta m;
    m.step = step;
    m.generation = 3;
    m.world_size = world;
    m.unit_layout = "4@pcie";
    m.lr = {"cosine", 1.5e-4, 100, 10000, step};
    m.ledger = {2, 42};
    return m;
}

// Writes a checkpoint with `writers` ranks, each tensor split unevenly along dimension 0.
std::string write_ckpt(const std::string &root, std::uint64_t step, std::uint32_t writers,
                       const std::vector<Spec> &specs, const std::string &base = "",
                       std::uint64_t *written = nullptr) {
    WriterOptions wo;
    wo.base = base;
    std::uint64_t total_written = 0;
    for (std::uint32_t w = 0; w < writers; ++w) {
        auto sw = ShardWriter::open(root, step, w, wo);
        EXPECT_TRUE(sw.ok()) << sw.error();
        if (!sw.ok()) return "";
        for (const auto &s : specs) {
            const auto all = t::logical(s.dtype, s.shape, s.seed);
            const auto part = t::uneven_split(s.shape[0], writers)[w];
            if (part.second == 0) continue;
            Shape off(s.shape.size(), 0), cnt = s.shape;
            off[0] = part.first;
            cnt[0] = part.second;
            const auto data = t::rows_of(all, s.shape, s.dtype, part.first, part.second);
            auto st = sw.value()->add_tensor(s.name, s.dtype, s.shape, off, cnt, data.data());
            EXPECT_TRUE(st.ok()) << st.error();
        }
        RankState rs;
        rs.rank = w;
        rs.rng = {std::uint8_t(w), std::uint8_t(step), 0xab};
        rs.consumed = {std::int64_t(w), std::int64_t(w + writers)};
        EXPECT_TRUE(sw.value()->add_rank_state(rs).ok());
        auto st = sw.value()->finish();
        EXPECT_TRUE(st.ok()) << st.error();
        total_written += sw.value()->bytes_written();
    }
    if (written) *written = total_written;
    auto c = commit(root, writers, meta_for(step, writers));
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? c.value() : "";
}

// Where a contiguous dataset's bytes start in its file (HADDR_UNDEF if they do not).
haddr_t dataset_offset(const std::string &file, const char *dataset) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return HADDR_UNDEF;
    hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
    const haddr_t off = ds < 0 ? HADDR_UNDEF : H5Dget_offset(ds);
    if (ds >= 0) H5Dclose(ds);
    H5Fclose(f);
    return off;
}

std::string read_all_bytes(const std::string &path) {
    auto b = fsio::read_file(path, 64 << 20);
    EXPECT_TRUE(b.ok()) << b.error();
    return b.ok() ? b.value() : std::string();
}

// Rewrites `dataset` of `file` chunked by `chunk`, with whatever filters `filters` adds to
// the creation list, as another tool (h5repack) might. `rows`, if not 0: only the first
// `rows` rows are written, so the chunks after them are never stored.
void rewrite_chunked(const std::string &file, const char *dataset, std::vector<hsize_t> chunk,
                     const std::function<void(hid_t)> &filters, hsize_t rows = 0) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    hid_t sp = H5Dget_space(ds), type = H5Dget_type(ds);
    const int n = H5Sget_simple_extent_ndims(sp);
    ASSERT_EQ(n, static_cast<int>(chunk.size()));
    std::vector<hsize_t> dims(n);
    H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    std::vector<char> buf(H5Sget_simple_extent_npoints(sp) * H5Tget_size(type));
    ASSERT_GE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), 0);
    // As in a file another tool wrote anew, the slice's bytes are no longer at the place the
    // manifest records (it holds their complement), and the new dataset gets space of its
    // own (it is made before the old one's is freed).
    std::vector<char> flipped(buf);
    for (auto &c : flipped) c = static_cast<char>(~c);
    ASSERT_GE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, flipped.data()), 0);
    H5Dclose(ds);
    const std::string fresh = std::string(dataset) + ".new";
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_chunk(dcpl, n, chunk.data()), 0);
    filters(dcpl);
    ds = H5Dcreate2(f, fresh.c_str(), type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    if (rows == 0) {
        ASSERT_GE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), 0);
    } else {
        std::vector<hsize_t> off(n, 0), cnt = dims;
        cnt[0] = rows;
        hid_t ms = H5Screate_simple(n, cnt.data(), nullptr);
        ASSERT_GE(H5Sselect_hyperslab(sp, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr), 0);
        ASSERT_GE(H5Dwrite(ds, type, ms, sp, H5P_DEFAULT, buf.data()), 0);
        H5Sclose(ms);
    }
    H5Dclose(ds);
    ASSERT_GE(H5Ldelete(f, dataset, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lmove(f, fresh.c_str(), f, dataset, H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Pclose(dcpl);
    H5Tclose(type);
    H5Sclose(sp);
    ASSERT_GE(H5Fclose(f), 0);
}

// A filter that changes nothing and counts the chunks read through it: how many times HDF5
// read (and would have decompressed) a chunk. Its id is in the range HDF5 leaves for testing.
constexpr H5Z_filter_t kCountingFilter = 300;
int g_chunk_reads = 0;
size_t counting_filter(unsigned flags, size_t, const unsigned[], size_t nbytes, size_t *, void **) {
    if (flags & H5Z_FLAG_REVERSE) ++g_chunk_reads;
    return nbytes;
}
void add_counting_filter(hid_t dcpl) {
    static const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, kCountingFilter, 1, 1, "omni test: counts chunk reads",
                                     nullptr, nullptr, counting_filter};
    ASSERT_GE(H5Zregister(&cls), 0);
    ASSERT_GE(H5Pset_filter(dcpl, kCountingFilter, H5Z_FLAG_MANDATORY, 0, nullptr), 0);
}

// The peak resident memory of this process since the last start_peak_rss(), in KiB.
long peak_rss_kb() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

// Resets the peak resident size for a test to measure what it allocates from here; returns
// why it cannot, or nullptr.
const char *start_peak_rss() {
#ifdef OMNI_THREAD_SANITIZER
    // Measured: 10-14 MiB more in the tests below, where the library grows by 0-1.5 MiB.
    return "in a ThreadSanitizer build the peak RSS also counts the sanitizer's shadow memory "
           "and traces";
#else
    std::ofstream out("/proc/self/clear_refs");
    out << "5";   // proc(5): resets the peak resident set size to the current one
    out.flush();
    return out ? nullptr : "/proc/self/clear_refs cannot reset the peak RSS here";
#endif
}

void expect_logical(Reader &r, const Spec &s) {
    const auto want = t::logical(s.dtype, s.shape, s.seed);
    std::vector<char> got(want.size());
    auto st = r.read_all(s.name, got.data(), got.size());
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_TRUE(want == got) << "tensor " << s.name << " differs in " << r.path();
}

const std::vector<Spec> kMixed = {
    {"model/embed", DType::fp32, {29, 6}, 1},    {"model/blk.0/w", DType::bf16, {17, 4, 3}, 2},
    {"model/blk.0/b", DType::fp16, {13}, 3},     {"optim/step", DType::int64, {1}, 4},
    {"data/mask", DType::uint8, {31, 2}, 5},     {"optim/adam/exp_avg/embed", DType::fp32, {29, 6}, 6},
};

}  // namespace

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

// A load with checksums takes a slice read whole from the place the manifest records and
// proves it by its checksum, without HDF5: it still loads with a shard's superblock
// destroyed. Without checksums nothing proves the place, so HDF5 is asked, and fails naming
// the file; verify names it too.
TEST(Load, WholeSlicesNeedOnlyTheManifestAndTheirBytes) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, kMixed);
    ASSERT_FALSE(ck.empty());
    const std::string shard = ck + "/shard-00001.h5";
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        const char zeros[8] = {};
        f.write(zeros, sizeof zeros);   // HDF5's signature: no longer an HDF5 file
        ASSERT_TRUE(f.good());
    }
    ASSERT_LT(H5Fis_hdf5(shard.c_str()), 1);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const auto &s : kMixed) expect_logical(*r.value(), s);

    ReadOptions unchecked;
    unchecked.verify_checksums = false;
    auto u = Reader::open(ck, unchecked);
    ASSERT_TRUE(u.ok()) << u.error();
    std::vector<char> buf(29 * 6 * 4);
    auto st = u.value()->read_all("model/embed", buf.data(), buf.size());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().rfind("tensor model/embed: ", 0), 0u) << st.error();
    EXPECT_NE(st.error().find(shard), std::string::npos) << st.error();
    auto v = verify(ck);
    ASSERT_TRUE(v.ok()) << v.error();
    std::size_t there = 0;   // tensors with a slice in shard 1: two rows or more
    for (const auto &sp : kMixed) there += sp.shape[0] >= 2;
    ASSERT_EQ(v.value().issues.size(), there);
    for (const auto &i : v.value().issues) EXPECT_EQ(i.file, shard);
}

// A slice whose bytes are no longer at the manifest's place (its file rewritten by another
// tool), checked first through HDF5 by a read that cuts it along columns: later reads of
// rows, which need no check, take it where HDF5 has it too, not at the manifest's place.
TEST(Load, ASliceCheckedThroughHdf5IsReadThereAfter) {
    TempDir d;
    const Spec s{"a", DType::fp32, {64, 4}, 3};
    const std::string ck = write_ckpt(d / "root", 1, 1, {s});
    ASSERT_FALSE(ck.empty());
    rewrite_chunked(ck + "/shard-00000.h5", "/t/a", {8, 4}, [](hid_t) {});
    const auto all = t::logical(s.dtype, s.shape, s.seed);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<char> cols(64 * 2 * 4), want(cols.size());
    copy_region(Box{{0, 1}, {64, 2}}, all.data(), Box{{0, 0}, s.shape}, want.data(), Box{{0, 1}, {64, 2}}, 4);
    auto st = r.value()->read("a", {0, 1}, {64, 2}, cols.data(), cols.size());
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_TRUE(cols == want);
    std::vector<char> rows(10 * 4 * 4);
    st = r.value()->read("a", {20, 0}, {10, 4}, rows.data(), rows.size());
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_TRUE(std::equal(rows.begin(), rows.end(), all.begin() + 20 * 4 * 4));
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
                  [](hid_t loc, const char *name, const H5O_info_t *info, void *op) -> herr_t {
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

TEST(Corruption, FlippedByteAndMissingFileNameTensorAndFile) {
    TempDir d;
    const std::vector<Spec> specs = {{"a", DType::fp32, {64, 4}, 1}, {"b", DType::int64, {8}, 2}};
    const std::string ck = write_ckpt(d / "root", 1, 2, specs);
    const std::string shard = ck + "/shard-00001.h5";
    // Flip one byte in the middle of tensor a's slice in shard 1.
    const haddr_t off = dataset_offset(shard, "/t/a");
    ASSERT_NE(off, HADDR_UNDEF);
    {
        std::fstream fs(shard, std::ios::in | std::ios::out | std::ios::binary);
        fs.seekg(static_cast<std::streamoff>(off + 17));
        char c;
        fs.read(&c, 1);
        c ^= 0x10;
        fs.seekp(static_cast<std::streamoff>(off + 17));
        fs.write(&c, 1);
    }
    auto v = verify(ck);
    ASSERT_TRUE(v.ok()) << v.error();
    ASSERT_EQ(v.value().issues.size(), 1u);
    EXPECT_EQ(v.value().issues[0].tensor, "a");
    EXPECT_EQ(v.value().issues[0].file, shard);
    EXPECT_NE(v.value().issues[0].problem.find("checksum mismatch"), std::string::npos);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok());
    std::vector<char> buf(64 * 4 * 4);
    auto st = r.value()->read_all("a", buf.data(), buf.size());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("tensor a"), std::string::npos) << st.error();
    EXPECT_NE(st.error().find("shard-00001.h5"), std::string::npos) << st.error();
    // The untouched tensor still loads.
    expect_logical(*r.value(), specs[1]);

    ASSERT_EQ(::unlink(shard.c_str()), 0);
    auto r2 = Reader::open(ck);
    ASSERT_FALSE(r2.ok());
    EXPECT_NE(r2.error().find("shard-00001.h5"), std::string::npos) << r2.error();
    EXPECT_NE(r2.error().find("missing"), std::string::npos) << r2.error();
    auto v2 = verify(ck);
    ASSERT_TRUE(v2.ok());
    EXPECT_EQ(v2.value().issues.size(), 2u);   // both tensors have a slice in shard 1
    for (const auto &i : v2.value().issues) EXPECT_EQ(i.file, shard);
}

// A shard whose dataset was replaced by one of another shape or type, and an index whose
// virtual dataset was removed or points elsewhere: load and verify name the tensor, the file
// and what is wrong.
TEST(Corruption, ForeignDatasetsAndTamperedVirtualDatasetsAreNamed) {
    TempDir d;
    const Spec a{"a", DType::fp32, {64, 4}, 1}, b{"b", DType::fp32, {64, 4}, 2};
    const std::string ck = write_ckpt(d / "root", 1, 2, {a, b});
    const std::string shard = ck + "/shard-00001.h5", index = ck + "/index.h5";
    auto replace = [&](const std::string &file, const char *name, hid_t type, std::vector<hsize_t> dims) {
        hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0);
        if (type >= 0) {
            hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
            hid_t ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ASSERT_GE(ds, 0);
            H5Dclose(ds);
            H5Sclose(sp);
        }
        ASSERT_GE(H5Fclose(f), 0);
    };
    replace(shard, "/t/a", H5T_IEEE_F32LE, {8, 4});    // the manifest says [32,4]
    replace(shard, "/t/b", H5T_STD_I32LE, {32, 4});    // the manifest says fp32
    // The committed bytes are still where the manifest places them, and match their
    // checksums: a load with checksums takes them from there, without asking HDF5.
    {
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        expect_logical(*r.value(), a);
        expect_logical(*r.value(), b);
    }
    // Without checksums nothing proves them, so the datasets are asked, and found foreign.
    ReadOptions unchecked;
    unchecked.verify_checksums = false;
    auto r = Reader::open(ck, unchecked);
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<char> buf(64 * 4 * 4);
    auto st = r.value()->read_all("a", buf.data(), buf.size());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error(), "tensor a: " + shard + ": dataset /t/a does not have the shape [32,4] the manifest records");
    st = r.value()->read_all("b", buf.data(), buf.size());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error(), "tensor b: " + shard + ": dataset /t/b is not of type fp32");

    // In the index: /tensors/a removed, /tensors/b mapping one source to another dataset.
    replace(index, "/tensors/a", -1, {});
    {
        hid_t f = H5Fopen(index.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        ASSERT_GE(H5Ldelete(f, "/tensors/b", H5P_DEFAULT), 0);
        const hsize_t dims[2] = {64, 4}, half[2] = {32, 4}, zero[2] = {0, 0}, mid[2] = {32, 0};
        hid_t vs = H5Screate_simple(2, dims, nullptr), ss = H5Screate_simple(2, half, nullptr);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Sselect_hyperslab(vs, H5S_SELECT_SET, zero, nullptr, half, nullptr);
        H5Pset_virtual(dcpl, vs, "shard-00000.h5", "/t/b", ss);
        H5Sselect_hyperslab(vs, H5S_SELECT_SET, mid, nullptr, half, nullptr);
        H5Pset_virtual(dcpl, vs, "shard-00001.h5", "/t/a", ss);   // the wrong tensor's slice
        H5Sselect_all(vs);
        hid_t ds = H5Dcreate2(f, "/tensors/b", H5T_IEEE_F32LE, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ASSERT_GE(ds, 0);
        H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(ss);
        H5Sclose(vs);
        ASSERT_GE(H5Fclose(f), 0);
    }
    auto v = verify(ck);
    ASSERT_TRUE(v.ok()) << v.error();
    std::multiset<std::string> got;
    for (const auto &i : v.value().issues) got.insert(i.tensor + " | " + i.file + " | " + i.problem);
    const std::multiset<std::string> want = {
        "a | " + shard + " | dataset /t/a does not have the shape [32,4] the manifest records",
        "b | " + shard + " | dataset /t/b is not of type fp32",
        "a | " + index + " | no virtual dataset /tensors/a",
        // Each mapping that differs, and how: the source it should map, the one it maps.
        "b | " + index + " | /tensors/b does not map the source shard-00001.h5 /t/b (offset [32,0] count [32,4])",
        "b | " + index + " | /tensors/b maps shard-00001.h5 /t/a, which is not a source of the tensor in the manifest",
    };
    EXPECT_EQ(got, want);
}

TEST(Load, SourceStoredChunkedAndCompressedIsReadThroughHdf5) {
    // Slices as omni-ckpt writes them are read with plain reads at their file offset; one
    // rewritten by another tool (chunked and deflated, as h5repack might) must still load,
    // through HDF5, with its checksum checked.
    TempDir d;
    const Spec s{"a", DType::fp32, {64, 4}, 1};
    const std::string ck = write_ckpt(d / "root", 1, 2, {s});
    rewrite_chunked(ck + "/shard-00001.h5", "/t/a", {8, 4}, [](hid_t dcpl) { H5Pset_deflate(dcpl, 6); });
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    expect_logical(*r.value(), s);
    // Rows crossing both shards, each slice checked on first touch by a fresh Reader.
    const auto all = t::logical(s.dtype, s.shape, s.seed);
    for (bool verify_sums : {true, false}) {
        ReadOptions ro;
        ro.verify_checksums = verify_sums;
        auto r2 = Reader::open(ck, ro);
        ASSERT_TRUE(r2.ok()) << r2.error();
        std::vector<char> part(20 * 4 * 4);
        auto st = r2.value()->read("a", {22, 0}, {20, 4}, part.data(), part.size());
        ASSERT_TRUE(st.ok()) << st.error();
        EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 22 * 4 * 4));
    }
    auto v = verify(ck);
    ASSERT_TRUE(v.ok()) << v.error();
    EXPECT_TRUE(v.value().issues.empty());
}

// A chunked source whose chunks are larger than HDF5's default chunk cache (1 MiB; h5repack
// makes chunks of up to 32 MiB) is read in blocks of 1 MiB: each chunk must still be read and
// decompressed once, not once per block it spans. Both ways a block is cut: rows of a slice
// (k = 0), and parts of one row wider than a block (k = 1).
TEST(Load, ChunkedSourceReadsEachChunkOnce) {
    struct Case {
        Shape shape;
        std::vector<hsize_t> chunk;
        int chunks;
        Shape offset, count;   // a read that cuts the slice and its chunks
    };
    const std::vector<Case> cases = {
        {{2048, 512}, {1024, 512}, 2, {700, 0}, {400, 512}},          // 2 MiB chunks, rows
        {{4, 1u << 19}, {2, 1u << 18}, 4, {1, 1000}, {2, 300000}},   // rows of 2 MiB
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(shape_string(c.shape));
        TempDir d;
        const Spec s{"big", DType::fp32, c.shape, 9};
        const std::string ck = write_ckpt(d / "root", 1, 1, {s});
        const std::string shard = ck + "/shard-00000.h5";
        rewrite_chunked(shard, "/t/big", c.chunk, add_counting_filter);
        const auto all = t::logical(s.dtype, s.shape, s.seed);

        g_chunk_reads = 0;
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        expect_logical(*r.value(), s);
        EXPECT_EQ(g_chunk_reads, c.chunks) << "whole load";

        // First touch of a part: the whole slice is read to be hashed, the part lands.
        g_chunk_reads = 0;
        auto r2 = Reader::open(ck);
        ASSERT_TRUE(r2.ok()) << r2.error();
        std::vector<char> got(element_count(c.count) * 4), want(got.size());
        copy_region(Box{c.offset, c.count}, all.data(), Box{Shape(2, 0), c.shape}, want.data(),
                    Box{c.offset, c.count}, 4);
        auto st = r2.value()->read("big", c.offset, c.count, got.data(), got.size());
        ASSERT_TRUE(st.ok()) << st.error();
        EXPECT_TRUE(got == want);
        EXPECT_EQ(g_chunk_reads, c.chunks) << "part of the slice";

        g_chunk_reads = 0;
        auto v = verify(ck);
        ASSERT_TRUE(v.ok()) << v.error();
        EXPECT_TRUE(v.value().issues.empty());
        EXPECT_EQ(g_chunk_reads, c.chunks) << "verify";
    }
}

// Slices read through HDF5 in blocks (chunked by another tool) land right whatever the
// geometry: blocks of whole rows, of part of a row (k = 1) and of part of a part (k = 2),
// chunks that cut blocks at odd places, and requests that cut slices along any dimension,
// both on first touch (the whole slice hashed block by block, the request copied out of each
// block) and after (HDF5 scatters the request). Boxes drawn by a fixed-seed generator.
TEST(Load, ChunkedSourcesAnyRequestAnyBlockGeometry) {
    struct Case {
        Spec spec;
        std::vector<hsize_t> chunk;
    };
    const std::vector<Case> cases = {
        {{"rows", DType::bf16, {700, 1500}, 21}, {33, 700}},              // blocks of rows
        {{"row_parts", DType::fp32, {6, 5, 70000}, 22}, {1, 2, 9999}},    // k = 1
        {{"part_parts", DType::fp32, {2, 2, 300000}, 23}, {1, 1, 70001}},  // k = 2
    };
    std::uint64_t rng = 0x9e3779b97f4a7c15ull;
    auto draw = [&](std::uint64_t n) {   // 0..n-1, xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng % n;
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.spec.name);
        TempDir d;
        const std::string ck = write_ckpt(d / "root", 1, 3, {c.spec});
        for (int w = 0; w < 3; ++w)
            if (fsio::exists(ck + "/shard-0000" + std::to_string(w) + ".h5"))
                rewrite_chunked(ck + "/shard-0000" + std::to_string(w) + ".h5", ("/t/" + c.spec.name).c_str(),
                                c.chunk, [](hid_t dcpl) { H5Pset_deflate(dcpl, 1); });
        const Shape &shape = c.spec.shape;
        const std::size_t elem = dtype_size(c.spec.dtype);
        const auto all = t::logical(c.spec.dtype, shape, c.spec.seed);
        for (int i = 0; i < 6; ++i) {
            Shape off(shape.size()), cnt(shape.size());
            for (std::size_t k = 0; k < shape.size(); ++k) {
                off[k] = draw(shape[k]);
                cnt[k] = 1 + draw(shape[k] - off[k]);
            }
            SCOPED_TRACE(shape_string(off) + " + " + shape_string(cnt));
            std::vector<char> want(element_count(cnt) * elem), got(want.size());
            copy_region(Box{off, cnt}, all.data(), Box{Shape(shape.size(), 0), shape}, want.data(), Box{off, cnt}, elem);
            auto r = Reader::open(ck);
            ASSERT_TRUE(r.ok()) << r.error();
            for (int pass = 0; pass < 2; ++pass) {   // first touch, then already verified
                std::fill(got.begin(), got.end(), 0);
                auto st = r.value()->read(c.spec.name, off, cnt, got.data(), got.size());
                ASSERT_TRUE(st.ok()) << st.error();
                EXPECT_TRUE(got == want) << "pass " << pass;
            }
        }
        auto v = verify(ck);
        ASSERT_TRUE(v.ok()) << v.error();
        EXPECT_TRUE(v.value().issues.empty());
    }
}

// The first read of part of a slice stored other than as we write it (chunked, here) goes
// through HDF5 and hashes all of the slice: through one block of memory, not a buffer of
// the slice's size.
TEST(Load, PartOfAChunkedSliceIsCheckedThroughOneBlock) {
    TempDir d;
    const Spec s{"big", DType::fp32, {16384, 512}, 4};   // 32 MiB in one slice
    const std::string ck = write_ckpt(d / "root", 1, 1, {s});
    rewrite_chunked(ck + "/shard-00000.h5", "/t/big", {64, 512}, [](hid_t) {});
    const auto all = t::logical(s.dtype, s.shape, s.seed);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<char> got(10 * 512 * 4, 0);
    if (const char *why = start_peak_rss()) GTEST_SKIP() << why;
    const long before = peak_rss_kb();
    auto st = r.value()->read("big", {8000, 0}, {10, 512}, got.data(), got.size());
    const long grew = peak_rss_kb() - before;
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + 8000 * 512 * 4));
    EXPECT_LT(grew, 12 * 1024) << "KiB of peak memory for reading 20 KiB of a 32 MiB slice";
}

// HDF5 returns fill values for a chunk never written; a source with one is refused by name
// before anything of it is read (no writer leaves one; a damaged or hostile file can).
TEST(Load, ChunkedSourceWithUnstoredChunksIsRefused) {
    TempDir d;
    const Spec s{"a", DType::fp32, {64, 4}, 1};
    const std::string ck = write_ckpt(d / "root", 1, 1, {s});
    const std::string shard = ck + "/shard-00000.h5";
    rewrite_chunked(shard, "/t/a", {8, 4}, [](hid_t) {}, 8);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<char> buf(64 * 4 * 4);
    auto st = r.value()->read_all("a", buf.data(), buf.size());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("1 of its 8 chunks are stored"), std::string::npos) << st.error();
    EXPECT_NE(st.error().find(shard), std::string::npos) << st.error();
    auto v = verify(ck);
    ASSERT_TRUE(v.ok()) << v.error();
    ASSERT_EQ(v.value().issues.size(), 1u);
    EXPECT_EQ(v.value().issues[0].file, shard);
    EXPECT_EQ(v.value().issues[0].tensor, "a");
    // The report has the tensor and the file in fields of their own; the problem says what.
    EXPECT_EQ(v.value().issues[0].problem, "dataset /t/a: 1 of its 8 chunks are stored");
}

// A read of the middle of a slice many blocks long hashes the rows before and after it too
// (first touch, checksums on): the values are right, and a byte flipped in either of those
// parts, which the read does not return, is still caught.
// Every block checksum of every slice of the shard files in `ck` (blocks.h), recomputed here
// from the dataset's bytes with one-shot XXH3 per block, against its attributes: the writers
// must have put exactly these there. Returns how many slices had them.
std::size_t expect_block_hashes(const std::string &ck) {
    std::size_t with = 0;
    auto names = fsio::list_dir(ck);
    EXPECT_TRUE(names.ok()) << ck;
    if (!names.ok()) return 0;
    for (const auto &name : names.value()) {
        if (name.compare(0, 6, "shard-") != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".h5") != 0) continue;
        hid_t f = H5Fopen((ck + "/" + name).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        EXPECT_GE(f, 0) << name;
        struct Ctx {
            std::string file;
            std::size_t with = 0;
        } ctx{name};
        H5Ovisit2(
            f, H5_INDEX_NAME, H5_ITER_NATIVE,
            [](hid_t loc, const char *obj, const H5O_info_t *info, void *op) -> herr_t {
                auto &c = *static_cast<Ctx *>(op);
                if (info->type != H5O_TYPE_DATASET || std::string(obj).compare(0, 2, "t/") != 0) return 0;
                hid_t ds = H5Dopen2(loc, obj, H5P_DEFAULT);
                hid_t type = H5Dget_type(ds);
                const std::size_t bytes = H5Dget_storage_size(ds);
                std::vector<char> data(bytes);
                EXPECT_GE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
                H5Tclose(type);
                auto b = read_block_hashes(ds, bytes);
                EXPECT_TRUE(b.ok()) << c.file << " " << obj << ": " << b.error();
                const std::uint64_t bb = block_bytes_for(bytes);
                if (b.ok() && bb) {
                    ++c.with;
                    EXPECT_EQ(b.value().block_bytes, bb) << c.file << " " << obj;
                    std::vector<std::uint64_t> want;
                    for (std::uint64_t at = 0; at < bytes; at += bb)
                        want.push_back(XXH3_64bits(data.data() + at, std::min<std::uint64_t>(bb, bytes - at)));
                    EXPECT_EQ(b.value().xxh3, want) << c.file << " " << obj;
                } else if (b.ok()) {
                    EXPECT_TRUE(b.value().empty()) << c.file << " " << obj << ": a slice of " << bytes << " bytes";
                }
                H5Dclose(ds);
                return 0;
            },
            &ctx, H5O_INFO_BASIC);
        H5Fclose(f);
        with += ctx.with;
    }
    return with;
}

TEST(Blocks, SizeRule) {
    // omni-ckpt(5), BLOCK CHECKSUMS: none up to 64 KiB, then the smallest power of two from
    // 64 KiB giving at most 64 blocks, up to 1 MiB blocks, then at most 4096 blocks.
    const std::uint64_t K = 1024, M = K * K, G = M * K;
    const std::vector<std::pair<std::uint64_t, std::uint64_t>> cases = {
        {1, 0},          {64 * K, 0},      {64 * K + 1, 64 * K}, {4 * M, 64 * K},  {4 * M + 1, 128 * K},
        {6 * M, 128 * K}, {64 * M, M},      {64 * M + 1, M},      {4 * G, M},       {4 * G + 1, 2 * M},
        {std::uint64_t(1) << 62, std::uint64_t(1) << 50}};
    for (const auto &[bytes, want] : cases) {
        EXPECT_EQ(block_bytes_for(bytes), want) << bytes;
        if (want) {
            EXPECT_LE(block_count(bytes, want), bytes <= 64 * M ? 64u : 4096u) << bytes;
        }
    }
}

TEST(Blocks, HasherCutsBlocksWhateverThePieces) {
    std::vector<char> buf(3 * 65536 + 1234);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 7 + (i >> 11));
    const std::uint64_t bb = 65536;
    std::vector<std::uint64_t> want;
    for (std::size_t at = 0; at < buf.size(); at += bb)
        want.push_back(XXH3_64bits(buf.data() + at, std::min<std::size_t>(bb, buf.size() - at)));
    for (std::size_t piece : {std::size_t(1000), std::size_t(65536), std::size_t(65537), std::size_t(200000), buf.size()}) {
        BlockHasher h(bb);
        for (std::size_t at = 0; at < buf.size(); at += piece) h.update(buf.data() + at, std::min(piece, buf.size() - at));
        EXPECT_EQ(h.digest(), XXH3_64bits(buf.data(), buf.size())) << piece;
        EXPECT_EQ(h.blocks(), want) << piece;
    }
    BlockHasher none(0);
    none.update(buf.data(), buf.size());
    EXPECT_TRUE(none.blocks().empty());
}

TEST(Blocks, EveryWriterPutsThem) {
    // Sync, async, the C++ writer's streaming path (merge/reshard) and a base slice reused by
    // an incremental checkpoint; 2 MiB slices (32 blocks of 64 KiB) and small ones (none).
    TempDir d;
    const std::vector<Spec> specs = {{"big", DType::fp32, {2048, 512}, 4}, {"small", DType::bf16, {64, 8}, 5}};
    const std::string ck = write_ckpt(d / "root", 1, 2, specs);
    EXPECT_EQ(expect_block_hashes(ck), 2u);
    auto rs = reshard(ck, 3, d / "r3");
    ASSERT_TRUE(rs.ok()) << rs.error();
    EXPECT_EQ(expect_block_hashes(rs.value()), 3u);
    AsyncShardWriter a;
    ASSERT_TRUE(a.begin(d / "async", 1, 0).ok());
    const auto data = t::logical(DType::fp32, {2048, 512}, 4);
    ASSERT_TRUE(a.add_tensor("big", DType::fp32, {2048, 512}, {0, 0}, {2048, 512}, data.data()).ok());
    ASSERT_TRUE(a.submit().ok());
    ASSERT_TRUE(a.wait().ok());
    auto c = commit(d / "async", 1, meta_for(1, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_EQ(expect_block_hashes(c.value()), 1u);
    auto v = verify(c.value());
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v.value().ok());
}

// A Reader taking part of a slice reads and checks only the blocks that part touches; a
// byte flipped in one of them fails the read (the whole slice then decides, against the
// manifest), one elsewhere does not (the bytes read are right), and verify finds both.
TEST(Load, PartOfASliceIsCheckedByTheBlocksItTouches) {
    TempDir d;
    const Shape shape{3u << 19};   // 6 MiB of fp32 in one slice: 48 blocks of 128 KiB
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"big", DType::fp32, shape, 5}});
    const auto all = t::logical(DType::fp32, shape, 5);
    const std::uint64_t first = (1u << 20) + 5, n = 1000;   // bytes 4 MiB + 20 .. + 4020: block 32
    std::uint64_t read_bytes = 0;
    auto read_middle = [&](std::vector<char> &out) {
        auto r = Reader::open(ck);
        if (!r) return r.error();
        out.assign(n * 4, 0);
        auto st = r.value()->read("big", {first}, {n}, out.data(), out.size());
        read_bytes = r.value()->bytes_read();
        return st ? std::string() : st.error();
    };
    std::vector<char> got;
    ASSERT_EQ(read_middle(got), "");
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + first * 4));
    EXPECT_EQ(read_bytes, 128u << 10);   // block 32 alone, not 6 MiB

    const std::string shard = ck + "/shard-00000.h5";
    const haddr_t raw = dataset_offset(shard, "/t/big");
    ASSERT_NE(raw, HADDR_UNDEF);
    const std::string good = read_all_bytes(shard);
    auto rewrite_with = [&](const std::string &bytes) {
        ASSERT_TRUE(fsio::remove_file(shard).ok());
        ASSERT_TRUE(fsio::write_file(shard, bytes).ok());
    };
    // In block 32, outside the part asked for; inside the part.
    for (std::uint64_t at : {raw + (4u << 20) + (100u << 10), raw + first * 4 + 17}) {
        std::string bad = good;
        bad[at] ^= 0x10;
        rewrite_with(bad);
        const std::string e = read_middle(got);
        EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << "byte " << at << ": " << e;
    }
    // In block 24: the read is right; verify names the slice and the block.
    std::string bad = good;
    bad[raw + (3u << 20) + 7] ^= 0x10;
    rewrite_with(bad);
    ASSERT_EQ(read_middle(got), "");
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + first * 4));
    auto v = verify(ck);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(v.value().issues.size(), 2u);
    EXPECT_NE(v.value().issues[0].problem.find("checksum mismatch (manifest"), std::string::npos);
    EXPECT_NE(v.value().issues[1].problem.find("block checksum mismatch in 1 of its 48 blocks"), std::string::npos)
        << v.value().issues[1].problem;
    EXPECT_NE(v.value().issues[1].problem.find("block 24, bytes 3145728..3276799"), std::string::npos)
        << v.value().issues[1].problem;
    rewrite_with(good);
}

// Consecutive parts of a slice, cut across its blocks (as merge and reshard read a slice, a
// block of rows at a time): each block is read and checked once, so the slice's bytes are
// read once in all.
TEST(Load, ConsecutivePartsReadEachBlockOnce) {
    TempDir d;
    const Shape shape{3u << 19};   // 6 MiB, 48 blocks of 128 KiB
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"big", DType::fp32, shape, 5}});
    const auto all = t::logical(DType::fp32, shape, 5);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    const std::uint64_t part = 100003;   // elements: parts start and end inside blocks
    for (std::uint64_t at = 0; at < shape[0]; at += part) {
        const std::uint64_t n = std::min(part, shape[0] - at);
        std::vector<char> got(n * 4);
        auto st = r.value()->read("big", {at}, {n}, got.data(), got.size());
        ASSERT_TRUE(st.ok()) << st.error();
        ASSERT_TRUE(std::equal(got.begin(), got.end(), all.begin() + at * 4)) << "at " << at;
    }
    EXPECT_EQ(r.value()->bytes_read(), 6u << 20);
}

// The elements of box [off, off + cnt) of a dense row-major tensor of `shape`.
std::vector<char> sub_box(const std::vector<char> &all, const Shape &shape, std::size_t elem, const Shape &off,
                          const Shape &cnt) {
    const std::size_t n = shape.size();
    const std::uint64_t total = element_count(cnt);
    std::vector<char> out(total * elem);
    std::vector<std::uint64_t> idx(n, 0);
    for (std::uint64_t i = 0; i < total; ++i) {
        std::uint64_t lin = 0;
        for (std::size_t d = 0; d < n; ++d) lin = lin * shape[d] + off[d] + idx[d];
        std::memcpy(out.data() + i * elem, all.data() + lin * elem, elem);
        for (std::size_t d = n; d-- > 0;) {
            if (++idx[d] < cnt[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

// Writes a checkpoint of `specs`, each split unevenly along dimension `dim` (the last one
// for tensors of fewer dimensions) among `writers`.
std::string write_split(const std::string &root, std::uint32_t writers, const std::vector<Spec> &specs,
                        std::size_t dim) {
    for (std::uint32_t w = 0; w < writers; ++w) {
        auto sw = ShardWriter::open(root, 1, w);
        EXPECT_TRUE(sw.ok()) << sw.error();
        if (!sw.ok()) return "";
        for (const auto &s : specs) {
            const auto all = t::logical(s.dtype, s.shape, s.seed);
            const std::size_t dd = std::min(dim, s.shape.size() - 1);
            const auto part = t::uneven_split(s.shape[dd], writers)[w];
            if (part.second == 0) continue;
            Shape off(s.shape.size(), 0), cnt = s.shape;
            off[dd] = part.first;
            cnt[dd] = part.second;
            auto st = sw.value()->add_tensor(s.name, s.dtype, s.shape, off, cnt,
                                             sub_box(all, s.shape, dtype_size(s.dtype), off, cnt).data());
            EXPECT_TRUE(st.ok()) << st.error();
        }
        EXPECT_TRUE(sw.value()->finish().ok());
    }
    auto c = commit(root, writers, meta_for(1, writers));
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? c.value() : "";
}

// Random boxes of every dtype in 1 to 3 dimensions, slices cut along dimension 0 or 1, sizes
// around the block boundaries, read by one Reader in any order (each block checked once,
// tails reused): every read equals the logical tensor, with checksums and without.
TEST(Load, RandomBoxesAcrossBlocksEqualTheLogicalTensor) {
    const std::uint64_t K = 1024;
    const std::vector<Spec> specs = {
        {"f64k", DType::fp32, {16 * K}, 1},       {"f64k4", DType::fp32, {16 * K + 1}, 2},
        {"u", DType::uint8, {65537 * 3}, 3},      {"f4m", DType::fp32, {K * K}, 4},
        {"f4m12", DType::fp32, {K * K + 3}, 5},   {"b2", DType::bf16, {1000, 333}, 6},
        {"i3", DType::int64, {97, 13, 71}, 7},    {"h2", DType::fp16, {4097, 129}, 8},
    };
    std::uint64_t seed = 12345;
    auto rnd = [&](std::uint64_t n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (seed >> 33) % n;
    };
    std::map<std::string, std::vector<char>> all;
    for (const auto &s : specs) all[s.name] = t::logical(s.dtype, s.shape, s.seed);
    for (std::uint32_t writers : {1u, 3u})
        for (std::size_t dim : {std::size_t(0), std::size_t(1)}) {
            TempDir d;
            const std::string ck = write_split(d / "root", writers, specs, dim);
            ASSERT_FALSE(ck.empty());
            for (bool verify_on : {true, false}) {
                ReadOptions ro;
                ro.verify_checksums = verify_on;
                auto r = Reader::open(ck, ro);
                ASSERT_TRUE(r.ok()) << r.error();
                for (int q = 0; q < 150; ++q) {
                    const Spec &s = specs[rnd(specs.size())];
                    Shape off(s.shape.size()), cnt(s.shape.size());
                    const std::uint64_t kind = rnd(3);   // rows; any box; a few blocks at a boundary
                    for (std::size_t i = 0; i < s.shape.size(); ++i) {
                        const bool whole = i > 0 && kind != 1;
                        off[i] = whole ? 0 : rnd(s.shape[i]);
                        cnt[i] = whole ? s.shape[i] : 1 + rnd(s.shape[i] - off[i]);
                    }
                    if (kind == 2 && s.shape.size() == 1) {
                        const std::uint64_t per = 65536 / dtype_size(s.dtype);
                        off[0] = std::min<std::uint64_t>(s.shape[0] - 1, rnd(s.shape[0] / per + 1) * per + rnd(3) - 1);
                        cnt[0] = 1 + rnd(std::min<std::uint64_t>(s.shape[0] - off[0], 3 * per));
                    }
                    std::vector<char> got(element_count(cnt) * dtype_size(s.dtype), 0x5a);
                    auto st = r.value()->read(s.name, off, cnt, got.data(), got.size());
                    ASSERT_TRUE(st.ok()) << st.error();
                    ASSERT_TRUE(got == sub_box(all[s.name], s.shape, dtype_size(s.dtype), off, cnt))
                        << s.name << ", " << writers << " writers cut along " << dim << ", box " << shape_string(off)
                        << " + " << shape_string(cnt);
                }
            }
        }
}

// With checksums, a read gives the right bytes or an error, never other bytes, wherever a
// byte of the slices' data is flipped: reads of whole slices (at the manifest's place, no
// HDF5), of rows (block checksums), of boxes (the whole slice hashed through HDF5), first
// touch or after. A read of the flipped slice whole always fails. Fixed-seed flips and boxes.
TEST(Corruption, AFlippedDataByteGivesTheRightBytesOrAnErrorNeverOthers) {
    const std::vector<Spec> specs = {
        {"w", DType::fp32, {1024, 96}, 1},   // slices of 128 KiB or more: block checksums
        {"b", DType::bf16, {300, 7}, 2},     // below 64 KiB: none
        {"i", DType::int64, {5000}, 3},
    };
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 3, specs);
    ASSERT_FALSE(ck.empty());
    std::map<std::string, std::vector<char>> all;
    for (const auto &sp : specs) all[sp.name] = t::logical(sp.dtype, sp.shape, sp.seed);
    struct Place {
        std::string file, tensor;
        std::uint64_t at, bytes;
    };
    std::vector<Place> places;
    std::map<std::string, std::string> original;
    {
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        for (const auto &t : r.value()->manifest().tensors)
            for (const auto &src : t.sources) {
                ASSERT_NE(src.data_offset, 0u);
                places.push_back({ck + "/" + src.file, t.name, src.data_offset,
                                  element_count(src.count) * dtype_size(t.dtype)});
                original[ck + "/" + src.file] = read_all_bytes(ck + "/" + src.file);
            }
    }
    std::uint64_t seed = 777;
    auto rnd = [&](std::uint64_t n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return (seed >> 33) % n;
    };
    auto put = [](const std::string &path, const std::string &bytes) {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        ASSERT_TRUE(f.good());
    };
    int failed = 0, right = 0;
    for (int iter = 0; iter < 60; ++iter) {
        const Place &p = places[rnd(places.size())];
        std::string bytes = original[p.file];
        const std::uint64_t at = p.at + rnd(p.bytes);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << rnd(8)));
        put(p.file, bytes);
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        {   // the flipped slice, whole: its checksum does not match wherever it is read
            const TensorInfo *t = r.value()->find(p.tensor);
            const SourceRef *src = nullptr;
            for (const auto &x : t->sources)
                if (ck + "/" + x.file == p.file) src = &x;
            ASSERT_NE(src, nullptr);
            std::vector<char> got(p.bytes);
            auto st = r.value()->read(p.tensor, src->offset, src->count, got.data(), got.size());
            EXPECT_FALSE(st.ok()) << p.tensor << " in " << p.file << ", byte " << at;
        }
        auto r2 = Reader::open(ck);   // fresh: first touches by the boxes below
        ASSERT_TRUE(r2.ok()) << r2.error();
        for (int q = 0; q < 20; ++q) {
            const Spec &sp = specs[rnd(specs.size())];
            Shape off(sp.shape.size()), cnt(sp.shape.size());
            const bool rows = rnd(2) == 0;
            for (std::size_t i = 0; i < sp.shape.size(); ++i) {
                const bool whole = i > 0 && rows;
                off[i] = whole ? 0 : rnd(sp.shape[i]);
                cnt[i] = whole ? sp.shape[i] : 1 + rnd(sp.shape[i] - off[i]);
            }
            std::vector<char> got(element_count(cnt) * dtype_size(sp.dtype), 0x5a);
            auto st = r2.value()->read(sp.name, off, cnt, got.data(), got.size());
            if (!st.ok()) {
                ++failed;
                EXPECT_NE(st.error().find("checksum"), std::string::npos) << st.error();
                continue;
            }
            ++right;
            ASSERT_TRUE(got == sub_box(all[sp.name], sp.shape, dtype_size(sp.dtype), off, cnt))
                << sp.name << " box " << shape_string(off) << " + " << shape_string(cnt) << " with byte " << at
                << " of " << p.file << " flipped";
        }
        put(p.file, original[p.file]);
    }
    EXPECT_GT(failed, 0);   // both outcomes were seen
    EXPECT_GT(right, 0);
}

// Rows of a tensor whose slices are cut along dimension 1 (tensor-parallel columns): in each
// slice those rows are one run of bytes, though not of the destination's, and only the blocks
// they touch are read.
TEST(Load, RowsOfSlicesCutAlongColumnsReadOnlyTheirBlocks) {
    TempDir d;
    const Spec s{"w", DType::fp32, {4096, 512}, 8};   // two slices {4096, 256}: 4 MiB, 64 KiB blocks
    const std::string ck = write_split(d / "root", 2, {s}, 1);
    const auto all = t::logical(s.dtype, s.shape, s.seed);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<char> got(100 * 512 * 4);
    ASSERT_TRUE(r.value()->read("w", {1000, 0}, {100, 512}, got.data(), got.size()).ok());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + 1000 * 512 * 4));
    EXPECT_LE(r.value()->bytes_read(), 2u * 3 * (64u << 10));   // 100 KiB a slice, in 3 blocks at most
}

// A slice of more than 64 MiB read 1 MiB at a time, off its 1 MiB blocks, as merge and
// reshard read it: each byte once.
TEST(Load, ALargeSliceReadABlockAtATimeIsReadOnce) {
    TempDir d;
    const Shape shape{std::uint64_t(72) << 18};   // 72 MiB of fp32: 72 blocks of 1 MiB
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"big", DType::fp32, shape, 5}});
    const auto all = t::logical(DType::fp32, shape, 5);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    const std::uint64_t part = (1u << 18) - 3;
    std::vector<char> got;
    for (std::uint64_t at = 0; at < shape[0]; at += part) {
        const std::uint64_t n = std::min(part, shape[0] - at);
        got.resize(n * 4);
        auto st = r.value()->read("big", {at}, {n}, got.data(), got.size());
        ASSERT_TRUE(st.ok()) << st.error();
        ASSERT_TRUE(std::equal(got.begin(), got.end(), all.begin() + at * 4)) << "at " << at;
    }
    EXPECT_EQ(r.value()->bytes_read(), std::uint64_t(72) << 20);
}

// The block checksums are an attribute outside the manifest's checksum: a damaged,
// malformed or missing one never fails a read of good data (the whole slice is hashed
// instead), and verify reports the damaged and malformed ones.
TEST(Load, BadOrMissingBlockChecksumsFallBackToTheWholeSlice) {
    TempDir d;
    const Shape shape{3u << 19};
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"big", DType::fp32, shape, 5}});
    const auto all = t::logical(DType::fp32, shape, 5);
    const std::string shard = ck + "/shard-00000.h5";
    auto edit = [&](const std::function<void(hid_t)> &fn) {
        hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        hid_t ds = H5Dopen2(f, "/t/big", H5P_DEFAULT);
        fn(ds);
        H5Dclose(ds);
        H5Fclose(f);
    };
    auto write_hashes = [](hid_t ds, std::vector<std::uint64_t> v) {
        H5Adelete(ds, kBlockHashesAttr);
        const hsize_t n = v.size();
        hid_t sp = H5Screate_simple(1, &n, nullptr);
        hid_t a = H5Acreate2(ds, kBlockHashesAttr, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_UINT64, v.data());
        H5Aclose(a);
        H5Sclose(sp);
    };
    auto read_part = [&](std::uint64_t *bytes) {
        auto r = Reader::open(ck);
        if (!r) return r.error();
        std::vector<char> out(4000);
        auto st = r.value()->read("big", {1u << 20}, {1000}, out.data(), out.size());
        *bytes = r.value()->bytes_read();
        if (!st) return st.error();
        return std::equal(out.begin(), out.end(), all.begin() + (4u << 20)) ? std::string() : std::string("wrong bytes");
    };
    // verify finds exactly one problem, which says `what`.
    auto expect_one_problem = [&](const std::string &what) {
        auto v = verify(ck);
        ASSERT_TRUE(v.ok()) << v.error();
        ASSERT_EQ(v.value().issues.size(), 1u);
        EXPECT_NE(v.value().issues[0].problem.find(what), std::string::npos) << v.value().issues[0].problem;
    };
    std::uint64_t bytes = 0;
    // Zeros instead of the checksums: the block does not match, the whole slice does.
    edit([&](hid_t ds) { write_hashes(ds, std::vector<std::uint64_t>(48, 0)); });
    EXPECT_EQ(read_part(&bytes), "");
    EXPECT_EQ(bytes, (128u << 10) + (6u << 20));
    expect_one_problem("block checksum mismatch in 48 of its 48 blocks");
    // One value too few.
    edit([&](hid_t ds) { write_hashes(ds, std::vector<std::uint64_t>(47, 0)); });
    EXPECT_EQ(read_part(&bytes), "");
    EXPECT_EQ(bytes, 6u << 20);
    expect_one_problem("omni_block_xxh3 holds 47 values; expected 48");
    // A block size that is not a power of two.
    edit([&](hid_t ds) {
        H5Adelete(ds, kBlockBytesAttr);
        ASSERT_TRUE(h5::write_attr_u64(ds, kBlockBytesAttr, 100000).ok());
    });
    expect_one_problem("omni_block_bytes is 100000; expected a power of two");
    // None at all (another tool's writer): the whole slice, and nothing for verify to say.
    edit([&](hid_t ds) {
        H5Adelete(ds, kBlockBytesAttr);
        H5Adelete(ds, kBlockHashesAttr);
    });
    EXPECT_EQ(read_part(&bytes), "");
    EXPECT_EQ(bytes, 6u << 20);
    auto v = verify(ck);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v.value().ok());
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

TEST(Load, CheckpointWrittenAgainUnderTheSameNameIsNotServedFromTheIndexCache) {
    // Readers in one process share parsed indexes; a checkpoint deleted and written again
    // under the same name (same path, possibly the same inode and timestamps) must be read
    // afresh.
    TempDir d;
    const Spec one{"a", DType::fp32, {16, 4}, 1}, two{"a", DType::fp32, {16, 4}, 2};
    const std::string ck = write_ckpt(d / "root", 1, 2, {one});
    {
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        expect_logical(*r.value(), one);
    }
    ASSERT_TRUE(fsio::remove_tree(d / "root").ok());
    ASSERT_EQ(write_ckpt(d / "root", 1, 2, {two}), ck);
    auto r = Reader::open(ck);
    ASSERT_TRUE(r.ok()) << r.error();
    expect_logical(*r.value(), two);
}

TEST(Commit, RejectsOverlapsHolesMissingShardsAndMismatches) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<float> data(8, 1.0f);
    auto shard = [&](std::uint64_t step, std::uint32_t w, Shape shape, Shape off, Shape cnt,
                     DType dt = DType::fp32) {
        auto sw = ShardWriter::open(root, step, w);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor("x", dt, shape, off, cnt, data.data()).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    shard(1, 0, {4}, {0}, {3});
    shard(1, 1, {4}, {2}, {2});
    auto c = commit(root, 2, meta_for(1, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("overlap"), std::string::npos) << c.error();

    shard(2, 0, {4}, {0}, {1});
    shard(2, 1, {4}, {2}, {2});
    c = commit(root, 2, meta_for(2, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("cover only 3 of 4"), std::string::npos) << c.error();

    shard(3, 0, {4}, {0}, {2});
    c = commit(root, 2, meta_for(3, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("shard-00001.h5 is missing"), std::string::npos) << c.error();

    shard(4, 0, {4}, {0}, {2});
    shard(4, 1, {4}, {2}, {2}, DType::int64);
    c = commit(root, 2, meta_for(4, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("tensor x is int64"), std::string::npos) << c.error();

    // None of this produced a complete checkpoint; all are listed incomplete.
    auto l = list(root);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l.value().size(), 4u);
    for (const auto &e : l.value()) EXPECT_FALSE(e.complete);
    EXPECT_FALSE(Reader::open_latest(root).ok());
}

// The other ways a commit can be asked wrongly, or find its directory not as the writers left
// it: each is refused with a message naming what is wrong, and nothing is committed; leftovers
// of an earlier failed commit or writer are cleared and the commit goes through.
TEST(Commit, RefusesBadRequestsAndForeignFilesNamingThem) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<float> data(8, 1.0f);
    auto shard = [&](std::uint64_t step, std::uint32_t w, std::uint32_t writers, const std::string &attempt = "0",
                     const std::string &base = "", Change change = Change::detect) {
        WriterOptions wo;
        wo.attempt = attempt;
        wo.base = base;
        auto sw = ShardWriter::open(root, step, w, wo);
        ASSERT_TRUE(sw.ok()) << sw.error();
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {2 * writers}, {2 * w}, {2}, data.data(), change).ok());
        RankState rs;
        rs.rank = w;
        ASSERT_TRUE(sw.value()->add_rank_state(rs).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    auto refused = [&](std::uint32_t writers, const Meta &meta, const std::string &want,
                       const CommitOptions &o = {}) {
        auto c = commit(root, writers, meta, o);
        if (c.ok()) {
            ADD_FAILURE() << "committed " << c.value() << "; expected: " << want;
        } else {
            EXPECT_NE(c.error().find(want), std::string::npos) << c.error();
        }
    };
    shard(1, 0, 1);
    refused(0, meta_for(1, 1), "commit: writers 0: expected 1..1048576");
    refused(1, meta_for(1, kMaxWriters + 1), "commit: world size 1048577: expected 0..1048576");
    Meta long_layout = meta_for(1, 1);
    long_layout.unit_layout.assign(256, 'u');
    refused(1, long_layout, "commit: unit layout longer than 255 bytes");
    refused(1, meta_for(9, 1), ".step-0000000009.partial-0 does not exist; did every rank's ShardWriter::finish() succeed?");

    // Left over from a commit that failed after writing its index, and from a writer that died
    // before its rename: cleared, not part of the checkpoint.
    const std::string partial = root + "/.step-0000000001.partial-0";
    ASSERT_TRUE(fsio::write_file(partial + "/index.h5", "half an index").ok());
    ASSERT_TRUE(fsio::write_file(partial + "/shard-00000.h5.tmp-123", "half a shard").ok());
    // Something else is not.
    ASSERT_TRUE(fsio::write_file(partial + "/notes.txt", "mine").ok());
    refused(1, meta_for(1, 1), partial + "/notes.txt is not one of the 1 expected shard files");
    ASSERT_TRUE(fsio::remove_file(partial + "/notes.txt").ok());
    auto c1 = commit(root, 1, meta_for(1, 1));
    ASSERT_TRUE(c1.ok()) << c1.error();
    EXPECT_TRUE(verify(c1.value()).value().ok());
    EXPECT_FALSE(fsio::exists(c1.value() + "/shard-00000.h5.tmp-123"));

    // A second attempt at a step that is committed already.
    shard(1, 0, 1, "retry");
    CommitOptions retry;
    retry.attempt = "retry";
    refused(1, meta_for(1, 1), root + "/step-0000000001 already exists", retry);

    // A shard of another step copied in under this step's name.
    shard(2, 0, 2);
    shard(3, 0, 2);
    shard(3, 1, 2);
    ASSERT_TRUE(fsio::write_file(root + "/.step-0000000002.partial-0/shard-00001.h5",
                                 read_all_bytes(root + "/.step-0000000003.partial-0/shard-00001.h5")).ok());
    refused(2, meta_for(2, 2), "belongs to rank 1, step 3, attempt '0'; expected rank 1, step 2, attempt '0'");

    // Two writers adding the state of the same rank.
    {
        shard(4, 0, 2);
        auto sw = ShardWriter::open(root, 4, 1);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {2}, {2}, data.data()).ok());
        RankState rs;
        rs.rank = 0;
        ASSERT_TRUE(sw.value()->add_rank_state(rs).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
        refused(2, meta_for(4, 2), "commit: rank state of rank 0 was added by more than one writer");
    }

    // A base file removed (by hand, or by a careless gc) between the write and the commit.
    const std::string base = c1.value();
    shard(5, 0, 1, "0", base, Change::unchanged);
    ASSERT_TRUE(fsio::remove_file(base + "/shard-00000.h5").ok());
    refused(1, meta_for(5, 1), "tensor x: source file " + root + "/.step-0000000005.partial-0/../step-0000000001/shard-00000.h5 does not exist");

    auto l = list(root);
    ASSERT_TRUE(l.ok());
    for (const auto &e : l.value()) EXPECT_EQ(e.complete, e.path == c1.value()) << e.path;
}

TEST(Writer, ValidatesNamesSlicesAndAbandonsCleanly) {
    TempDir d;
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    const float f[4] = {1, 2, 3, 4};
    for (const char *bad : {"", "/a", "a/", "a//b", "a/../b", "a b", "a\nb", "..", "a/./b"}) {
        auto st = sw.value()->add_tensor(bad, DType::fp32, {4}, {0}, {4}, f);
        EXPECT_FALSE(st.ok()) << "accepted '" << bad << "'";
    }
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {4}, {2}, {3}, f).ok());
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {0}, {0}, {0}, f).ok());
    EXPECT_FALSE(sw.value()->add_tensor("x", DType::fp32, {4, 4}, {0}, {4}, f).ok());
    ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
    auto dup = sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, f);
    EXPECT_FALSE(dup.ok());
    EXPECT_NE(dup.error().find("added twice"), std::string::npos);
    EXPECT_FALSE(ShardWriter::open(d / "root", 1, 0, WriterOptions{"bad attempt", "", true}).ok());
    auto null_data = sw.value()->add_tensor("y", DType::fp32, {4}, {0}, {4}, nullptr);
    EXPECT_EQ(null_data.error(), "tensor y: data is null");
    EXPECT_TRUE(sw.value()->add_tensor("y", DType::fp32, {4}, {0}, {4}, f).ok());   // not taken by the failure
    RankState rs;
    rs.rank = kMaxWriters;
    EXPECT_EQ(sw.value()->add_rank_state(rs).error(), "rank state: rank 1048576 out of range");
    rs.rank = 3;
    EXPECT_TRUE(sw.value()->add_rank_state(rs).ok());
    EXPECT_EQ(sw.value()->add_rank_state(rs).error(), "rank state of rank 3 added twice");
    EXPECT_FALSE(ShardWriter::open(d / "root", 1, kMaxWriters).ok());
    sw.value().reset();   // abandoned: no temporary file may remain
    auto names = fsio::list_dir(d / "root/.step-0000000001.partial-0");
    ASSERT_TRUE(names.ok());
    EXPECT_TRUE(names.value().empty());
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

// Free text in the metadata (the unit layout, the scheduler's kind) is JSON-escaped in the
// index and read back as it was: quotes, backslashes and UTF-8.
TEST(Manifest, FreeTextRoundTripsThroughTheIndex) {
    TempDir d;
    const std::string root = d / "root";
    const float f[2] = {1, 2};
    auto sw = ShardWriter::open(root, 1, 0);
    ASSERT_TRUE(sw.ok());
    ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {2}, {0}, {2}, f).ok());
    ASSERT_TRUE(sw.value()->finish().ok());
    Meta m = meta_for(1, 1);
    m.unit_layout = "4@pcie \"a\" \\ b/c \xc3\xa9t\xc3\xa9";
    m.lr.kind = "cos\"ine";
    auto c = commit(root, 1, m);
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value()->manifest().meta.unit_layout, m.unit_layout);
    EXPECT_EQ(r.value()->manifest().meta.lr.kind, m.lr.kind);
}

// An index of another format version is refused by name, not misread.
TEST(Manifest, AnotherFormatVersionIsRefused) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 1, {{"x", DType::fp32, {4}, 1}});
    const std::string index = ck + "/index.h5";
    hid_t f = H5Fopen(index.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t a = H5Aopen(f, kVersionAttr, H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const std::uint64_t two = 2;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT64, &two), 0);
    H5Aclose(a);
    ASSERT_GE(H5Fclose(f), 0);
    auto r = Reader::open(ck);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), index + ": format version 2 is not supported; this omni-ckpt reads version 1");
    auto v = verify(ck);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error(), r.error());
}

TEST(Manifest, ParserRejectsHostileInput) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, {{"w", DType::fp32, {4}, 1}});
    auto m = Reader::open(ck).value()->manifest();
    const std::string good = manifest_to_json(m);
    ASSERT_TRUE(parse_manifest(good).ok());
    auto mutate = [&](const std::string &from, const std::string &to) {
        std::string s = good;
        const auto pos = s.find(from);
        EXPECT_NE(pos, std::string::npos) << from;
        return s.replace(pos, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"\"format_version\":1", "\"format_version\":2"},
        {"\"file\":\"shard-00000.h5\"", "\"file\":\"../../etc/passwd\""},
        {"\"file\":\"shard-00000.h5\"", "\"file\":\"/abs/shard-00000.h5\""},
        {"\"writers\":2", "\"writers\":1"},
        {"\"shape\":[4]", "\"shape\":[5]"},
        {"\"shape\":[4]", "\"shape\":[0]"},
        {"\"dtype\":\"fp32\"", "\"dtype\":\"fp64\""},
        {"\"name\":\"w\"", "\"name\":\"../w\""},
        {"\"dataset\":\"/t/w\"", "\"dataset\":\"/t/x\""},
        {"\"offset\":[0]", "\"offset\":[-1]"},
    };
    for (const auto &[from, to] : cases) {
        auto r = parse_manifest(mutate(from, to));
        EXPECT_FALSE(r.ok()) << "accepted " << to;
    }
    EXPECT_FALSE(parse_manifest("").ok());
    EXPECT_FALSE(parse_manifest("[]").ok());
    EXPECT_FALSE(parse_manifest(std::string(100000, '[')).ok());
    EXPECT_NE(parse_manifest(mutate("\"format_version\":1", "\"format_version\":2")).error().find("version 2"),
              std::string::npos);
}

// The streaming parser (manifest_parse.cc): keys it does not know are skipped with whatever
// they hold, a known key given twice is refused, and each problem is reported where it is.
TEST(Manifest, ParserSkipsUnknownKeysRefusesRepeatedOnesAndSaysWhere) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, {{"w", DType::fp32, {4}, 1}, {"b", DType::int64, {3, 2}, 2}});
    const Manifest m = Reader::open(ck).value()->manifest();
    const std::string good = manifest_to_json(m);
    auto insert_after = [&](const std::string &s, const std::string &at, const std::string &what) {
        const auto pos = s.find(at);
        EXPECT_NE(pos, std::string::npos) << at;
        return pos == std::string::npos ? s : s.substr(0, pos + at.size()) + what + s.substr(pos + at.size());
    };
    // Unknown keys at every level, holding scalars, objects and arrays nested deeply.
    const std::string deep = std::string(5000, '[') + "{\"step\":\"not this one\"}" + std::string(5000, ']');
    std::string extra = insert_after(good, "{", "\"future\":{\"a\":[1,{\"b\":null,\"step\":-1}],\"c\":\"x\"},\"deep\":" + deep + ",");
    extra = insert_after(extra, "\"sources\":[{", "\"hint\":[true,false,1.5],");
    extra = insert_after(extra, "\"lr_scheduler\":{", "\"note\":\"warm\",");
    auto parsed = parse_manifest(extra);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(manifest_to_json(parsed.value()), good);

    auto error_of = [](const omni::Result<Manifest> &r) { return r.ok() ? std::string("accepted") : r.error(); };
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "{", "\"step\":5,"))), "manifest: 'step': given twice");
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "\"sources\":[{", "\"file\":\"shard-00000.h5\","))),
              "manifest.tensors[0].sources[0]: 'file': given twice");
    std::string bad_offset = good;   // the offset of the second slice of the first tensor
    const auto off = bad_offset.find("\"offset\":[", bad_offset.find("\"offset\":[") + 1);
    ASSERT_NE(off, std::string::npos);
    bad_offset.insert(off + 10, "\"x\",");
    EXPECT_EQ(error_of(parse_manifest(bad_offset)), "manifest.tensors[0].sources[1]: 'offset': expected unsigned integers");
    std::string nine = good;
    nine.replace(nine.find("\"shape\":["), 9, "\"shape\":[1,1,1,1,1,1,1,1,");
    EXPECT_EQ(error_of(parse_manifest(nine)), "manifest.tensors[0]: 'shape': expected an array of 1..8 unsigned integers");
    std::string lr_array = good;
    lr_array.replace(lr_array.find("\"lr_scheduler\":{"), 16, "\"lr_scheduler\":[],\"x\":{");
    EXPECT_EQ(error_of(parse_manifest(lr_array)), "manifest.lr_scheduler: expected a JSON object");
    // data_offset may be left out (the slice is then read through HDF5), and is checked
    // when given.
    const auto place = good.find("\"data_offset\":");
    ASSERT_NE(place, std::string::npos);
    const auto place_end = good.find(',', place);
    std::string unplaced = good;
    unplaced.erase(place, place_end + 1 - place);
    auto without = parse_manifest(unplaced);
    ASSERT_TRUE(without.ok()) << without.error();
    EXPECT_EQ(without.value().tensors[0].sources[0].data_offset, 0u);
    EXPECT_NE(m.tensors[0].sources[0].data_offset, 0u);
    std::string text_place = good;
    text_place.replace(place, place_end - place, "\"data_offset\":\"64\"");
    EXPECT_EQ(error_of(parse_manifest(text_place)),
              "manifest.tensors[0].sources[0]: 'data_offset': expected an unsigned integer");
    std::string far_place = good;
    far_place.replace(place, place_end - place, "\"data_offset\":9223372036854775808");
    EXPECT_EQ(error_of(parse_manifest(far_place)),
              "manifest.tensors[0].sources[0]: 'data_offset': exceeds 4611686018427387904");
    std::string no_writer = good;
    no_writer.erase(no_writer.find("\"writer\":0,"), 11);
    EXPECT_EQ(error_of(parse_manifest(no_writer)), "manifest.tensors[0].sources[0]: missing key 'writer'");

    // A truncated manifest is not JSON, whatever its start looks like; a manifest of another
    // format version says so, even when the rest of it is not this version's.
    EXPECT_EQ(error_of(parse_manifest(good.substr(0, good.size() / 2))), "manifest: not valid JSON");
    EXPECT_EQ(error_of(parse_manifest(insert_after(good, "{", "\"step\":5,").substr(0, good.size() / 2))),
              "manifest: not valid JSON");
    std::string v2 = good;
    v2.replace(v2.find("\"format_version\":1"), 18, "\"format_version\":2");
    v2.replace(v2.find("\"tensors\":["), 11, "\"tensors\":\"elsewhere\",\"t\":[");
    EXPECT_NE(error_of(parse_manifest(v2)).find("format version 2 is not supported"), std::string::npos)
        << error_of(parse_manifest(v2));

    // The same parser reads a shard's manifest.
    ShardManifest s;
    s.step = 3;
    s.rank = 1;
    s.attempt = "0";
    s.tensors = {m.tensors[0]};
    s.tensors[0].sources = {m.tensors[0].sources[1]};
    const std::string shard = shard_manifest_to_json(s);
    auto sp = parse_shard_manifest(insert_after(shard, "{", "\"later\":[{}],"));
    ASSERT_TRUE(sp.ok()) << sp.error();
    EXPECT_EQ(shard_manifest_to_json(sp.value()), shard);
    auto twice = parse_shard_manifest(insert_after(shard, "{", "\"rank\":1,"));
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.error(), "shard manifest: 'rank': given twice");
}

namespace {

// A partial checkpoint of step `step` with two ranks: rank 0 writes all of tensor "x", rank 1
// no slice, only its rank state (so it finishes with shard-00001.ref). Returns that state.
RankState two_ranks_one_without_data(const std::string &root, std::uint64_t step) {
    const std::vector<float> data(4, 2.5f);
    RankState rs;
    rs.rank = 1;
    rs.rng = {7, 0, 255, 1};
    for (std::int64_t i = 0; i < 1000; ++i) rs.consumed.push_back(i * 3 - 5);   // negatives too
    for (std::uint32_t w = 0; w < 2; ++w) {
        auto sw = ShardWriter::open(root, step, w);
        EXPECT_TRUE(sw.ok()) << sw.error();
        if (!sw.ok()) return rs;
        if (w == 0) EXPECT_TRUE(sw.value()->add_tensor("x", DType::fp32, {4}, {0}, {4}, data.data()).ok());
        else EXPECT_TRUE(sw.value()->add_rank_state(rs).ok());
        auto st = sw.value()->finish();
        EXPECT_TRUE(st.ok()) << st.error();
    }
    return rs;
}

}  // namespace

// The rank states of a reference shard reach the index, whether commit takes them from the
// writer of this process or, once the file has changed identity, reads them from the file.
TEST(RefShard, RankStatesReachTheIndexFromMemoryAndFromTheFile) {
    TempDir d;
    const std::string root = d / "root";
    for (std::uint64_t step : {1, 2}) {
        const RankState want = two_ranks_one_without_data(root, step);
        const std::string ref = root + "/" + partial_dir_name(step, "0") + "/shard-00001.ref";
        ASSERT_TRUE(fsio::exists(ref));
        ASSERT_FALSE(fsio::exists(root + "/" + partial_dir_name(step, "0") + "/shard-00001.h5"));
        if (step == 2) {
            // Same bytes, new identity (another inode): commit must read and check the file.
            const std::string bytes = read_all_bytes(ref);
            ASSERT_TRUE(fsio::remove_file(ref).ok());
            ASSERT_TRUE(fsio::write_file(ref, bytes).ok());
        }
        auto c = commit(root, 2, meta_for(step, 2));
        ASSERT_TRUE(c.ok()) << c.error();
        auto r = Reader::open(c.value());
        ASSERT_TRUE(r.ok()) << r.error();
        auto got = r.value()->rank_state(1);
        ASSERT_TRUE(got.ok()) << got.error();
        EXPECT_EQ(got.value().rng, want.rng) << "step " << step;
        EXPECT_EQ(got.value().consumed, want.consumed) << "step " << step;
    }
}

// The same for an HDF5 shard: its rank states reach the index from the writer of this
// process, or from the file once it has changed identity, where a damaged state is refused
// with the file named.
TEST(Commit, RankStatesOfHdf5ShardsFromMemoryAndFromTheFile) {
    TempDir d;
    const std::string root = d / "root";
    RankState want;
    want.rank = 0;
    want.rng = {1, 2, 3, 250};
    for (std::int64_t i = 0; i < 300; ++i) want.consumed.push_back(7 * i - 11);
    auto write = [&](std::uint64_t step) {
        const std::vector<float> data(6, 0.5f);
        auto sw = ShardWriter::open(root, step, 0);
        ASSERT_TRUE(sw.ok()) << sw.error();
        ASSERT_TRUE(sw.value()->add_tensor("x", DType::fp32, {6}, {0}, {6}, data.data()).ok());
        ASSERT_TRUE(sw.value()->add_rank_state(want).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    };
    auto shard = [&](std::uint64_t step) { return root + "/" + partial_dir_name(step, "0") + "/shard-00000.h5"; };
    auto renew = [&](const std::string &path) {   // same bytes, another inode
        const std::string bytes = read_all_bytes(path);
        ASSERT_TRUE(fsio::remove_file(path).ok());
        ASSERT_TRUE(fsio::write_file(path, bytes).ok());
    };
    for (std::uint64_t step : {1, 2}) {
        write(step);
        if (step == 2) renew(shard(step));
        auto c = commit(root, 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
        auto got = Reader::open(c.value()).value()->rank_state(0);
        ASSERT_TRUE(got.ok()) << got.error();
        EXPECT_EQ(got.value().rng, want.rng) << "step " << step;
        EXPECT_EQ(got.value().consumed, want.consumed) << "step " << step;
    }
    // One consumed index changed in the file: the commit reads it and refuses it.
    write(3);
    {
        hid_t f = H5Fopen(shard(3).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        hid_t ds = H5Dopen2(f, "/state/rank-00000/consumed", H5P_DEFAULT);
        ASSERT_GE(ds, 0);
        std::vector<std::int64_t> v(want.consumed);
        v[42] += 1;
        EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
        H5Dclose(ds);
        H5Fclose(f);
    }
    renew(shard(3));
    auto c = commit(root, 1, meta_for(3, 1));
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("shard-00000.h5: rank state of rank 0: checksum mismatch"), std::string::npos) << c.error();
}

// A manifest may claim rank states of up to 2^40 consumed indices: one claiming more than
// its file holds is refused before anything is allocated for it (a hostile index must not
// make a load try to allocate terabytes), by rank_state() and by verify(): whether the
// dataset has another extent, or that extent with no storage behind it.
TEST(Load, RankStateLargerThanItsFileIsRefused) {
    TempDir d;
    const std::string ck = write_ckpt(d / "root", 1, 2, {{"w", DType::fp32, {4}, 1}});
    std::string text = manifest_to_json(Reader::open(ck).value()->manifest());
    const auto at = text.find("\"consumed\":2,");
    ASSERT_NE(at, std::string::npos) << text;
    const std::uint64_t huge = (std::uint64_t(1) << 40) - 1;
    text.replace(at, 13, "\"consumed\":" + std::to_string(huge) + ",");
    ASSERT_TRUE(parse_manifest(text).ok());   // within the format's bounds
    auto rewrite = [&](bool empty_dataset) {
        hid_t f = H5Fopen((ck + "/index.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        ASSERT_GE(H5Ldelete(f, "manifest", H5P_DEFAULT), 0);
        ASSERT_TRUE(omni::ckpt::h5::write_string_dataset(f, "manifest", text).ok());
        if (empty_dataset) {   // that extent, chunked, no chunk ever written
            ASSERT_GE(H5Ldelete(f, "/state/rank-00000/consumed", H5P_DEFAULT), 0);
            const hsize_t dims[1] = {huge}, chunk[1] = {4096};
            hid_t space = H5Screate_simple(1, dims, nullptr);
            hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
            ASSERT_GE(H5Pset_chunk(dcpl, 1, chunk), 0);
            hid_t ds = H5Dcreate2(f, "/state/rank-00000/consumed", H5T_STD_I64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            ASSERT_GE(ds, 0);
            H5Dclose(ds);
            H5Pclose(dcpl);
            H5Sclose(space);
        }
        H5Fclose(f);
    };
    for (bool empty_dataset : {false, true}) {
        rewrite(empty_dataset);
        auto r = Reader::open(ck);
        ASSERT_TRUE(r.ok()) << r.error();
        auto rs = r.value()->rank_state(0);
        ASSERT_FALSE(rs.ok());
        const std::string want = empty_dataset ? std::to_string(huge) + " elements in 0 bytes of storage"
                                               : "expected " + std::to_string(huge) + " elements";
        EXPECT_NE(rs.error().find("rank state of rank 0: /state/rank-00000/consumed: " + want), std::string::npos)
            << rs.error();
        auto v = verify(ck);
        ASSERT_TRUE(v.ok()) << v.error();
        EXPECT_FALSE(v.value().issues.empty());
    }
}

// A damaged reference shard, or a rank that left both kinds of shard, fails the commit with
// the file named; putting the right file back lets the same commit succeed (nothing lost).
TEST(RefShard, CommitRefusesDamagedAndDuplicateShards) {
    TempDir d;
    const std::string root = d / "root";
    (void)two_ranks_one_without_data(root, 1);
    const std::string dir = root + "/" + partial_dir_name(1, "0");
    const std::string ref = dir + "/shard-00001.ref";
    const std::string good = read_all_bytes(ref);
    ASSERT_GT(good.size(), 100u);
    auto commit_with = [&](const std::string &bytes) {
        EXPECT_TRUE(fsio::remove_file(ref).ok());
        EXPECT_TRUE(fsio::write_file(ref, bytes).ok());
        auto c = commit(root, 2, meta_for(1, 2));
        return c.ok() ? std::string() : c.error();
    };
    std::string flipped = good;
    flipped[40] ^= 0x20;   // inside the manifest
    std::string e = commit_with(flipped);
    EXPECT_NE(e.find("shard-00001.ref"), std::string::npos) << e;
    EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
    e = commit_with(good.substr(0, good.size() - 9));
    EXPECT_NE(e.find("shard-00001.ref: lengths do not match"), std::string::npos) << e;
    e = commit_with("");
    EXPECT_NE(e.find("not a reference shard"), std::string::npos) << e;

    // A rank state whose bytes are not what its manifest entry says: a consistent file
    // (trailer right) with one consumed index changed.
    auto parsed = parse_ref_shard(good);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    ShardRecord bad = parsed.value();
    bad.states[0].consumed[10] += 1;
    e = commit_with(encode_ref_shard(bad.manifest, bad.states));
    EXPECT_NE(e.find("shard-00001.ref: rank state of rank 1: checksum mismatch"), std::string::npos) << e;

    // Rank 1 also left an HDF5 shard (a writer run twice).
    {
        const std::vector<float> one(1, 1.0f);
        auto sw = ShardWriter::open(root, 1, 1);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(fsio::rename_path(ref, ref + ".keep").ok());   // the writer would replace it
        ASSERT_TRUE(sw.value()->add_tensor("y", DType::fp32, {1}, {0}, {1}, one.data()).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
        ASSERT_TRUE(fsio::rename_path(ref + ".keep", ref).ok());
    }
    e = commit_with(good);
    EXPECT_NE(e.find("shard-00001.ref both exist; rank 1 finished twice"), std::string::npos) << e;
    ASSERT_TRUE(fsio::remove_file(dir + "/shard-00001.h5").ok());
    EXPECT_EQ(commit_with(good), "");
    EXPECT_TRUE(Reader::open_latest(root).ok());
}

TEST(RefShard, ParserRejectsHostileInput) {
    ShardManifest m;
    m.step = 9;
    m.rank = 3;
    m.attempt = "g1";
    RankState a, b;
    a.rank = 3;
    a.rng = {1, 2, 3};
    a.consumed = {-1, 0, std::numeric_limits<std::int64_t>::max()};
    b.rank = 4;   // a writer may carry other ranks' states
    b.consumed = {5};
    for (const RankState *s : {&a, &b}) {
        RankStateInfo info;
        info.rank = s->rank;
        info.rng_bytes = s->rng.size();
        info.consumed = s->consumed.size();
        m.rank_states.push_back(info);
    }
    const std::string good = encode_ref_shard(m, {a, b});
    auto p = parse_ref_shard(good);
    ASSERT_TRUE(p.ok()) << p.error();
    ASSERT_EQ(p.value().states.size(), 2u);
    EXPECT_EQ(p.value().manifest.rank, 3u);
    EXPECT_EQ(p.value().states[0].rng, a.rng);
    EXPECT_EQ(p.value().states[0].consumed, a.consumed);
    EXPECT_EQ(p.value().states[1].consumed, b.consumed);
    // Every truncation, and every single-byte change, is refused.
    for (std::size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(parse_ref_shard(good.substr(0, n)).ok()) << n;
    for (std::size_t i = 0; i < good.size(); ++i) {
        std::string s = good;
        s[i] ^= 0x01;
        EXPECT_FALSE(parse_ref_shard(s).ok()) << "byte " << i;
    }
    // Consistent files (trailer recomputed) whose contents lie.
    auto resealed = [](std::string s) {
        s.resize(s.size() - 8);
        const std::uint64_t h = xxh3(s.data(), s.size());
        for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
        return s;
    };
    auto put = [](std::string s, std::size_t at, std::uint64_t v) {
        for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
        return s;
    };
    auto e = parse_ref_shard(resealed(put(good, 8, 2)));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("format version 2"), std::string::npos) << e.error();
    e = parse_ref_shard(resealed(put(good, 16, std::uint64_t(1) << 62)));   // manifest length
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("lengths do not match"), std::string::npos) << e.error();
    ShardManifest more = m;
    more.rank_states[1].consumed = 2;   // says 16 bytes; 8 are stored
    e = parse_ref_shard(encode_ref_shard(more, {a, b}));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("do not add up"), std::string::npos) << e.error();
    more.rank_states[1].consumed = std::uint64_t(1) << 61;   // 8 * this overflows
    EXPECT_FALSE(parse_ref_shard(encode_ref_shard(more, {a, b})).ok());
    // Names.
    EXPECT_EQ(ref_shard_file_name(3), "shard-00003.ref");
    EXPECT_TRUE(is_ref_shard_file_name("shard-1234567.ref"));
    for (const char *bad_name : {"shard-0003.ref", "shard-12345678.ref", "shard-00003.h5", "shard-0000a.ref",
                                 "shard-00003.ref.tmp"})
        EXPECT_FALSE(is_ref_shard_file_name(bad_name)) << bad_name;
}

// What a process remembers of the shards it wrote is bounded in entries and bytes, oldest
// forgotten first, so a rank whose commits run elsewhere does not grow with the job.
TEST(BoundedMap, ForgetsOldestBeyondEntriesOrBytes) {
    BoundedMap<int, std::string> m(3, 100);
    m.put(1, "a", 10);
    m.put(2, "b", 10);
    m.put(3, "c", 10);
    m.put(4, "d", 10);   // four entries: 1 goes
    EXPECT_EQ(m.find(1), nullptr);
    ASSERT_NE(m.find(2), nullptr);
    EXPECT_EQ(*m.find(2), "b");
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(m.bytes(), 30u);
    m.put(2, "B", 10);   // replaced: now the newest
    m.put(5, "e", 75);   // 105 bytes: the oldest (3) goes, then 95 remain with 4, 2, 5
    EXPECT_EQ(m.find(3), nullptr);
    ASSERT_NE(m.find(2), nullptr);
    EXPECT_EQ(*m.find(2), "B");
    EXPECT_EQ(m.bytes(), 95u);
    auto t = m.take(4);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(*t, "d");
    EXPECT_FALSE(m.take(4).has_value());
    EXPECT_EQ(m.bytes(), 85u);
    m.put(6, "huge", 101);   // larger than the budget: everything goes, itself included
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.bytes(), 0u);
    // Entries taken or replaced leave nothing behind: many rounds stay within bounds.
    for (int i = 0; i < 10000; ++i) {
        m.put(i % 7, std::to_string(i), 1);
        if (i % 3 == 0) (void)m.take((i + 1) % 7);
    }
    EXPECT_LE(m.size(), 3u);
    EXPECT_EQ(m.bytes(), m.size());
}

TEST(Hash, DispatchAndStreamingEqualPlainXxh3) {
    // The format fixes XXH3-64 of the bytes: whatever code path computes it must agree.
    std::vector<char> buf(5 << 20);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 131 + (i >> 9));
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(240), std::size_t(4097), buf.size()}) {
        EXPECT_EQ(xxh3(buf.data(), n), XXH3_64bits(buf.data(), n)) << n;
        Hasher h;
        for (std::size_t off = 0; off < n; off += 1000003) h.update(buf.data() + off, std::min<std::size_t>(1000003, n - off));
        EXPECT_EQ(h.digest(), XXH3_64bits(buf.data(), n)) << n;
    }
}

TEST(Format, Names) {
    EXPECT_EQ(step_dir_name(100), "step-0000000100");
    EXPECT_EQ(parse_step_dir_name("step-0000000100").value(), 100u);
    EXPECT_FALSE(parse_step_dir_name("step-1").has_value());
    EXPECT_FALSE(parse_step_dir_name("step-00000001x0").has_value());
    EXPECT_EQ(parse_partial_dir_name(".step-0000000100.partial-g3").value(), 100u);
    EXPECT_FALSE(parse_partial_dir_name(".step-0000000100.partial-").has_value());
    EXPECT_EQ(rebase_file_ref("shard-00001.h5", "step-0000000090"), "../step-0000000090/shard-00001.h5");
    EXPECT_EQ(rebase_file_ref("../step-0000000080/shard-00001.h5", "step-0000000090"),
              "../step-0000000080/shard-00001.h5");
    EXPECT_TRUE(check_file_ref("../merged-a/shard-1234567.h5").ok());
    EXPECT_FALSE(check_file_ref("../../x/shard-00001.h5").ok());
    EXPECT_FALSE(check_file_ref("../.hidden/shard-00001.h5").ok());
}

// What a writer is given is checked at the call, before the name is taken, and a refused
// slice leaves the writer usable: a byte size that does not fit (2^62 fp32 elements would be
// 2^64 bytes, wrapping to 0), a value that is not a DType, a tensor name on the path of
// another ("x" and "x/y": HDF5 would need "x" as a dataset and a group). Until these were
// checked, HDF5 refused them deep in the writer, which then failed for good; the asynchronous
// writer reported them only at wait().
namespace {
void expect_refused(const omni::Status &st, const std::string &start, const std::string &has) {
    ASSERT_FALSE(st.ok()) << "accepted; expected '" << start << "...'";
    EXPECT_EQ(st.error().rfind(start, 0), 0u) << st.error();
    EXPECT_NE(st.error().find(has), std::string::npos) << st.error();
}
}  // namespace

TEST(WriterValidation, SizeOverflowAndBadDtypeRefusedByNameWriterGoesOn) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    const std::uint64_t e62 = std::uint64_t(1) << 62, e61 = std::uint64_t(1) << 61;
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    ShardWriter &w = *sw.value();
    expect_refused(w.add_tensor("big", DType::fp32, {e62}, {0}, {e62}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::int64, {e61}, {0}, {e61}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::fp32, {e62}, {0}, {4}, f), "tensor big: shape", "2^62 bytes");
    expect_refused(w.add_tensor("big", DType::bf16, {2, e61}, {0, 0}, {1, e61}, f), "tensor big: ", "2^62 bytes");
    expect_refused(w.add_tensor("bad", static_cast<DType>(9), {4}, {0}, {4}, f), "tensor bad: dtype 9", "fp32");
    ASSERT_TRUE(w.add_tensor("big", DType::fp32, {4}, {0}, {4}, f).ok());   // names not taken,
    auto st = w.add_tensor("bad", DType::fp32, {4}, {0}, {4}, f);            // writer not failed
    ASSERT_TRUE(st.ok()) << st.error();
    RankState rs;
    rs.rank = 0;
    ASSERT_TRUE(w.add_rank_state(rs).ok());
    st = w.finish();
    ASSERT_TRUE(st.ok()) << st.error();
    auto c = commit(d / "root", 1, meta_for(1, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    float out[4] = {};
    ASSERT_TRUE(r.value()->read_all("bad", out, sizeof out).ok());
    EXPECT_EQ(out[3], 4.0f);
}

TEST(WriterValidation, AsyncRefusesOverflowBadDtypeAndRankAtTheCall) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    const std::uint64_t e62 = std::uint64_t(1) << 62;
    for (Snapshot mode : {Snapshot::copy, Snapshot::copy_on_write}) {
        const std::uint64_t step = mode == Snapshot::copy ? 1 : 2;
        AsyncShardWriter a(mode);
        ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
        expect_refused(a.add_tensor("big", DType::fp32, {e62}, {0}, {e62}, f), "tensor big: ", "2^62 bytes");
        expect_refused(a.add_tensor("big", DType::fp32, {e62}, {0}, {4}, f), "tensor big: shape", "2^62 bytes");
        expect_refused(a.add_tensor("bad", static_cast<DType>(9), {4}, {0}, {4}, f), "tensor bad: dtype 9", "fp32");
        RankState rs;
        rs.rank = 0xffffffffu;
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state: rank 4294967295 out of range");
        rs.rank = kMaxWriters;
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state: rank 1048576 out of range");
        rs.rank = 0;
        ASSERT_TRUE(a.add_rank_state(rs).ok());
        EXPECT_EQ(a.add_rank_state(rs).error(), "rank state of rank 0 added twice");
        ASSERT_TRUE(a.add_tensor("big", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(a.add_tensor("bad", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(a.submit().ok());
        auto st = a.wait();
        ASSERT_TRUE(st.ok()) << st.error();
        auto c = commit(d / "root", 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
    }
}

TEST(WriterValidation, NameOnThePathOfAnotherRefusedBothOrdersWriterGoesOn) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    auto sw = ShardWriter::open(d / "root", 1, 0);
    ASSERT_TRUE(sw.ok());
    ShardWriter &w = *sw.value();
    ASSERT_TRUE(w.add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
    expect_refused(w.add_tensor("x/y", DType::fp32, {4}, {0}, {4}, f), "tensor x/y: conflicts with tensor x ", "prefix");
    expect_refused(w.add_tensor("x/y/z", DType::fp32, {4}, {0}, {4}, f), "tensor x/y/z: conflicts with tensor x ", "rank 0");
    ASSERT_TRUE(w.add_tensor("a/b/c", DType::fp32, {4}, {0}, {4}, f).ok());
    expect_refused(w.add_tensor("a/b", DType::fp32, {4}, {0}, {4}, f), "tensor a/b: conflicts with tensor a/b/c ", "prefix");
    expect_refused(w.add_tensor("a", DType::fp32, {4}, {0}, {4}, f), "tensor a: conflicts with tensor a/b/c ", "prefix");
    // Not on each other's path.
    for (const char *ok : {"x.y", "xy", "x_/y", "a/bc", "a/b.c", "a/b/cd", "a/c"}) {
        auto st = w.add_tensor(ok, DType::fp32, {4}, {0}, {4}, f);
        EXPECT_TRUE(st.ok()) << ok << ": " << st.error();
    }
    ASSERT_TRUE(w.finish().ok());
    auto c = commit(d / "root", 1, meta_for(1, 1));
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok()) << r.error();
    float out[4] = {};
    for (const char *name : {"x", "a/b/c", "a/b/cd", "x_/y"}) {
        ASSERT_TRUE(r.value()->read_all(name, out, sizeof out).ok()) << name;
        EXPECT_EQ(out[2], 3.0f);
    }
}

TEST(WriterValidation, AsyncRefusesDuplicateAndPathConflictAtTheCall) {
    TempDir d;
    const float f[4] = {1, 2, 3, 4};
    AsyncShardWriter a;
    for (std::uint64_t step : {1, 2}) {   // names are per checkpoint
        ASSERT_TRUE(a.begin(d / "root", step, 0).ok());
        ASSERT_TRUE(a.add_tensor("x", DType::fp32, {4}, {0}, {4}, f).ok());
        expect_refused(a.add_tensor("x", DType::fp32, {4}, {0}, {4}, f), "tensor x: added twice", "rank 0");
        expect_refused(a.add_tensor("x/y", DType::fp32, {4}, {0}, {4}, f), "tensor x/y: conflicts with tensor x ", "prefix");
        ASSERT_TRUE(a.add_tensor("p/q", DType::fp32, {4}, {0}, {4}, f).ok());
        expect_refused(a.add_tensor("p", DType::fp32, {4}, {0}, {4}, f), "tensor p: conflicts with tensor p/q ", "prefix");
        expect_refused(a.add_tensor("y", DType::fp32, {4}, {0}, {4}, nullptr), "tensor y: data is null", "");
        ASSERT_TRUE(a.add_tensor("y", DType::fp32, {4}, {0}, {4}, f).ok());   // not taken by the failure
        ASSERT_TRUE(a.submit().ok());
        auto st = a.wait();
        ASSERT_TRUE(st.ok()) << st.error();
        auto c = commit(d / "root", 1, meta_for(step, 1));
        ASSERT_TRUE(c.ok()) << c.error();
    }
}

// Each rank's names are fine on their own; together "p" and "p/q" cannot be in one index.
// Commit refuses them before it makes any file, naming both tensors and their shards; the
// committed checkpoints stay as they were.
TEST(WriterValidation, CommitRefusesNamesOnEachOthersPathAcrossShards) {
    TempDir d;
    const std::string root = d / "root";
    const std::vector<Spec> specs = {{"w", DType::fp32, {8}, 5}};
    const std::string first = write_ckpt(root, 1, 2, specs);
    ASSERT_FALSE(first.empty());
    const float f[4] = {1, 2, 3, 4};
    for (std::uint32_t rank : {0u, 1u}) {
        auto sw = ShardWriter::open(root, 2, rank);
        ASSERT_TRUE(sw.ok());
        ASSERT_TRUE(sw.value()->add_tensor(rank == 0 ? "p" : "p/q", DType::fp32, {4}, {0}, {4}, f).ok());
        ASSERT_TRUE(sw.value()->finish().ok());
    }
    auto c = commit(root, 2, meta_for(2, 2));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().rfind("commit: tensor p/q in ", 0), 0u) << c.error();
    EXPECT_NE(c.error().find("shard-00001.h5 conflicts with tensor p in "), std::string::npos) << c.error();
    EXPECT_NE(c.error().find("shard-00000.h5"), std::string::npos) << c.error();
    EXPECT_FALSE(fsio::exists(root + "/step-0000000002"));
    EXPECT_FALSE(fsio::exists(root + "/.step-0000000002.partial-0/index.h5"));
    auto r = Reader::open_latest(root);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value()->path(), first);
    expect_logical(*r.value(), specs[0]);
    EXPECT_TRUE(verify(first).value().ok());
}
