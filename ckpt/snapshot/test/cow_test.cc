// Copy-on-write snapshots (AsyncShardWriter with Snapshot::copy_on_write): the checkpoint
// holds every slice's values as of add_tensor, bitwise, however the caller writes its
// buffers before submit() and while the persist runs; memory userfaultfd cannot protect, an
// unavailable userfaultfd and OMNI_CKPT_NO_UFFD=1 fall back to copies; nothing stays
// protected after wait(), begin() or the writer's end, whatever became of the persist.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/fsio.h"
#include "ckpt/snapshot/cow.h"
#include "ckpt/test/test_util.h"
#include "omni/ckpt_cpp.h"

using namespace omni::ckpt;
namespace t = omni::ckpt::test;
using t::Mapping;
using t::TempDir;

namespace {

// One tensor saved whole by one writer, its bytes at `at` inside a shared buffer.
struct Slot {
    std::string name;
    DType dtype;
    Shape shape;
    char *at;
    std::vector<char> expect;   // the values at add_tensor
    std::size_t bytes() const { return expect.size(); }
};

Slot place(const std::string &name, DType dtype, const Shape &shape, char *at, std::uint64_t seed) {
    Slot s{name, dtype, shape, at, t::logical(dtype, shape, seed)};
    std::memcpy(at, s.expect.data(), s.bytes());
    return s;
}

// New values in every slot, a function of `seed` and the slot's name.
void set_values(std::vector<Slot> &slots, std::uint64_t seed) {
    for (auto &s : slots) {
        s.expect = t::logical(s.dtype, s.shape, seed + s.name.size());
        std::memcpy(s.at, s.expect.data(), s.bytes());
    }
}

Meta meta_for(std::uint64_t step) {
    Meta m;
    m.step = step;
    m.world_size = 1;
    return m;
}

// Rewrites every slot with a new byte pattern until told to stop: a trainer's optimizer
// step running while the persist does.
class Rewriter {
public:
    // `pace_us` > 0: front to back, one 64 KiB piece every pace_us microseconds, about the
    // persist's own speed, so that writes and persist meet all along the buffers.
    explicit Rewriter(std::vector<Slot> &slots, int pace_us = 0)
        : slots_(slots), pace_us_(pace_us), th_([this] { pace_us_ ? run_paced() : run(); }) {}
    ~Rewriter() { stop(); }
    void stop() {
        stop_ = true;
        if (th_.joinable()) th_.join();
    }
    int passes() const { return passes_; }

private:
    void run() {
        for (int pattern = 1; !stop_; ++pattern) {
            // Last slot first, back to front: the persist goes the other way, so the two
            // meet in the middle of some slice.
            for (auto it = slots_.rbegin(); it != slots_.rend() && !stop_; ++it)
                for (std::size_t off = it->bytes(); off > 0 && !stop_;) {
                    const std::size_t n = std::min<std::size_t>(off, 1 << 16);
                    off -= n;
                    std::memset(it->at + off, pattern & 0xff, n);
                }
            ++passes_;
        }
    }
    void run_paced() {
        for (int pattern = 1; !stop_; ++pattern) {
            for (auto &sl : slots_)
                for (std::size_t off = 0; off < sl.bytes() && !stop_; off += 1 << 16) {
                    std::memset(sl.at + off, pattern & 0xff, std::min<std::size_t>(sl.bytes() - off, 1 << 16));
                    std::this_thread::sleep_for(std::chrono::microseconds(pace_us_));
                }
            ++passes_;
        }
    }
    std::vector<Slot> &slots_;
    int pace_us_;
    std::atomic<bool> stop_{false};
    std::atomic<int> passes_{0};
    std::thread th_;
};

void expect_saved(const std::string &ckpt, const std::vector<Slot> &slots) {
    auto r = Reader::open(ckpt);
    ASSERT_TRUE(r.ok()) << r.error();
    for (const auto &s : slots) {
        std::vector<char> got(s.bytes());
        auto st = r.value()->read_all(s.name, got.data(), got.size());
        ASSERT_TRUE(st.ok()) << st.error();
        EXPECT_TRUE(got == s.expect) << "tensor " << s.name << " is not its value at add_tensor";
    }
}

// begin, add every slot, write over the first half of each (before submit), submit,
// rewrite everything until the persist is done, commit.
std::string snapshot_under_writes(AsyncShardWriter &a, const std::string &root, std::uint64_t step,
                                  std::vector<Slot> &slots, const std::string &base = "",
                                  bool write_before_submit = true, int pace_us = 0) {
    WriterOptions wo;
    wo.base = base;
    EXPECT_TRUE(a.begin(root, step, 0, wo).ok());
    for (const auto &s : slots) {
        auto st = a.add_tensor(s.name, s.dtype, s.shape, Shape(s.shape.size(), 0), s.shape, s.at);
        EXPECT_TRUE(st.ok()) << st.error();
    }
    if (write_before_submit)
        for (auto &s : slots) std::memset(s.at, 0xee, s.bytes() / 2);
    EXPECT_TRUE(a.submit().ok());
    omni::Status st;
    {
        Rewriter w(slots, pace_us);
        st = a.wait();
    }
    EXPECT_TRUE(st.ok()) << st.error();
    auto c = commit(root, 1, meta_for(step));
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? c.value() : "";
}

// Begins checkpoint `step` of a one-slice snapshot: tensor "w", 2^20 fp32 at `at`.
void begin_w(AsyncShardWriter &a, const std::string &root, std::uint64_t step, char *at) {
    ASSERT_TRUE(a.begin(root, step, 0).ok());
    ASSERT_TRUE(a.add_tensor("w", DType::fp32, {1 << 20}, {0}, {1 << 20}, at).ok());
}

// read(2) of 4 bytes from a pipe into `dst`: the kernel writing into the caller's memory.
ssize_t read_pipe_into(char *dst) {
    int fds[2];
    if (::pipe(fds) != 0 || ::write(fds[1], "abcd", 4) != 4) return -2;
    errno = 0;
    const ssize_t n = ::read(fds[0], dst, 4);
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    errno = err;
    return n;
}

// Sets an environment variable for the scope of a test.
class ScopedEnv {
public:
    ScopedEnv(const char *name, const char *value) : name_(name) { ::setenv(name, value, 1); }
    ~ScopedEnv() { ::unsetenv(name_); }

private:
    const char *name_;
};

}  // namespace

