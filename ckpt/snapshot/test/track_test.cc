// Write tracking (WriterOptions::track_writes, write_track.h): the kernel's written-page
// reports against the writes these tests make, and incremental checkpoints that skip hashing
// only what nobody wrote. Every checkpoint is read back and compared with the buffers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "ckpt/hash.h"
#include "ckpt/snapshot/write_track.h"
#include "ckpt/test/test_util.h"
#include "omni/ckpt.h"
#include "omni/ckpt_cpp.h"

using namespace omni::ckpt;
namespace t = omni::ckpt::test;
using t::Mapping;
using t::TempDir;

namespace {

constexpr std::size_t kSlice = 256 << 10;   // bytes of one slice
constexpr int kSlices = 4;

track::Tracker *tracker_or_skip() {
    std::string why;
    return track::Tracker::get(&why);
}

#define REQUIRE_TRACKING()                                                                    \
    do {                                                                                     \
        if (!tracker_or_skip())                                                              \
            GTEST_SKIP() << "this kernel or process cannot track writes: "                   \
                         << write_tracking_status();                                         \
    } while (0)

// Arms, then remembers the hash of what is there now, as the writer does.
track::Lookup arm_and_remember(track::Tracker &tr, const char *p, std::size_t n) {
    const track::Lookup l = tr.arm(p, n);
    if (l.tracked) tr.remember(p, n, xxh3(p, n), l.epoch);
    return l;
}

}  // namespace

TEST(WriteTrack, CleanUntilWrittenThenCleanAgain) {
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    Mapping m(kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 7, kSlice);
    track::Lookup l = arm_and_remember(tr, m.data(), kSlice);
    ASSERT_TRUE(l.tracked);
    EXPECT_FALSE(l.known);   // new memory: nothing remembered
    l = tr.arm(m.data(), kSlice);
    ASSERT_TRUE(l.known);
    EXPECT_EQ(l.hash, xxh3(m.data(), kSlice));
    m.data()[kSlice - 1] = 8;   // the last byte of the last page
    EXPECT_FALSE(arm_and_remember(tr, m.data(), kSlice).known);
    l = tr.arm(m.data(), kSlice);
    ASSERT_TRUE(l.known);
    EXPECT_EQ(l.hash, xxh3(m.data(), kSlice));
}

TEST(WriteTrack, AWriteToASharedPageIsSeenByBothSlices) {
    // Two slices share the page around byte 100000: the scan of the first re-protects it,
    // which must not hide the write from the second.
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    Mapping m(2 * kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 1, 2 * kSlice);
    const std::size_t cut = 100000;
    char *a = m.data(), *b = m.data() + cut;
    const std::size_t na = cut, nb = 2 * kSlice - cut;
    for (int round = 0; round < 2; ++round) {
        arm_and_remember(tr, a, na);
        arm_and_remember(tr, b, nb);
    }
    ASSERT_TRUE(tr.arm(a, na).known);
    ASSERT_TRUE(tr.arm(b, nb).known);
    b[10] = 2;   // in b, on the page b shares with a
    EXPECT_FALSE(arm_and_remember(tr, a, na).known);
    EXPECT_FALSE(tr.arm(b, nb).known) << "the write to b was hidden by a's scan";
}

