// The C API (omni/ckpt.h): a round trip with two writers, an async writer, resharded reads,
// every dtype, an incremental with hints,
// and error reporting through omni_ckpt_last_error().
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "omni/ckpt.h"

namespace {
// A temporary directory removed at the end of the test.
struct TempDir {
    TempDir() {
        char tmpl[] = "/tmp/omni-ckpt-capi.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string path;
};
}  // namespace

TEST(CApi, TwoWritersCommitAndReadAnySlice) {
    TempDir tmp;
    const std::string root = tmp.path + "/root";
    float data[10];
    for (int i = 0; i < 10; ++i) data[i] = static_cast<float>(i) * 1.5f;
    const uint64_t shape[1] = {10};
    for (uint32_t r = 0; r < 2; ++r) {
        omni_ckpt_writer *w = nullptr;
        ASSERT_EQ(omni_ckpt_writer_open(root.c_str(), 7, r, "g1", nullptr, &w), 0) << omni_ckpt_last_error();
        const uint64_t off[1] = {r * 6u}, cnt[1] = {r ? 4u : 6u};
        ASSERT_EQ(omni_ckpt_writer_add_tensor(w, "p", OMNI_CKPT_FP32, 1, shape, off, cnt, data + off[0],
                                              OMNI_CKPT_DETECT), 0) << omni_ckpt_last_error();
        const int64_t consumed[2] = {r, r + 2};
        ASSERT_EQ(omni_ckpt_writer_add_rank_state(w, r, "seed", 4, consumed, 2), 0);
        ASSERT_EQ(omni_ckpt_writer_finish(w), 0) << omni_ckpt_last_error();
        omni_ckpt_writer_free(w);
    }
    omni_ckpt_meta meta{};
    meta.step = 7;
    meta.world_size = 2;
    meta.lr_kind = "linear";
    meta.lr_base = 0.1;
    char path[4096];
    ASSERT_EQ(omni_ckpt_commit(root.c_str(), 2, "g1", &meta, path, sizeof path), 0) << omni_ckpt_last_error();
    EXPECT_EQ(std::string(path), root + "/step-0000000007");

    omni_ckpt_reader *rd = nullptr;
    ASSERT_EQ(omni_ckpt_reader_open(root.c_str(), 1, 1, &rd), 0) << omni_ckpt_last_error();
    omni_ckpt_meta got{};
    ASSERT_EQ(omni_ckpt_reader_meta(rd, &got), 0);
    EXPECT_EQ(got.step, 7u);
    EXPECT_STREQ(got.lr_kind, "linear");
    ASSERT_EQ(omni_ckpt_reader_tensor_count(rd), 1u);
    const char *name;
    omni_ckpt_dtype dt;
    uint32_t nd;
    uint64_t sh[8];
    ASSERT_EQ(omni_ckpt_reader_tensor_info(rd, 0, &name, &dt, &nd, sh), 0);
    EXPECT_STREQ(name, "p");
    EXPECT_EQ(dt, OMNI_CKPT_FP32);
    EXPECT_EQ(sh[0], 10u);
    float part[5];
    const uint64_t off[1] = {4}, cnt[1] = {5};   // crosses both writers' slices
    ASSERT_EQ(omni_ckpt_reader_read(rd, "p", 1, off, cnt, part, sizeof part), 0) << omni_ckpt_last_error();
    EXPECT_EQ(0, std::memcmp(part, data + 4, sizeof part));
    size_t rng_n = 0, cons_n = 0;
    ASSERT_EQ(omni_ckpt_reader_rank_state(rd, 1, nullptr, &rng_n, nullptr, &cons_n), 0);
    EXPECT_EQ(rng_n, 4u);
    EXPECT_EQ(cons_n, 2u);
    char rng[4];
    int64_t cons[2];
    ASSERT_EQ(omni_ckpt_reader_rank_state(rd, 1, rng, &rng_n, cons, &cons_n), 0);
    EXPECT_EQ(0, std::memcmp(rng, "seed", 4));
    EXPECT_EQ(cons[1], 3);
    // Errors name what was wrong.
    EXPECT_EQ(omni_ckpt_reader_read(rd, "nope", 1, off, cnt, part, sizeof part), OMNI_ENOENT);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("nope"), std::string::npos);
    EXPECT_EQ(omni_ckpt_reader_read(rd, "p", 1, off, cnt, part, 3), OMNI_ERANGE);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("needs 20 bytes"), std::string::npos);
    omni_ckpt_reader_close(rd);
}