TEST(Cow, WritesDuringThePersistAreNotSeenForEveryDtypeAndUnalignedSlices) {
    ::alarm(120);   // a writer left waiting on a protected page would hang: fail instead
    TempDir d;
    // One flat buffer, as a framework's parameter storage: slices start and end mid-page
    // and share their partial pages with their neighbours.
    Mapping flat(24 << 20);
    ASSERT_TRUE(flat.data());
    char *p = flat.data() + 72;
    std::vector<Slot> slots;
    auto next = [&](const std::string &name, DType dt, const Shape &shape, std::uint64_t seed) {
        slots.push_back(place(name, dt, shape, p, seed));
        p += slots.back().bytes() + 8;
    };
    next("model/embed", DType::fp32, {300, 1001}, 1);
    next("model/blk.0/w", DType::bf16, {513, 777}, 2);
    next("model/blk.0/b", DType::fp16, {100003}, 3);
    next("optim/step_counts", DType::int64, {70001}, 4);
    next("data/mask", DType::uint8, {3, 300007}, 5);
    next("model/small", DType::fp32, {7, 5}, 6);   // below 64 KiB: copied by design
    AsyncShardWriter a(Snapshot::copy_on_write);
    for (std::uint64_t step : {1, 2}) {   // the second reuses the arena and the guard
        set_values(slots, step * 10);
        const std::string ck = snapshot_under_writes(a, d / "root", step, slots);
        expect_saved(ck, slots);
        const AsyncStats st = a.stats();
        EXPECT_EQ(st.snapshot, Snapshot::copy_on_write);
        EXPECT_EQ(st.slices_protected, slots.size() - 1) << st.fallback;
        EXPECT_EQ(st.slices_copied, 1u);
        EXPECT_TRUE(st.fallback.empty()) << st.fallback;
        EXPECT_GT(st.bytes_protected, 3u << 20);
        // At least the writes before submit stopped, and each had its chunk copied.
        EXPECT_GE(st.faults, slots.size() - 1);
        EXPECT_GE(st.bytes_faulted, (slots.size() - 1) * 4096);
        // Every protected byte was copied once: for a write, or by the persist.
        EXPECT_EQ(st.bytes_faulted + st.bytes_drained, st.bytes_protected);
        // After wait() nothing is protected: writing costs no fault.
        for (auto &s : slots) std::memset(s.at, 0x11, s.bytes());
        EXPECT_EQ(a.stats().faults, st.faults);
    }
    ::alarm(0);
}