TEST(WriteTrack, DroppedUnmappedAndKernelWrittenPagesCountAsWritten) {
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    Mapping m(kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 3, kSlice);
    char *p = m.data();
    auto settle = [&] {
        arm_and_remember(tr, p, kSlice);
        ASSERT_TRUE(tr.arm(p, kSlice).known);
    };
    settle();
    // The page's content becomes zeros without a store.
    ASSERT_EQ(::madvise(p + 8192, 4096, MADV_DONTNEED), 0);
    EXPECT_FALSE(arm_and_remember(tr, p, kSlice).known) << "MADV_DONTNEED";
    settle();
    // New memory at the same address, not registered with the tracker.
    ASSERT_EQ(::mmap(p + 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
              p + 4096);
    std::memset(p + 4096, 3, 4096);   // the same bytes as before, yet new memory
    const track::Lookup l = arm_and_remember(tr, p, kSlice);
    EXPECT_FALSE(l.known) << "mapped again";
    settle();
    // A system call stores into the buffer.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], "abc", 3), 3);
    ASSERT_EQ(::read(fds[0], p + 20000, 3), 3);
    ::close(fds[0]);
    ::close(fds[1]);
    EXPECT_FALSE(arm_and_remember(tr, p, kSlice).known) << "read(2)";
    settle();
}

TEST(WriteTrack, TransparentHugePages) {
    // Memory the kernel may back with 2 MiB pages (MADV_HUGEPAGE): slices that cover part of
    // a huge page and all of one behave like any other.
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    const std::size_t huge = 2 << 20, bytes = 3 * huge;
    Mapping m(bytes + huge);
    ASSERT_NE(m.data(), nullptr);
    char *p = reinterpret_cast<char *>((reinterpret_cast<std::uintptr_t>(m.data()) + huge - 1) / huge * huge);
    (void)::madvise(p, bytes, MADV_HUGEPAGE);   // a hint; where THP is off, 4 KiB pages
    std::memset(p, 4, bytes);
    char *part = p + 100000;                    // inside the first huge page
    const std::size_t n_part = 300000, n_whole = huge;
    char *whole = p + huge;                     // exactly the second one
    for (int round = 0; round < 2; ++round) {
        arm_and_remember(tr, part, n_part);
        arm_and_remember(tr, whole, n_whole);
    }
    EXPECT_TRUE(tr.arm(part, n_part).known);
    EXPECT_TRUE(tr.arm(whole, n_whole).known);
    whole[huge - 1] = 5;
    part[n_part + 10] = 5;   // after `part`, on a page it shares
    EXPECT_FALSE(arm_and_remember(tr, whole, n_whole).known);
    EXPECT_FALSE(arm_and_remember(tr, part, n_part).known);
    EXPECT_TRUE(tr.arm(whole, n_whole).known);
    EXPECT_TRUE(tr.arm(part, n_part).known);
    p[2 * huge + 5] = 1;     // the third huge page: neither slice
    EXPECT_TRUE(tr.arm(whole, n_whole).known);
    EXPECT_TRUE(tr.arm(part, n_part).known);
}

TEST(WriteTrack, AForkedChildTracksItsOwnMemory) {
    REQUIRE_TRACKING();
    Mapping m(kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 5, kSlice);
    track::Tracker &parent = *tracker_or_skip();
    arm_and_remember(parent, m.data(), kSlice);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // The parent's descriptors describe the parent's page tables: the child must get a
        // tracker of its own and see its own writes.
        track::Tracker *tr = track::Tracker::get(nullptr);
        if (!tr) ::_exit(2);
        track::Lookup l = arm_and_remember(*tr, m.data(), kSlice);
        if (!l.tracked || l.known) ::_exit(3);
        if (!tr->arm(m.data(), kSlice).known) ::_exit(4);
        m.data()[100] = 6;
        if (tr->arm(m.data(), kSlice).known) ::_exit(5);
        // The parent's tracker, kept from before the fork, tracks nothing here.
        if (parent.arm(m.data(), kSlice).tracked) ::_exit(6);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    // The parent's tracking is untouched by the child's writes (copy-on-write pages).
    EXPECT_TRUE(tracker_or_skip()->arm(m.data(), kSlice).known);
}

TEST(WriteTrack, RandomStoresAndConcurrentScansNeverYieldAStaleHash) {
    // A property test: slices of random lengths tile one buffer (so neighbours share pages),
    // rounds of random stores alternate with rounds where threads arm disjoint sets of
    // slices concurrently. Whenever the tracker says a slice is clean, its remembered hash
    // must be the hash of the bytes there now.
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    const std::size_t bytes = 8 << 20;
    Mapping m(bytes);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 0, bytes);
    std::mt19937_64 rng(12345);
    std::vector<std::pair<std::size_t, std::size_t>> slices;   // offset, length
    for (std::size_t at = 0; at < bytes;) {
        const std::size_t n = std::min<std::size_t>(bytes - at, 64 * 1024 + rng() % (300 * 1024));
        slices.emplace_back(at, n);
        at += n;
    }
    constexpr int kThreads = 4, kRounds = 40;
    std::atomic<std::uint64_t> clean{0}, stale{0};
    for (int round = 0; round < kRounds; ++round) {
        // Stores: a few random bytes, some on pages shared by two slices; round 0 stores
        // nothing so that the next round finds every slice clean.
        const int stores = round == 0 ? 0 : static_cast<int>(rng() % 6);
        for (int i = 0; i < stores; ++i) {
            // Half of them within 4 KiB of where one slice ends and the next begins.
            std::size_t at = rng() % bytes;
            if (i % 2) {
                const std::size_t edge = slices[1 + rng() % (slices.size() - 1)].first;
                at = std::min(bytes - 1, edge - 4096 + rng() % 8192);
            }
            m.data()[at] = static_cast<char>(m.data()[at] + 1 + rng() % 255);
        }
        std::vector<std::thread> th;
        for (int t = 0; t < kThreads; ++t)
            th.emplace_back([&, t] {
                for (std::size_t i = t; i < slices.size(); i += kThreads) {
                    const char *p = m.data() + slices[i].first;
                    const std::size_t n = slices[i].second;
                    const track::Lookup l = tr.arm(p, n);
                    const std::uint64_t h = xxh3(p, n);
                    if (l.known) {
                        ++clean;
                        if (l.hash != h) ++stale;
                    }
                    if (l.tracked) tr.remember(p, n, h, l.epoch);
                }
            });
        for (auto &x : th) x.join();
    }
    EXPECT_EQ(stale.load(), 0u) << "slices reported clean with a hash that is not theirs";
    // Most slices are clean in most rounds: the test exercises the clean path.
    EXPECT_GT(clean.load(), slices.size() * kRounds / 2);
}

