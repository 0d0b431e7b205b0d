// Loads of libomni-ckpt: whole slices, parts of slices checked by their blocks, chunked
// sources, and corruption found wherever it is.
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
            [](hid_t loc, const char *obj, const H5VisitInfo *info, void *op) -> herr_t {
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