// The persist drains protected chunks while the trainer writes, paced so that the two meet
// all along the buffer: chunks the drain has copied are the trainer's again (no fault),
// chunks ahead of it are copied on the first write.
TEST(Cow, WritesThatFollowThePersist) {
    ::alarm(120);
    TempDir d;
    Mapping m(34 << 20);
    std::vector<Slot> slots{place("model/big", DType::bf16, {16 << 10, 1024}, m.data() + 4000, 11)};
    AsyncShardWriter a(Snapshot::copy_on_write);
    for (std::uint64_t step : {1, 2, 3}) {
        std::memcpy(slots[0].at, slots[0].expect.data(), slots[0].bytes());
        const std::string ck = snapshot_under_writes(a, d / "root", step, slots, "", false, 50);
        expect_saved(ck, slots);
        EXPECT_EQ(a.stats().slices_protected, 1u);
    }
    ::alarm(0);
}

// Region on its own, step by step: a write copies its chunk first; the drain copies the
// chunks still protected and only those (a chunk copied twice would hold the new bytes), and
// afterwards writes cost no fault.
TEST(Cow, RegionDrainCopiesWhatIsStillProtected) {
    ::alarm(60);   // a write left waiting on a chunk the drain failed to un-protect would hang
    std::string why;
    auto g = cow::Guard::open(&why);
    ASSERT_TRUE(g) << why;
    Mapping m(10 << 20);
    const std::size_t bytes = (8 << 20) - 200;
    char *live = m.data() + 100;
    const auto orig = t::logical(DType::uint8, {bytes}, 3);
    std::memcpy(live, orig.data(), bytes);
    std::vector<char> shadow(bytes, 0);
    cow::Region *r = g->protect(live, shadow.data(), bytes, &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->head(), 4096u - 100);
    std::memcpy(shadow.data(), live, r->head());
    std::memcpy(shadow.data() + bytes - r->tail(), live + bytes - r->tail(), r->tail());
    live[6 << 20] = static_cast<char>(orig[6 << 20] + 1);   // stops; its chunk is copied first
    EXPECT_EQ(g->faults(), 1u);
    const std::uint64_t chunk = g->bytes_faulted();   // one chunk, clipped to the interior
    EXPECT_GE(chunk, 4096u);
    EXPECT_LE(chunk, cow::kChunkBytes);
    r->drain();
    EXPECT_EQ(g->bytes_faulted(), chunk);   // the drain's copies are not faults
    EXPECT_EQ(g->bytes_drained(), r->protected_bytes() - chunk);
    EXPECT_TRUE(shadow == orig) << "the shadow is not the slice as of protect()";
    for (std::size_t off = 0; off < bytes; off += 4096) live[off] = 7;   // nothing protected
    EXPECT_EQ(g->faults(), 1u);
    EXPECT_TRUE(shadow == orig);
    r->finish();
    ::alarm(0);
}