namespace {

// kSlices slices of one tensor in one mapping, checkpointed incrementally (with tracking
// where asked and possible).
class BufferWriter : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(buf_.data(), nullptr);
        for (std::size_t i = 0; i < kSlices * kSlice / 4; ++i) {
            const float f = static_cast<float>(i) * 0.5f;
            std::memcpy(buf_.data() + 4 * i, &f, 4);
        }
    }
    // Saves every slice (detect) against `base`; returns the writer's counters.
    struct Saved {
        std::string path;
        std::uint64_t written, reused, clean;
    };
    Saved save(std::uint64_t step, const std::string &base, bool track = true) {
        WriterOptions o;
        o.base = base;
        o.track_writes = track;
        auto w = ShardWriter::open(dir_.path(), step, 0, o);
        EXPECT_TRUE(w) << w.error();
        for (int k = 0; k < kSlices; ++k) {
            auto st = w.value()->add_tensor(name(k), DType::fp32, kShape, {0, 0}, kShape,
                                            buf_.data() + k * kSlice, Change::detect);
            EXPECT_TRUE(st) << st.error();
        }
        EXPECT_TRUE(w.value()->finish());
        Meta meta;
        meta.step = step;
        meta.world_size = 1;
        auto c = commit(dir_.path(), 1, meta);
        EXPECT_TRUE(c) << c.error();
        return {c ? c.value() : "", w.value()->bytes_written(), w.value()->bytes_reused(),
                w.value()->bytes_tracked_clean()};
    }
    // The checkpoint holds exactly the buffer's bytes.
    void expect_holds_buffer(const std::string &ckpt) {
        auto r = Reader::open(ckpt);
        ASSERT_TRUE(r) << r.error();
        std::vector<char> got(kSlice);
        for (int k = 0; k < kSlices; ++k) {
            auto st = r.value()->read_all(name(k), got.data(), got.size());
            ASSERT_TRUE(st) << st.error();
            EXPECT_EQ(std::memcmp(got.data(), buf_.data() + k * kSlice, kSlice), 0) << ckpt << " " << name(k);
        }
    }
    // The same through an AsyncShardWriter; `change(k)` is what the caller says of slice k,
    // `while_persisting` runs between submit and wait.
    struct AsyncSaved {
        std::string path;
        AsyncStats stats;
    };
    AsyncSaved save_async(std::uint64_t step, const std::string &base, bool track,
                          const std::function<Change(int)> &change, Snapshot mode = Snapshot::copy,
                          const std::function<void()> &while_persisting = {}) {
        AsyncShardWriter a(mode);
        WriterOptions o;
        o.base = base;
        o.track_writes = track;
        EXPECT_TRUE(a.begin(dir_.path(), step, 0, o));
        for (int k = 0; k < kSlices; ++k) {
            auto st = a.add_tensor(name(k), DType::fp32, kShape, {0, 0}, kShape, buf_.data() + k * kSlice,
                                   change(k));
            EXPECT_TRUE(st) << st.error();
        }
        EXPECT_TRUE(a.submit());
        if (while_persisting) while_persisting();
        auto st = a.wait();
        EXPECT_TRUE(st) << st.error();
        Meta meta;
        meta.step = step;
        meta.world_size = 1;
        auto c = commit(dir_.path(), 1, meta);
        EXPECT_TRUE(c) << c.error();
        return {c ? c.value() : "", a.stats()};
    }
    std::vector<char> read_slice(const std::string &ckpt, int k) {
        std::vector<char> got(kSlice);
        auto r = Reader::open(ckpt);
        EXPECT_TRUE(r) << r.error();
        if (r) {
            EXPECT_TRUE(r.value()->read_all(name(k), got.data(), got.size()));
        }
        return got;
    }
    void bump(int k) {   // one store into slice k: a different value
        float f;
        std::memcpy(&f, buf_.data() + k * kSlice + 512, 4);
        f += 1.0f;
        std::memcpy(buf_.data() + k * kSlice + 512, &f, 4);
    }
    static std::string name(int k) { return "w" + std::to_string(k); }
    const Shape kShape{kSlice / 4 / 64, 64};   // 64 fp32 columns
    TempDir dir_;
    Mapping buf_{kSlices * kSlice};
};