TEST(CApi, AsyncWriterAndBadArguments) {
    TempDir tmp;
    const std::string root = tmp.path + "/root";
    omni_ckpt_async *a = nullptr;
    ASSERT_EQ(omni_ckpt_async_create(&a), 0);
    ASSERT_EQ(omni_ckpt_async_begin(a, root.c_str(), 1, 0, nullptr, nullptr), 0) << omni_ckpt_last_error();
    uint16_t half[6] = {1, 2, 3, 4, 5, 6};
    const uint64_t shape[2] = {2, 3}, off[2] = {0, 0};
    ASSERT_EQ(omni_ckpt_async_add_tensor(a, "h", OMNI_CKPT_BF16, 2, shape, off, shape, half, OMNI_CKPT_CHANGED), 0);
    EXPECT_EQ(omni_ckpt_async_add_tensor(a, "bad", static_cast<omni_ckpt_dtype>(9), 2, shape, off, shape, half,
                                         OMNI_CKPT_CHANGED), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("not an omni_ckpt_dtype"), std::string::npos);
    ASSERT_EQ(omni_ckpt_async_submit(a), 0);
    ASSERT_EQ(omni_ckpt_async_wait(a), 0) << omni_ckpt_last_error();
    omni_ckpt_async_free(a);
    omni_ckpt_meta meta{};
    meta.step = 1;
    ASSERT_EQ(omni_ckpt_commit(root.c_str(), 1, nullptr, &meta, nullptr, 0), 0) << omni_ckpt_last_error();
    EXPECT_EQ(omni_ckpt_commit(root.c_str(), 1, nullptr, nullptr, nullptr, 0), OMNI_EINVAL);
    omni_ckpt_writer *w = nullptr;
    EXPECT_EQ(omni_ckpt_writer_open(root.c_str(), 2, 0, "no spaces", nullptr, &w), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("attempt"), std::string::npos);
    omni_ckpt_reader *rd = nullptr;
    EXPECT_EQ(omni_ckpt_reader_open((root + "/step-0000000099").c_str(), 0, 1, &rd), OMNI_EIO);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("step-0000000099"), std::string::npos);
}