TEST(Cow, LargeSlicesWithManyChunksWideRowsAndIncrementalDetect) {
    ::alarm(120);
    TempDir d;
    Mapping big(64 << 20);
    ASSERT_TRUE(big.data());
    std::vector<Slot> slots;
    // 40 MiB starting 40 bytes into a page: 21 chunks, the first and last clipped.
    slots.push_back(place("model/big", DType::fp32, {10 << 10, 1024}, big.data() + 40, 7));
    // Rows of 3 MiB: the persist's blocks are parts of a row.
    char *wide = big.data() + (41 << 20) + 1000;
    slots.push_back(place("model/wide", DType::uint8, {2, 3 << 20}, wide, 8));
    slots.push_back(place("model/frozen", DType::int64, {1 << 17}, wide + (6 << 20) + 24, 9));
    AsyncShardWriter a(Snapshot::copy_on_write);
    const std::string base = snapshot_under_writes(a, d / "root", 1, slots);
    expect_saved(base, slots);
    EXPECT_EQ(a.stats().slices_protected, 3u);

    // Incremental, detect by hash: "model/frozen" is as in the base and is reused, the rest
    // changed; both the hash pass and the write pass read the snapshot, not the rewrites.
    for (std::size_t i = 0; i < 2; ++i) {
        slots[i].expect = t::logical(slots[i].dtype, slots[i].shape, 20 + i);
        std::memcpy(slots[i].at, slots[i].expect.data(), slots[i].bytes());
    }
    std::memcpy(slots[2].at, slots[2].expect.data(), slots[2].bytes());
    const std::string inc = snapshot_under_writes(a, d / "root", 2, slots, base);
    expect_saved(inc, slots);
    auto r = Reader::open(inc);
    ASSERT_TRUE(r.ok());
    EXPECT_NE(r.value()->find("model/frozen")->sources[0].file.find("step-0000000001"), std::string::npos);
    EXPECT_EQ(r.value()->find("model/big")->sources[0].file, "shard-00000.h5");
    auto v = verify(inc);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v.value().ok());
    ::alarm(0);
}

// Two writers save the two halves of one tensor from adjacent memory: the page they share
// is copied by both, and each writer's userfaultfd guards only its own pages.
TEST(Cow, TwoWritersOnAdjacentHalvesOfOneBuffer) {
    ::alarm(120);
    TempDir d;
    Mapping flat(8 << 20);
    ASSERT_TRUE(flat.data());
    const Shape shape{1001, 1000};
    const auto all = t::logical(DType::fp32, shape, 3);
    char *p = flat.data() + 100;
    std::memcpy(p, all.data(), all.size());
    const std::uint64_t rows0 = 500;
    const std::uint64_t split = rows0 * 1000 * 4;
    AsyncShardWriter w0(Snapshot::copy_on_write), w1(Snapshot::copy_on_write);
    ASSERT_TRUE(w0.begin(d / "root", 1, 0).ok());
    ASSERT_TRUE(w1.begin(d / "root", 1, 1).ok());
    ASSERT_TRUE(w0.add_tensor("w", DType::fp32, shape, {0, 0}, {rows0, 1000}, p).ok());
    ASSERT_TRUE(w1.add_tensor("w", DType::fp32, shape, {rows0, 0}, {1001 - rows0, 1000}, p + split).ok());
    std::memset(p, 0x33, all.size());
    ASSERT_TRUE(w0.submit().ok());
    ASSERT_TRUE(w1.submit().ok());
    std::memset(p, 0x44, all.size());
    ASSERT_TRUE(w0.wait().ok());
    ASSERT_TRUE(w1.wait().ok());
    EXPECT_EQ(w0.stats().slices_protected, 1u);
    EXPECT_EQ(w1.stats().slices_protected, 1u);
    Meta m = meta_for(1);
    m.world_size = 2;
    auto c = commit(d / "root", 2, m);
    ASSERT_TRUE(c.ok()) << c.error();
    auto r = Reader::open(c.value());
    ASSERT_TRUE(r.ok());
    std::vector<char> got(all.size());
    ASSERT_TRUE(r.value()->read_all("w", got.data(), got.size()).ok());
    EXPECT_TRUE(got == all);
    ::alarm(0);
}