// The tests of tracking itself: skipped where this kernel or process cannot track.
class TrackedWriter : public BufferWriter {
protected:
    void SetUp() override {
        REQUIRE_TRACKING();
        BufferWriter::SetUp();
    }
};

}  // namespace

TEST_F(TrackedWriter, OnlyWrittenSlicesAreHashedAndTheCheckpointsHoldTheBuffers) {
    const Saved full = save(1, "");
    EXPECT_EQ(full.written, kSlices * kSlice);
    EXPECT_EQ(full.clean, 0u);
    expect_holds_buffer(full.path);

    // Nothing written: every slice is known clean, nothing hashed, nothing written.
    const Saved none = save(2, full.path);
    EXPECT_EQ(none.clean, kSlices * kSlice);
    EXPECT_EQ(none.written, 0u);
    expect_holds_buffer(none.path);

    // One float of slice 2 changes: that slice is hashed and written, the rest stay clean.
    float f;
    std::memcpy(&f, buf_.data() + 2 * kSlice + 4000, 4);
    f += 1.0f;
    std::memcpy(buf_.data() + 2 * kSlice + 4000, &f, 4);
    const Saved one = save(3, none.path);
    EXPECT_EQ(one.written, kSlice);
    EXPECT_EQ(one.clean, (kSlices - 1) * kSlice);
    expect_holds_buffer(one.path);

    // Slice 1 is written with the bytes it already held: hashed again, equal, reused.
    std::vector<char> same(buf_.data() + kSlice, buf_.data() + 2 * kSlice);
    std::memcpy(buf_.data() + kSlice, same.data(), kSlice);
    const Saved rewrite = save(4, one.path);
    EXPECT_EQ(rewrite.written, 0u);
    EXPECT_EQ(rewrite.clean, (kSlices - 1) * kSlice);
    expect_holds_buffer(rewrite.path);

    // Against an older base the remembered hash is compared with that base's: slice 2
    // differs from checkpoint 1 although nobody wrote it since checkpoint 3.
    const Saved older = save(5, full.path);
    EXPECT_EQ(older.clean, kSlices * kSlice);
    EXPECT_EQ(older.written, kSlice);
    expect_holds_buffer(older.path);
}

TEST_F(BufferWriter, WithoutTrackingEverythingIsHashed) {
    const Saved full = save(1, "", false);
    const Saved none = save(2, full.path, false);
    EXPECT_EQ(none.clean, 0u);
    EXPECT_EQ(none.written, 0u);
    expect_holds_buffer(none.path);
}