TEST(CApi, CopyOnWriteSnapshotAndStats) {
    TempDir tmp;
    const std::string root = tmp.path + "/root";
    omni_ckpt_async *a = nullptr;
    ASSERT_EQ(omni_ckpt_async_create(&a), 0);
    EXPECT_EQ(omni_ckpt_async_set_snapshot(a, static_cast<omni_ckpt_snapshot>(7)), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("not an omni_ckpt_snapshot"), std::string::npos);
    ASSERT_EQ(omni_ckpt_async_set_snapshot(a, OMNI_CKPT_SNAPSHOT_COPY_ON_WRITE), 0);
    ASSERT_EQ(omni_ckpt_async_begin(a, root.c_str(), 1, 0, nullptr, nullptr), 0) << omni_ckpt_last_error();
    // Page-aligned: protected whole, nothing copied.
    const uint64_t n = 1 << 21;
    void *mem = nullptr;
    ASSERT_EQ(posix_memalign(&mem, 4096, n * 4), 0);
    float *f = static_cast<float *>(mem);
    for (uint64_t i = 0; i < n; ++i) f[i] = static_cast<float>(i);
    const uint64_t shape[1] = {n}, off[1] = {0};
    ASSERT_EQ(omni_ckpt_async_add_tensor(a, "w", OMNI_CKPT_FP32, 1, shape, off, shape, f, OMNI_CKPT_CHANGED), 0)
        << omni_ckpt_last_error();
    // After add_tensor: not in the checkpoint. The chunk written is copied first; the
    // persist copies the rest before it writes.
    for (uint64_t i = 0; i < 1024; ++i) f[i] = -1.0f;
    const uint8_t rng[4] = {1, 2, 3, 4};
    const int64_t consumed[2] = {17, 99};
    EXPECT_EQ(omni_ckpt_async_add_rank_state(a, 0, nullptr, 4, consumed, 2), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("NULL array with a non-zero length"), std::string::npos);
    EXPECT_EQ(omni_ckpt_async_add_rank_state(nullptr, 0, rng, 4, consumed, 2), OMNI_EINVAL);
    ASSERT_EQ(omni_ckpt_async_add_rank_state(a, 0, rng, 4, consumed, 2), 0) << omni_ckpt_last_error();
    ASSERT_EQ(omni_ckpt_async_submit(a), 0);
    ASSERT_EQ(omni_ckpt_async_wait(a), 0) << omni_ckpt_last_error();
    omni_ckpt_async_stats st{};
    ASSERT_EQ(omni_ckpt_async_get_stats(a, &st), 0);
    EXPECT_EQ(st.slices_protected + st.slices_copied, 1u);
    if (st.slices_protected == 1) {
        EXPECT_EQ(st.bytes_protected, n * 4);
        EXPECT_GE(st.faults, 1u);
        EXPECT_GT(st.bytes_faulted, 0u);
        EXPECT_GT(st.bytes_drained, 0u);
        EXPECT_EQ(st.bytes_faulted + st.bytes_drained, st.bytes_protected);
        EXPECT_STREQ(st.fallback, "");
    } else {
        EXPECT_STRNE(st.fallback, "");   // e.g. no userfaultfd where this runs
    }
    EXPECT_EQ(omni_ckpt_async_get_stats(a, nullptr), OMNI_EINVAL);
    omni_ckpt_async_free(a);
    omni_ckpt_meta meta{};
    meta.step = 1;
    ASSERT_EQ(omni_ckpt_commit(root.c_str(), 1, nullptr, &meta, nullptr, 0), 0) << omni_ckpt_last_error();
    omni_ckpt_reader *rd = nullptr;
    ASSERT_EQ(omni_ckpt_reader_open(root.c_str(), 1, 1, &rd), 0) << omni_ckpt_last_error();
    std::vector<float> back(n);
    ASSERT_EQ(omni_ckpt_reader_read(rd, "w", 1, off, shape, back.data(), n * 4), 0) << omni_ckpt_last_error();
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(i)) << i;
    size_t rng_bytes = 0, n_consumed = 0;
    ASSERT_EQ(omni_ckpt_reader_rank_state(rd, 0, nullptr, &rng_bytes, nullptr, &n_consumed), 0) << omni_ckpt_last_error();
    ASSERT_EQ(rng_bytes, 4u);
    ASSERT_EQ(n_consumed, 2u);
    uint8_t rng_back[4] = {0};
    int64_t consumed_back[2] = {0};
    ASSERT_EQ(omni_ckpt_reader_rank_state(rd, 0, rng_back, &rng_bytes, consumed_back, &n_consumed), 0) << omni_ckpt_last_error();
    EXPECT_TRUE(std::equal(rng, rng + 4, rng_back));
    EXPECT_TRUE(std::equal(consumed, consumed + 2, consumed_back));
    omni_ckpt_reader_close(rd);
    std::free(mem);
}