// Protecting our mapping of shared memory would not stop another mapping of it from
// writing: only private anonymous memory is left in place; the rest is copied.
// Only private anonymous memory is left in place; anything another mapping could write is
// copied. Decided with PROCMAP_QUERY where the kernel has it (Linux 6.11), else from the text
// of /proc/self/maps (Debian 12's 6.1): both ways are run here.
TEST(Cow, MemoryThatIsNotPrivateAnonymousIsCopied) {
    TempDir d;
    const std::size_t bytes = 1 << 20;
    const std::string path = d / "backing";
    const int file = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int memfd = static_cast<int>(::syscall(SYS_memfd_create, "omni-ckpt-test", 0));
    ASSERT_GE(file, 0);
    ASSERT_GE(memfd, 0);
    ASSERT_EQ(::ftruncate(file, bytes), 0);
    ASSERT_EQ(::ftruncate(memfd, bytes), 0);
    struct Kind {
        const char *what;
        int flags, fd;
        bool in_place;
    };
    const Kind kinds[] = {{"shared file", MAP_SHARED, file, false},
                          {"private file", MAP_PRIVATE, file, false},
                          {"shared anonymous", MAP_SHARED | MAP_ANONYMOUS, -1, false},
                          {"shared memfd", MAP_SHARED, memfd, false},
                          {"private memfd", MAP_PRIVATE, memfd, false},
                          {"private anonymous", MAP_PRIVATE | MAP_ANONYMOUS, -1, true}};
    std::uint64_t step = 0;
    for (bool text : {false, true}) {
        cow::TestOverrides o;
        o.maps_text = text;
        cow::set_test_overrides(o);
        for (const Kind &k : kinds) {
            SCOPED_TRACE(std::string(k.what) + (text ? ", /proc/self/maps text" : ", PROCMAP_QUERY"));
            void *m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, k.flags, k.fd, 0);
            ASSERT_NE(m, MAP_FAILED);
            std::vector<Slot> slots{place("w", DType::fp32, {bytes / 4}, static_cast<char *>(m), 5)};
            AsyncShardWriter a(Snapshot::copy_on_write);
            const std::string ck = snapshot_under_writes(a, d / "root", ++step, slots);
            expect_saved(ck, slots);
            EXPECT_EQ(a.stats().slices_protected, k.in_place ? 1u : 0u) << a.stats().fallback;
            EXPECT_EQ(a.stats().slices_copied, k.in_place ? 0u : 1u);
            if (!k.in_place) {
                EXPECT_NE(a.stats().fallback.find("tensor w: userfaultfd cannot protect this memory"),
                          std::string::npos)
                    << a.stats().fallback;
            }
            ::munmap(m, bytes);
        }
    }
    cow::set_test_overrides({});
    ::close(file);
    ::close(memfd);
}

TEST(Cow, NoUffdEnvironmentCopiesEverything) {
    ScopedEnv env("OMNI_CKPT_NO_UFFD", "1");
    TempDir d;
    Mapping m(4 << 20);
    std::vector<Slot> slots{place("w", DType::fp32, {1 << 20}, m.data(), 2)};
    AsyncShardWriter a(Snapshot::copy_on_write);
    const std::string ck = snapshot_under_writes(a, d / "root", 1, slots);
    expect_saved(ck, slots);
    EXPECT_EQ(a.stats().slices_copied, 1u);
    EXPECT_EQ(a.stats().slices_protected, 0u);
    EXPECT_EQ(a.stats().fallback, "OMNI_CKPT_NO_UFFD is set");
}

// Memory never written has no page table entries: it must be protected all the same (with
// UFFD_FEATURE_WP_UNPOPULATED, or populated first on kernels without it).
TEST(Cow, MemoryNeverTouchedIsProtectedToo) {
    for (bool populate : {false, true}) {
        cow::TestOverrides o;
        o.no_wp_unpopulated = populate;
        cow::set_test_overrides(o);
        TempDir d;
        Mapping m(4 << 20);   // all zero, no page touched
        Slot s{"zeros", DType::uint8, {4 << 20}, m.data(), std::vector<char>(4 << 20, 0)};
        std::vector<Slot> slots{s};
        AsyncShardWriter a(Snapshot::copy_on_write);
        const std::string ck = snapshot_under_writes(a, d / "root", 1, slots);
        expect_saved(ck, slots);
        EXPECT_EQ(a.stats().slices_protected, 1u) << a.stats().fallback;
        EXPECT_GE(a.stats().faults, 1u);
    }
    cow::set_test_overrides({});
}