// Where tracking cannot work (a kernel before 6.7, Debian 12's 6.1 among them; here the
// OMNI_CKPT_NO_UFFD switch, in a child that has no tracker yet), asking for it changes
// nothing but speed: write_tracking_status() says why, every slice is hashed, and the
// incremental finds the changed slice all the same. Runs everywhere, above all where
// tracking is missing.
TEST_F(BufferWriter, WhereTrackingCannotWorkSlicesAreHashed) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::setenv("OMNI_CKPT_NO_UFFD", "1", 1);
        if (write_tracking_status() != "OMNI_CKPT_NO_UFFD is set") ::_exit(2);
        const Saved full = save(1, "");
        if (full.path.empty() || full.written != kSlices * kSlice || full.clean != 0) ::_exit(3);
        bump(2);
        const Saved one = save(2, full.path);
        if (one.path.empty() || one.written != kSlice || one.clean != 0 || one.reused != (kSlices - 1) * kSlice)
            ::_exit(4);
        auto r = Reader::open(one.path);
        if (!r) ::_exit(5);
        std::vector<char> got(kSlice);
        for (int k = 0; k < kSlices; ++k)
            if (!r.value()->read_all(name(k), got.data(), got.size()) ||
                std::memcmp(got.data(), buf_.data() + k * kSlice, kSlice) != 0)
                ::_exit(6);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: status, 3: full save, 4: incremental, 5-6: the values";
}

TEST_F(TrackedWriter, ACopyOnWriteSnapshotOfTrackedMemoryIsACopy) {
    // The buffer is registered with the tracker's userfaultfd, so a copy-on-write snapshot
    // cannot protect it: it copies, says why, and the checkpoint is right.
    const Saved full = save(1, "");
    const AsyncSaved cow = save_async(
        2, "", false, [](int) { return Change::changed; }, Snapshot::copy_on_write,
        [&] { std::memset(buf_.data(), 0, kSlice); });   // after the snapshot: not in it
    EXPECT_EQ(cow.stats.slices_protected, 0u);
    EXPECT_NE(cow.stats.fallback.find("userfaultfd"), std::string::npos) << cow.stats.fallback;
    EXPECT_EQ(read_slice(cow.path, 0), read_slice(full.path, 0));
    // And the tracker saw the memset.
    const Saved after = save(3, cow.path);
    EXPECT_EQ(after.written, kSlice);
    expect_holds_buffer(after.path);
}

TEST_F(TrackedWriter, SlicesTheCallerCallsUnchangedAreNotSnapshotted) {
    const Saved full = save(1, "", false);
    bump(2);
    const AsyncSaved inc = save_async(2, full.path, false, [](int k) {
        return k == 2 ? Change::changed : Change::unchanged;
    });
    EXPECT_EQ(inc.stats.slices_referenced, unsigned(kSlices - 1));
    EXPECT_EQ(inc.stats.bytes_referenced, (kSlices - 1) * kSlice);
    EXPECT_EQ(inc.stats.slices_copied, 1u);
    expect_holds_buffer(inc.path);
    // A slice called unchanged that the base does not hold (another shape) is snapshotted.
    AsyncShardWriter a;
    WriterOptions o;
    o.base = full.path;
    ASSERT_TRUE(a.begin(dir_.path(), 3, 0, o));
    ASSERT_TRUE(a.add_tensor("other", DType::fp32, {16}, {0}, {16}, buf_.data(), Change::unchanged));
    EXPECT_EQ(a.stats().slices_referenced, 0u);
    EXPECT_EQ(a.stats().slices_copied, 1u);
    ASSERT_TRUE(a.submit());
    EXPECT_TRUE(a.wait());
}

TEST_F(TrackedWriter, WriteTrackingLeavesUnwrittenSlicesOutOfTheSnapshot) {
    auto detect = [](int) { return Change::detect; };
    // The first tracked checkpoint snapshots everything and remembers the checksums its
    // persist takes.
    const AsyncSaved full = save_async(1, "", true, detect);
    EXPECT_EQ(full.stats.slices_copied, unsigned(kSlices));
    expect_holds_buffer(full.path);
    bump(1);
    const AsyncSaved inc = save_async(2, full.path, true, detect);
    EXPECT_EQ(inc.stats.slices_referenced, unsigned(kSlices - 1));
    EXPECT_EQ(inc.stats.slices_copied, 1u);
    expect_holds_buffer(inc.path);
    // Against the older base, slice 1 differs although nobody wrote it since checkpoint 2:
    // its remembered checksum is not the base's, so it is snapshotted.
    const AsyncSaved older = save_async(3, full.path, true, detect);
    EXPECT_EQ(older.stats.slices_referenced, unsigned(kSlices - 1));
    EXPECT_EQ(older.stats.slices_copied, 1u);
    expect_holds_buffer(older.path);
    // A synchronous tracked writer knows what the asynchronous persists remembered.
    const Saved sync = save(4, inc.path);
    EXPECT_EQ(sync.clean, kSlices * kSlice);
    EXPECT_EQ(sync.written, 0u);
    expect_holds_buffer(sync.path);
}

