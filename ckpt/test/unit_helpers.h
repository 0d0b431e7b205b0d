// Helpers shared by the libomni-ckpt unit tests (ckpt_*_test.cc): checkpoints written with
// many ranks from deterministic tensors, HDF5 probes, a counting filter, peak RSS.
#ifndef OMNI_CKPT_TEST_UNIT_HELPERS_H
#define OMNI_CKPT_TEST_UNIT_HELPERS_H

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

namespace omni::ckpt::test {

using namespace omni::ckpt;
namespace t = ::omni::ckpt::test;


struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
    std::uint64_t seed;
};

inline Meta meta_for(std::uint64_t step, std::uint64_t world) {
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
inline std::string write_ckpt(const std::string &root, std::uint64_t step, std::uint32_t writers,
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
inline haddr_t dataset_offset(const std::string &file, const char *dataset) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return HADDR_UNDEF;
    hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
    const haddr_t off = ds < 0 ? HADDR_UNDEF : H5Dget_offset(ds);
    if (ds >= 0) H5Dclose(ds);
    H5Fclose(f);
    return off;
}

inline std::string read_all_bytes(const std::string &path) {
    auto b = fsio::read_file(path, 64 << 20);
    EXPECT_TRUE(b.ok()) << b.error();
    return b.ok() ? b.value() : std::string();
}

// Rewrites `dataset` of `file` chunked by `chunk`, with whatever filters `filters` adds to
// the creation list, as another tool (h5repack) might. `rows`, if not 0: only the first
// `rows` rows are written, so the chunks after them are never stored.
inline void rewrite_chunked(const std::string &file, const char *dataset, std::vector<hsize_t> chunk,
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
inline size_t counting_filter(unsigned flags, size_t, const unsigned[], size_t nbytes, size_t *, void **) {
    if (flags & H5Z_FLAG_REVERSE) ++g_chunk_reads;
    return nbytes;
}
inline void add_counting_filter(hid_t dcpl) {
    static const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, kCountingFilter, 1, 1, "omni test: counts chunk reads",
                                     nullptr, nullptr, counting_filter};
    ASSERT_GE(H5Zregister(&cls), 0);
    ASSERT_GE(H5Pset_filter(dcpl, kCountingFilter, H5Z_FLAG_MANDATORY, 0, nullptr), 0);
}

// The peak resident memory of this process since the last start_peak_rss(), in KiB.
inline long peak_rss_kb() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

// Resets the peak resident size for a test to measure what it allocates from here; returns
// why it cannot, or nullptr.
inline const char *start_peak_rss() {
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

inline void expect_logical(Reader &r, const Spec &s) {
    const auto want = t::logical(s.dtype, s.shape, s.seed);
    std::vector<char> got(want.size());
    auto st = r.read_all(s.name, got.data(), got.size());
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_TRUE(want == got) << "tensor " << s.name << " differs in " << r.path();
}

inline const std::vector<Spec> kMixed = {
    {"model/embed", DType::fp32, {29, 6}, 1},    {"model/blk.0/w", DType::bf16, {17, 4, 3}, 2},
    {"model/blk.0/b", DType::fp16, {13}, 3},     {"optim/step", DType::int64, {1}, 4},
    {"data/mask", DType::uint8, {31, 2}, 5},     {"optim/adam/exp_avg/embed", DType::fp32, {29, 6}, 6},
};


}  // namespace omni::ckpt::test

#endif