// Buffers in transparent huge pages (madvise(MADV_HUGEPAGE), or THP "always" as on many
// distributions): a slice covering whole 2 MiB pages is protected and drained a page table
// entry at a time, one starting or ending inside a huge page splits it. The values saved
// are those at add_tensor either way. Whether the kernel gave huge pages is logged (it may
// not: THP "never", or no free 2 MiB blocks); the test is about the values.
TEST(Cow, TransparentHugePages) {
    ::alarm(120);
    TempDir d;
    const std::size_t huge = 2 << 20, bytes = 40 << 20;
    Mapping m(bytes + huge);
    ASSERT_TRUE(m.data());
    char *base = reinterpret_cast<char *>((reinterpret_cast<std::uintptr_t>(m.data()) + huge - 1) & ~(huge - 1));
    ASSERT_EQ(::madvise(base, bytes, MADV_HUGEPAGE), 0) << std::strerror(errno);
    std::memset(base, 0x5a, bytes);
    const long kb = t::anon_huge_kb(base, bytes);
    std::printf("transparent huge pages backing the test buffer: %ld kB of %zu kB\n", kb, bytes >> 10);
    ::testing::Test::RecordProperty("anon_huge_kb", static_cast<int>(kb));
    std::vector<Slot> slots{
        place("aligned/whole_pages", DType::fp32, {4 << 20}, base, 21),                   // 16 MiB
        place("unaligned/splits", DType::bf16, {3, 1000003}, base + (16 << 20) + 4096 + 6, 22),
        place("inside/one_page", DType::uint8, {1 << 20}, base + (24 << 20) + (512 << 10), 23),
        place("tail/int64", DType::int64, {1 << 20}, base + (28 << 20) + 8, 24),       // 8 MiB
    };
    AsyncShardWriter a(Snapshot::copy_on_write);
    for (std::uint64_t step : {1, 2}) {
        set_values(slots, step * 100);
        const std::string ck = snapshot_under_writes(a, d / "root", step, slots);
        expect_saved(ck, slots);
        const AsyncStats st = a.stats();
        EXPECT_EQ(st.slices_protected, slots.size()) << st.fallback;
        EXPECT_EQ(st.bytes_faulted + st.bytes_drained, st.bytes_protected);
        for (auto &s : slots) std::memset(s.at, 0x11, s.bytes());   // nothing protected now
        EXPECT_EQ(a.stats().faults, st.faults);
    }
    // Protection, faults and the drain work in aligned 2 MiB chunks: the huge pages of the
    // slice that covers them whole are still huge pages (its own mapping since registration).
    if (kb == static_cast<long>(bytes >> 10)) {
        EXPECT_EQ(t::anon_huge_kb(base, 16 << 20), 16 << 10) << "huge pages of a whole-page slice were split";
    }
    ::alarm(0);
}