TEST_F(TrackedWriter, StoresAfterTheSnapshotAreNotInTheCheckpointButCountNextTime) {
    auto detect = [](int) { return Change::detect; };
    const AsyncSaved full = save_async(1, "", true, detect);
    // The snapshot of checkpoint 2 is taken, then the trainer writes slice 0 while the
    // persist runs: checkpoint 2 holds the old value, checkpoint 3 sees the store.
    const std::vector<char> before(buf_.data(), buf_.data() + kSlice);
    const AsyncSaved during = save_async(2, full.path, true, detect, Snapshot::copy, [&] { bump(0); });
    EXPECT_EQ(read_slice(during.path, 0), before);
    const AsyncSaved next = save_async(3, during.path, true, detect);
    EXPECT_EQ(next.stats.slices_copied, 1u);
    expect_holds_buffer(next.path);
}

TEST(WriteTrack, TheCApiSwitch) {
    REQUIRE_TRACKING();
    EXPECT_EQ(omni_ckpt_write_tracking_status(), nullptr);
    TempDir dir;
    Mapping m(kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 9, kSlice);
    const uint64_t shape[1] = {kSlice}, off[1] = {0};
    std::string base;
    for (std::uint64_t step = 1; step <= 2; ++step) {
        omni_ckpt_writer *w = nullptr;
        ASSERT_EQ(omni_ckpt_writer_open(dir.path().c_str(), step, 0, nullptr,
                                        base.empty() ? nullptr : base.c_str(), &w), 0)
            << omni_ckpt_last_error();
        ASSERT_EQ(omni_ckpt_writer_track_writes(w, 1), 0);
        ASSERT_EQ(omni_ckpt_writer_add_tensor(w, "b", OMNI_CKPT_UINT8, 1, shape, off, shape, m.data(),
                                              OMNI_CKPT_DETECT), 0)
            << omni_ckpt_last_error();
        ASSERT_EQ(omni_ckpt_writer_finish(w), 0) << omni_ckpt_last_error();
        omni_ckpt_writer_free(w);
        omni_ckpt_meta meta{};
        meta.step = step;
        meta.world_size = 1;
        char path[4096];
        ASSERT_EQ(omni_ckpt_commit(dir.path().c_str(), 1, nullptr, &meta, path, sizeof path), 0)
            << omni_ckpt_last_error();
        base = path;
    }
    // The second checkpoint found the slice clean (no hash) and referenced the first.
    EXPECT_GE(tracker_or_skip()->counters().clean, 1u);
    EXPECT_EQ(omni_ckpt_writer_track_writes(nullptr, 1), OMNI_EINVAL);

    // The asynchronous writer: the unwritten slice is not snapshotted.
    omni_ckpt_async *a = nullptr;
    ASSERT_EQ(omni_ckpt_async_create(&a), 0);
    ASSERT_EQ(omni_ckpt_async_track_writes(a, 1), 0);
    ASSERT_EQ(omni_ckpt_async_begin(a, dir.path().c_str(), 3, 0, nullptr, base.c_str()), 0) << omni_ckpt_last_error();
    ASSERT_EQ(omni_ckpt_async_add_tensor(a, "b", OMNI_CKPT_UINT8, 1, shape, off, shape, m.data(),
                                         OMNI_CKPT_DETECT), 0)
        << omni_ckpt_last_error();
    omni_ckpt_async_stats st{};
    ASSERT_EQ(omni_ckpt_async_get_stats(a, &st), 0);
    EXPECT_EQ(st.slices_referenced, 1u);
    EXPECT_EQ(st.bytes_referenced, kSlice);
    EXPECT_EQ(st.slices_copied, 0u);
    ASSERT_EQ(omni_ckpt_async_submit(a), 0);
    ASSERT_EQ(omni_ckpt_async_wait(a), 0) << omni_ckpt_last_error();
    omni_ckpt_async_free(a);
    EXPECT_EQ(omni_ckpt_async_track_writes(nullptr, 1), OMNI_EINVAL);
}