// Every dtype through the C API, an incremental checkpoint whose unchanged slice is named by
// OMNI_CKPT_UNCHANGED (with no data: the base holds it), and the argument checks of the
// reading functions.
TEST(CApi, EveryDtypeIncrementalHintsAndArgumentChecks) {
    TempDir tmp;
    const std::string root = tmp.path + "/root";
    const uint64_t shape[1] = {6}, off[1] = {0};
    struct T {
        const char *name;
        omni_ckpt_dtype dtype;
        size_t elem;
    };
    const T tensors[] = {{"f32", OMNI_CKPT_FP32, 4}, {"bf16", OMNI_CKPT_BF16, 2}, {"f16", OMNI_CKPT_FP16, 2},
                         {"i64", OMNI_CKPT_INT64, 8}, {"u8", OMNI_CKPT_UINT8, 1}};
    auto bytes_of = [](const T &t, uint8_t step) {   // 6 elements, distinct per tensor and step
        std::vector<uint8_t> b(6 * t.elem);
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + t.elem * 31 + step * 101);
        return b;
    };
    for (uint8_t step = 1; step <= 2; ++step) {
        omni_ckpt_writer *w = nullptr;
        const std::string base = root + "/step-0000000001";
        ASSERT_EQ(omni_ckpt_writer_open(root.c_str(), step, 0, nullptr, step == 2 ? base.c_str() : nullptr, &w), 0)
            << omni_ckpt_last_error();
        for (const T &t : tensors) {
            const bool unchanged = step == 2 && std::strcmp(t.name, "f16") == 0;
            const auto b = bytes_of(t, step);
            ASSERT_EQ(omni_ckpt_writer_add_tensor(w, t.name, t.dtype, 1, shape, off, shape,
                                                  unchanged ? nullptr : b.data(),
                                                  unchanged ? OMNI_CKPT_UNCHANGED : OMNI_CKPT_CHANGED),
                      0)
                << t.name << ": " << omni_ckpt_last_error();
        }
        EXPECT_EQ(omni_ckpt_writer_add_tensor(w, "x", OMNI_CKPT_FP32, 1, shape, off, shape, "abcdefghijklmnopqrstuvwx",
                                              static_cast<omni_ckpt_change>(7)),
                  -1);
        EXPECT_NE(std::string(omni_ckpt_last_error()).find("tensor x: change 7 is not an omni_ckpt_change"), std::string::npos);
        EXPECT_EQ(omni_ckpt_writer_add_tensor(w, "x", OMNI_CKPT_FP32, 0, shape, off, shape, "abcd", OMNI_CKPT_CHANGED), OMNI_EINVAL);
        EXPECT_NE(std::string(omni_ckpt_last_error()).find("tensor x: ndim 0"), std::string::npos);
        const uint8_t rng[3] = {1, 2, step};
        ASSERT_EQ(omni_ckpt_writer_add_rank_state(w, 0, rng, 3, nullptr, 0), 0) << omni_ckpt_last_error();
        ASSERT_EQ(omni_ckpt_writer_finish(w), 0) << omni_ckpt_last_error();
        omni_ckpt_writer_free(w);
        omni_ckpt_meta meta{};
        meta.step = step;
        ASSERT_EQ(omni_ckpt_commit(root.c_str(), 1, nullptr, &meta, nullptr, 0), 0) << omni_ckpt_last_error();
    }
    omni_ckpt_reader *rd = nullptr;
    ASSERT_EQ(omni_ckpt_reader_open(root.c_str(), 1, 1, &rd), 0) << omni_ckpt_last_error();
    ASSERT_EQ(omni_ckpt_reader_tensor_count(rd), 5u);
    for (size_t i = 0; i < 5; ++i) {
        const char *name = nullptr;
        omni_ckpt_dtype dt;
        uint32_t nd = 0;
        uint64_t sh[8];
        ASSERT_EQ(omni_ckpt_reader_tensor_info(rd, i, &name, &dt, &nd, sh), 0);
        const T *t = std::find_if(std::begin(tensors), std::end(tensors),
                                  [&](const T &x) { return std::strcmp(x.name, name) == 0; });
        ASSERT_NE(t, std::end(tensors)) << name;
        EXPECT_EQ(dt, t->dtype) << name;
        EXPECT_EQ(nd, 1u);
        std::vector<uint8_t> got(6 * t->elem);
        ASSERT_EQ(omni_ckpt_reader_read(rd, name, 1, off, shape, got.data(), got.size()), 0) << omni_ckpt_last_error();
        // The unchanged slice is the base's, the others those of step 2.
        EXPECT_EQ(got, bytes_of(*t, std::strcmp(name, "f16") == 0 ? 1 : 2)) << name;
    }
    EXPECT_EQ(omni_ckpt_reader_tensor_info(rd, 5, nullptr, nullptr, nullptr, nullptr), OMNI_EINVAL);
    EXPECT_STREQ(omni_ckpt_last_error(), "omni_ckpt_reader_tensor_info: index 5 >= 5 tensors");
    uint8_t one[8];
    EXPECT_EQ(omni_ckpt_reader_read(rd, "u8", 1, off, shape, nullptr, 6), OMNI_EINVAL);
    EXPECT_STREQ(omni_ckpt_last_error(), "omni_ckpt_reader_read: NULL argument");
    EXPECT_EQ(omni_ckpt_reader_read(rd, "u8", 9, off, shape, one, 6), OMNI_EINVAL);
    EXPECT_STREQ(omni_ckpt_last_error(), "tensor u8: ndim 9: expected 1..8");
    uint8_t rng[2];
    size_t rng_n = sizeof rng, cons_n = 0;
    EXPECT_EQ(omni_ckpt_reader_rank_state(rd, 0, rng, &rng_n, nullptr, &cons_n), OMNI_ERANGE);
    EXPECT_STREQ(omni_ckpt_last_error(), "rank state of rank 0: buffers too small (3 rng bytes, 0 indices needed)");
    omni_ckpt_reader_close(rd);
    // The unchanged slice is a reference to the base's file: without it, step 2 cannot open.
    ASSERT_EQ(::unlink((root + "/step-0000000001/shard-00000.h5").c_str()), 0);
    EXPECT_EQ(omni_ckpt_reader_open((root + "/step-0000000002").c_str(), 0, 1, &rd), OMNI_EIO);
    EXPECT_NE(std::string(omni_ckpt_last_error()).find("tensor f16: source file " + root +
                                                   "/step-0000000002/../step-0000000001/shard-00000.h5 is missing"),
              std::string::npos)
        << omni_ckpt_last_error();
}