// The unprivileged userfaultfd handles user-mode faults only: a system call that writes into
// a protected buffer fails with EFAULT (the documented limit), while the library's own
// Reader gets through by touching its destination first.
TEST(Cow, UserModeOnlyUserfaultfd) {
    ::alarm(120);
    cow::TestOverrides o;
    o.user_mode_only = true;
    cow::set_test_overrides(o);
    TempDir d;
    Mapping m(8 << 20);
    std::vector<Slot> slots{place("a", DType::fp32, {1 << 20}, m.data(), 1),
                            place("b", DType::fp32, {1 << 20}, m.data() + (4 << 20), 2)};
    AsyncShardWriter a(Snapshot::copy_on_write);
    const std::string first = snapshot_under_writes(a, d / "root", 1, slots);
    expect_saved(first, slots);
    EXPECT_TRUE(a.stats().kernel_writes_fail);

    for (auto &s : slots) std::memcpy(s.at, s.expect.data(), s.bytes());
    ASSERT_TRUE(a.begin(d / "root", 2, 0).ok());
    for (const auto &s : slots)
        ASSERT_TRUE(a.add_tensor(s.name, s.dtype, s.shape, {0}, s.shape, s.at).ok());
    EXPECT_EQ(a.stats().slices_protected, 2u);
    EXPECT_EQ(read_pipe_into(slots[0].at + (1 << 20)), -1);
    EXPECT_EQ(errno, EFAULT);
    // Loading step 1's "a" into the protected "b" (pread into it) works.
    auto r = Reader::open(first);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r.value()->read_all("a", slots[1].at, slots[1].bytes()).ok());
    EXPECT_EQ(0, std::memcmp(slots[1].at, slots[0].expect.data(), slots[1].bytes()));
    EXPECT_GE(a.stats().faults, 1u);
    ASSERT_TRUE(a.submit().ok());
    ASSERT_TRUE(a.wait().ok());
    ASSERT_TRUE(commit(d / "root", 1, meta_for(2)).ok());
    expect_saved(d / "root/step-0000000002", slots);   // b as at add_tensor, not as loaded
    cow::set_test_overrides({});
    ::alarm(0);
}