namespace {

// One checkpoint of the uint8 tensor "b" = p[0, kSlice), tracked, against `base`; the path.
std::string save_one(const TempDir &dir, std::uint64_t step, const std::string &base, const char *p) {
    WriterOptions o;
    o.base = base;
    o.track_writes = true;
    auto w = ShardWriter::open(dir.path(), step, 0, o);
    EXPECT_TRUE(w) << w.error();
    if (!w) return "";
    auto st = w.value()->add_tensor("b", DType::uint8, {kSlice}, {0}, {kSlice}, p, Change::detect);
    EXPECT_TRUE(st) << st.error();
    EXPECT_TRUE(w.value()->finish());
    Meta meta;
    meta.step = step;
    meta.world_size = 1;
    auto c = commit(dir.path(), 1, meta);
    EXPECT_TRUE(c) << c.error();
    return c ? c.value() : "";
}

std::vector<char> read_b(const std::string &ckpt) {
    std::vector<char> got(kSlice);
    auto r = Reader::open(ckpt);
    EXPECT_TRUE(r) << r.error();
    if (r) {
        auto st = r.value()->read_all("b", got.data(), got.size());
        EXPECT_TRUE(st) << st.error();
    }
    return got;
}

}  // namespace

// Shared memory is written without this mapping's page tables seeing it: here through a
// second mapping of the same memfd. The kernel lets such memory be registered with
// asynchronous write protection, and a tracker that did so reported the slice clean and the
// incremental referenced the stale base. Only private anonymous memory is tracked now; this
// slice is hashed, and the checkpoint holds the new bytes.
TEST(WriteTrack, SharedMemoryWrittenThroughAnotherMappingIsNotTrackedButHashed) {
    REQUIRE_TRACKING();
    track::Tracker &tr = *tracker_or_skip();
    const int fd = ::memfd_create("omni-track-test", MFD_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, kSlice), 0);
    char *a = static_cast<char *>(::mmap(nullptr, kSlice, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    char *b = static_cast<char *>(::mmap(nullptr, kSlice, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    ASSERT_NE(a, MAP_FAILED);
    ASSERT_NE(b, MAP_FAILED);
    std::memset(a, 1, kSlice);

    const std::uint64_t not_private = tr.counters().not_private;
    TempDir dir;
    const std::string first = save_one(dir, 1, "", a);
    EXPECT_FALSE(tr.arm(a, kSlice).tracked);
    EXPECT_GT(tr.counters().not_private, not_private);
    EXPECT_NE(tr.untracked_reason().find("private anonymous"), std::string::npos) << tr.untracked_reason();

    std::memset(b, 2, kSlice);   // not through `a`
    const std::string second = save_one(dir, 2, first, a);
    EXPECT_EQ(read_b(second), std::vector<char>(kSlice, 2));
    EXPECT_EQ(read_b(first), std::vector<char>(kSlice, 1));

    // MAP_SHARED|MAP_ANONYMOUS written by a forked child: not tracked either.
    char *s = static_cast<char *>(
        ::mmap(nullptr, kSlice, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(s, MAP_FAILED);
    std::memset(s, 3, kSlice);
    EXPECT_FALSE(arm_and_remember(tr, s, kSlice).tracked);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        std::memset(s, 4, kSlice);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const track::Lookup l = tr.arm(s, kSlice);
    EXPECT_FALSE(l.tracked);
    EXPECT_FALSE(l.known);

    // Private anonymous memory next to it is still tracked.
    Mapping m(kSlice);
    ASSERT_NE(m.data(), nullptr);
    std::memset(m.data(), 5, kSlice);
    EXPECT_TRUE(arm_and_remember(tr, m.data(), kSlice).tracked);
    EXPECT_TRUE(tr.arm(m.data(), kSlice).known);

    ::munmap(a, kSlice);
    ::munmap(b, kSlice);
    ::munmap(s, kSlice);
}