// A process without privileges (nobody) gets the user-mode-only userfaultfd and the
// snapshot works; as root, a privileged one.
TEST(Cow, UnprivilegedProcess) {
    TempDir d;
    ASSERT_EQ(::chmod(d.path().c_str(), 0777), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::alarm(120);
        if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
            ::_exit(10);
        Mapping m(4 << 20);
        std::vector<Slot> slots{place("w", DType::fp32, {1 << 20}, m.data(), 4)};
        AsyncShardWriter a(Snapshot::copy_on_write);
        if (!a.begin(d / "root", 1, 0).ok()) ::_exit(11);
        if (!a.add_tensor("w", DType::fp32, {1 << 20}, {0}, {1 << 20}, m.data()).ok()) ::_exit(12);
        std::memset(m.data(), 0x5a, 4 << 20);
        if (!a.submit().ok() || !a.wait().ok()) ::_exit(13);
        const AsyncStats st = a.stats();
        if (st.slices_protected != 1 || st.faults < 1) ::_exit(14);
        if (!commit(d / "root", 1, meta_for(1)).ok()) ::_exit(15);
        auto r = Reader::open(d / "root/step-0000000001");
        std::vector<char> got(4 << 20);
        if (!r.ok() || !r.value()->read_all("w", got.data(), got.size()).ok() || got != slots[0].expect)
            ::_exit(16);
        // Unprivileged unless vm.unprivileged_userfaultfd = 1.
        ::_exit(st.kernel_writes_fail ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << WTERMSIG(status);
    EXPECT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1) << "child step " << WEXITSTATUS(status) << " failed";

    // This process (root in CI) handles kernel faults too: read(2) into a protected buffer
    // waits for the handler like a store.
    if (::geteuid() == 0) {
        Mapping m(4 << 20);
        std::vector<Slot> slots{place("w", DType::fp32, {1 << 20}, m.data(), 4)};
        AsyncShardWriter a(Snapshot::copy_on_write);
        begin_w(a, d / "root", 2, m.data());
        EXPECT_FALSE(a.stats().kernel_writes_fail);
        EXPECT_EQ(read_pipe_into(m.data() + 4096), 4);
        ASSERT_TRUE(a.submit().ok());
        ASSERT_TRUE(a.wait().ok());
        ASSERT_TRUE(commit(d / "root", 1, meta_for(2)).ok());
        expect_saved(d / "root/step-0000000002", slots);
    }
}

// One slice "w" of 4 MiB in its own mapping, and a watchdog: a writer left waiting on a
// protected page fails the test instead of hanging it.
class CowOneSlice : public ::testing::Test {
protected:
    void SetUp() override { ::alarm(120); }
    void TearDown() override { ::alarm(0); }
    TempDir d;
    Mapping m{4 << 20};
    std::vector<Slot> slots{place("w", DType::fp32, {1 << 20}, m.data(), 4)};
};

// Protection ends with the snapshot, however it ends: never submitted (begin again, or the
// writer destroyed), or a persist that failed.
TEST_F(CowOneSlice, NothingStaysProtected) {
    {
        AsyncShardWriter a(Snapshot::copy_on_write);
        begin_w(a, d / "root", 1, m.data());
        ASSERT_EQ(a.stats().slices_protected, 1u);
        ASSERT_TRUE(a.begin(d / "root", 2, 0).ok());   // the first snapshot is abandoned
        std::memset(m.data(), 1, 4 << 20);
        EXPECT_EQ(a.stats().faults, 0u);
        ASSERT_TRUE(a.add_tensor("w", DType::fp32, {1 << 20}, {0}, {1 << 20}, m.data()).ok());
    }   // destroyed unsubmitted
    std::memset(m.data(), 2, 4 << 20);

    // A persist that fails (the root is a file) leaves the memory writable as well.
    ASSERT_TRUE(fsio::make_dirs(d / "x").ok());
    {
        const int fd = ::open((d / "x/file").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ::close(fd);
    }
    AsyncShardWriter a(Snapshot::copy_on_write);
    begin_w(a, d / "x/file", 1, m.data());
    ASSERT_TRUE(a.submit().ok());
    EXPECT_FALSE(a.wait().ok());
    const std::uint64_t faults = a.stats().faults;
    std::memset(m.data(), 3, 4 << 20);
    EXPECT_EQ(a.stats().faults, faults);
}

// A child forked while a snapshot is protected: its copy of the memory is not guarded (its
// writes cost nothing and change nothing here), and what it does with its copy of the
// writer (begin, which drops the previous snapshot) must not touch the parent's protection.
TEST_F(CowOneSlice, ForkedChildLeavesTheParentsSnapshotAlone) {
    AsyncShardWriter a(Snapshot::copy_on_write);
    begin_w(a, d / "root", 1, m.data());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        std::memset(m.data(), 0x77, 4 << 20);
        (void)a.begin(d / "child", 1, 0);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(a.stats().faults, 0u);
    std::memset(m.data(), 0x66, 4 << 20);
    EXPECT_GE(a.stats().faults, 1u);
    ASSERT_TRUE(a.submit().ok());
    ASSERT_TRUE(a.wait().ok());
    ASSERT_TRUE(commit(d / "root", 1, meta_for(1)).ok());
    expect_saved(d / "root/step-0000000001", slots);
}

// Registrations are kept from one snapshot to the next; memory unmapped and mapped again at
// the same address in between loses its registration with the old mapping, and the next
// snapshot must notice (and register afresh, or copy what is no longer anonymous memory).
TEST(Cow, BuffersMappedAgainBetweenSnapshots) {
    ::alarm(120);
    TempDir d;
    const std::size_t bytes = 4 << 20;
    Mapping m(bytes);
    char *p = m.data();
    AsyncShardWriter a(Snapshot::copy_on_write);
    const int file = ::open((d / "backing").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(file, 0);
    ASSERT_EQ(::ftruncate(file, bytes), 0);
    // Steps 4 and 6 map what must be copied over memory registered the snapshot before:
    // shared anonymous memory (4), which another process may write, and a file (6).
    for (std::uint64_t step = 1; step <= 6; ++step) {
        if (step == 3 || step == 5) {   // fresh private anonymous memory at the same address
            ASSERT_EQ(::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p);
        }
        if (step == 4) {   // shared anonymous memory at the same address
            ASSERT_EQ(::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p);
        }
        if (step == 6) {   // a file mapping at the same address
            ASSERT_EQ(::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, file, 0), p);
        }
        std::vector<Slot> slots{place("w", DType::fp32, {1 << 20}, p, step)};
        const std::string ck = snapshot_under_writes(a, d / "root", step, slots);
        expect_saved(ck, slots);
        const bool copied = step == 4 || step == 6;
        EXPECT_EQ(a.stats().slices_protected, copied ? 0u : 1u) << "step " << step << ": " << a.stats().fallback;
        if (copied) {
            EXPECT_NE(a.stats().fallback, "") << "step " << step;
        }
    }
    ::close(file);
    ::alarm(0);
}
