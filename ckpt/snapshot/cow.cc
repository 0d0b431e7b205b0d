// Copy-on-write snapshots with userfaultfd write protection; see cow.h.
#include "cow.h"

#include "config.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__) && __has_include(<linux/userfaultfd.h>) && __has_include(<sys/eventfd.h>)
#include <linux/userfaultfd.h>
#include <sys/eventfd.h>
#if defined(SYS_userfaultfd) && defined(UFFDIO_WRITEPROTECT)
#define OMNI_CKPT_HAVE_UFFD 1
#endif
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// ThreadSanitizer builds (--enable-sanitizers=thread): see KernelOrderedCopy.
#ifdef OMNI_THREAD_SANITIZER
extern "C" void AnnotateIgnoreReadsBegin(const char *file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char *file, int line);
#endif

#ifdef OMNI_CKPT_HAVE_UFFD
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
// Linux 6.4; older headers lack it.
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#endif

namespace omni {
namespace ckpt {
namespace cow {

namespace {

TestOverrides g_overrides;
std::mutex g_overrides_mu;
std::atomic<int> g_user_mode_guards{0};

std::uintptr_t page_size() {
    static const std::uintptr_t p = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    return p;
}

std::string errno_text(const char *what, int err) { return std::string(what) + ": " + std::strerror(err); }

const char *const kNotAnonymous =
    "userfaultfd cannot protect this memory: only private anonymous memory, not a file or "
    "shared mapping, shared memory or hugetlbfs pages (transparent huge pages are fine)";

// Below this, memcpy: the copy of small tensors is cheap anyway.
constexpr std::size_t kStreamCopyBytes = std::size_t(256) << 10;

#if defined(__x86_64__)
// The copy with non-temporal (streaming) stores: the destination is not read into
// the cache first (no read-for-ownership) and does not evict the trainer's working set, so a
// copy of a large slice moves 2 bytes over the memory bus per byte copied instead of 3. The
// background persist reads the copy later, long after it would have left the cache anyway.
// glibc's memcpy switches to such stores only above a threshold derived from the shared
// cache size, which on large-L3 servers is above the size of most slices. On the 2-core test
// VM this made a single-threaded snapshot of 191 MiB about 20% faster (53 -> 41 ms).
__attribute__((target("avx2"))) void stream_copy_avx2(char *dst, const char *src, std::size_t n) {
    // Streaming stores need 32-byte aligned destinations: the head goes through memcpy.
    const std::size_t head = (32 - (reinterpret_cast<std::uintptr_t>(dst) & 31)) & 31;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 32));
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 64));
        const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 96));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i), a);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i + 32), b);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i + 64), c);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i + 96), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    // Streaming stores are weakly ordered: fence before another thread (the persist) may
    // read the copy. Thread creation in submit(), or the region's lock, synchronises too;
    // this makes it explicit.
    _mm_sfence();
}
#endif

}  // namespace

void snapshot_copy(char *dst, const char *src, std::size_t n) {
#if defined(__x86_64__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2 && n >= kStreamCopyBytes) return stream_copy_avx2(dst, src, n);
#endif
    std::memcpy(dst, src, n);
}

bool user_mode_guards_exist() { return g_user_mode_guards.load() > 0; }

void set_test_overrides(const TestOverrides &o) {
    std::lock_guard<std::mutex> lock(g_overrides_mu);
    g_overrides = o;
}

// ---- Region ------------------------------------------------------------------------------

namespace {

// A chunk's copy reads the trainer's pages while userfaultfd keeps them write-protected: the
// kernel holds a trainer's write to them in its page fault until the copy is done and the
// chunk unprotected. ThreadSanitizer cannot see that order (it records the write before the
// store faults), so in its builds this copy's accesses are not recorded; every other access
// to the trainer's buffers and the shadow still is. Does nothing in other builds.
struct KernelOrderedCopy {
#ifdef OMNI_THREAD_SANITIZER
    KernelOrderedCopy() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
    ~KernelOrderedCopy() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#endif
};

}  // namespace

Region::Region(Guard &g, const char *live, char *shadow, std::uint64_t bytes, std::uintptr_t lo,
               std::uintptr_t hi)
    : g_(g), live_(live), shadow_(shadow), bytes_(bytes), lo_(lo), hi_(hi),
      base_(lo & ~(kChunkBytes - 1)),
      state_((hi - base_ + kChunkBytes - 1) / kChunkBytes, kProtected) {}

std::uint64_t Region::head() const { return lo_ - reinterpret_cast<std::uintptr_t>(live_); }
std::uint64_t Region::tail() const { return reinterpret_cast<std::uintptr_t>(live_) + bytes_ - hi_; }

std::uintptr_t Region::chunk_lo(std::size_t k) const { return std::max(lo_, base_ + k * kChunkBytes); }
std::uintptr_t Region::chunk_hi(std::size_t k) const { return std::min(hi_, base_ + (k + 1) * kChunkBytes); }
std::size_t Region::chunk_of(std::uintptr_t addr) const { return (addr - base_) / kChunkBytes; }

void Region::copy_chunk(std::size_t k) {
    const std::uintptr_t a = chunk_lo(k), b = chunk_hi(k);
    [[maybe_unused]] const KernelOrderedCopy kernel_ordered;
    snapshot_copy(shadow_ + (a - reinterpret_cast<std::uintptr_t>(live_)),
                  reinterpret_cast<const char *>(a), b - a);
    state_[k] = kCopied;
}

void Region::drain() {
    // One chunk per lock hold: the fault handler waits at most one chunk's copy for a writer.
    for (std::size_t k = 0;; ++k) {
        std::lock_guard<std::mutex> lock(mu_);
        if (k >= state_.size() || !protected_) return;
        if (state_[k] != kProtected) continue;   // a write got there first
        copy_chunk(k);
        g_.bytes_drained_.fetch_add(chunk_hi(k) - chunk_lo(k), std::memory_order_relaxed);
        if (!g_.write_protect(chunk_lo(k), chunk_hi(k) - chunk_lo(k), false)) return give_up_locked();
    }
}

void Region::give_up_locked() {
    for (std::size_t i = 0; i < state_.size(); ++i)
        if (state_[i] == kProtected) {
            copy_chunk(i);
            g_.bytes_drained_.fetch_add(chunk_hi(i) - chunk_lo(i), std::memory_order_relaxed);
        }
    g_.unregister_range(lo_, hi_);
    protected_ = false;
}

void Region::unprotect_locked() {
    if (!protected_) return;
    // Only chunks still protected need it; un-protecting wakes any thread waiting on them.
    // The range stays registered for the next snapshot of the same memory (Guard::protect).
    std::size_t k = 0;
    while (k < state_.size() && state_[k] != kProtected) ++k;
    if (k < state_.size() && !g_.write_protect(chunk_lo(k), hi_ - chunk_lo(k), false))
        g_.unregister_range(lo_, hi_);   // part of it unmapped since: this clears the rest
    protected_ = false;
}

void Region::finish() {
    std::lock_guard<std::mutex> lock(mu_);
    unprotect_locked();
}

void Region::fault(std::uintptr_t addr) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::size_t k = chunk_of(addr);
    if (!protected_ || state_[k] != kProtected) {
        // Resolved meanwhile (drained by the persist, or a second fault on the same chunk):
        // the un-protect woke the writer already; waking again is harmless.
        g_.wake(addr);
        return;
    }
    copy_chunk(k);
    g_.bytes_faulted_.fetch_add(chunk_hi(k) - chunk_lo(k), std::memory_order_relaxed);
    // Un-protecting wakes the writer.
    if (!g_.write_protect(chunk_lo(k), chunk_hi(k) - chunk_lo(k), false)) give_up_locked();
}

// ---- Guard -------------------------------------------------------------------------------

#ifdef OMNI_CKPT_HAVE_UFFD

namespace {

int open_uffd(bool user_mode_only) {
    const int flags = O_CLOEXEC | O_NONBLOCK | (user_mode_only ? UFFD_USER_MODE_ONLY : 0);
    return static_cast<int>(::syscall(SYS_userfaultfd, flags));
}

// PROCMAP_QUERY (Linux 6.11): one mapping of /proc/self/maps by address, without reading
// the whole file. The layout is the kernel's ABI (include/uapi/linux/fs.h).
struct ProcmapQuery {
    std::uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size,
        vma_offset, inode;
    std::uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    std::uint64_t vma_name_addr, build_id_addr;
};
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr std::uint64_t kProcmapShared = 0x08;

// One mapping: its range and whether it is private anonymous memory.
struct Vma {
    std::uintptr_t start = 0, end = 0;
    bool private_anonymous = false;
};

// The mappings of this process overlapping [lo, hi), from the text of /proc/self/maps (for
// kernels without PROCMAP_QUERY).
std::vector<Vma> parse_maps(int fd, std::uintptr_t lo, std::uintptr_t hi) {
    std::string text;
    char buf[1 << 16];
    for (off_t off = 0;;) {
        const ssize_t n = ::pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        off += n;
    }
    std::vector<Vma> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        unsigned long start, end, offset, inode;
        unsigned major, minor;
        char perms[5] = {0};
        if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %x:%x %lu", &start, &end, perms, &offset,
                        &major, &minor, &inode) != 7)
            continue;
        if (end <= lo || start >= hi) continue;
        out.push_back({start, end, perms[3] == 'p' && inode == 0 && major == 0 && minor == 0});
    }
    return out;
}

}  // namespace

std::unique_ptr<Guard> Guard::open(std::string *why) {
    const char *off = std::getenv("OMNI_CKPT_NO_UFFD");
    if (off && *off && std::strcmp(off, "0") != 0) {
        *why = "OMNI_CKPT_NO_UFFD is set";
        return nullptr;
    }
    TestOverrides o;
    {
        std::lock_guard<std::mutex> lock(g_overrides_mu);
        o = g_overrides;
    }
    auto g = std::make_unique<Guard>();
    g->pid_ = ::getpid();
    // A userfaultfd that also handles faults taken inside the kernel (a read(2) into a
    // protected buffer waits for the handler like a plain store does) needs privilege
    // (CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd = 1); any process may have one that
    // handles user-mode faults only, where such a system call fails with EFAULT instead.
    int fd = o.user_mode_only ? -1 : open_uffd(false);
    if (fd < 0 && (o.user_mode_only || errno == EPERM)) {
        fd = open_uffd(true);
        g->user_mode_only_ = fd >= 0;
    }
    if (fd < 0) {
        *why = errno_text("userfaultfd", errno);
        return nullptr;
    }
    // The features a descriptor gets are fixed by its one UFFDIO_API call: ask this one
    // what the kernel has, then open the real one with what we want of it.
    uffdio_api api{};
    api.api = UFFD_API;
    const int rc = ::ioctl(fd, UFFDIO_API, &api);
    const int err = errno;
    ::close(fd);
    if (rc != 0) {
        *why = errno_text("userfaultfd UFFDIO_API", err);
        return nullptr;
    }
    if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
        *why = "userfaultfd: this kernel has no write protection (Linux >= 5.7 needed)";
        return nullptr;
    }
    g->unpopulated_ = (api.features & UFFD_FEATURE_WP_UNPOPULATED) && !o.no_wp_unpopulated;
    g->uffd_ = open_uffd(g->user_mode_only_);
    if (g->uffd_ < 0) {
        *why = errno_text("userfaultfd", errno);
        return nullptr;
    }
    uffdio_api want{};
    want.api = UFFD_API;
    want.features = g->unpopulated_ ? UFFD_FEATURE_WP_UNPOPULATED : 0;
    if (::ioctl(g->uffd_, UFFDIO_API, &want) != 0) {
        *why = errno_text("userfaultfd UFFDIO_API", errno);
        return nullptr;   // ~Guard closes the descriptor
    }
    g->maps_ = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    g->query_maps_ = !o.maps_text;
    if (g->maps_ < 0) {
        *why = errno_text("/proc/self/maps", errno);
        return nullptr;
    }
    g->stop_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->stop_ < 0) {
        *why = errno_text("eventfd", errno);
        return nullptr;
    }
    // The handler takes no signals: they belong to the trainer's threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int prc = pthread_create(&g->thread_, nullptr, handler_main, g.get());
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (prc != 0) {
        *why = errno_text("starting the fault handler thread", prc);
        return nullptr;
    }
    g->running_ = true;
    if (g->user_mode_only_) {
        g->counted_ = true;
        ++g_user_mode_guards;
    }
    return g;
}

Guard::~Guard() {
    // In a child forked since, the descriptor still acts on the parent's memory and there is
    // no handler thread: leave both alone (the child's own mappings are not registered).
    if (::getpid() != pid_) return;
    // Nothing may stay protected once the handler is gone: a writer would wait forever.
    release_all();
    unregister_all();
    if (running_) {
        const std::uint64_t one = 1;
        while (::write(stop_, &one, sizeof one) < 0 && errno == EINTR) {
        }
        pthread_join(thread_, nullptr);
    }
    if (stop_ >= 0) ::close(stop_);
    if (maps_ >= 0) ::close(maps_);
    if (uffd_ >= 0) ::close(uffd_);
    if (counted_) --g_user_mode_guards;
}

void *Guard::handler_main(void *arg) {
    static_cast<Guard *>(arg)->serve();
    return nullptr;
}

void Guard::serve() {
    for (;;) {
        pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) continue;   // EINTR
        if (fds[1].revents) return;
        if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return;   // cannot happen while we own it
        uffd_msg msgs[32];
        for (;;) {
            const ssize_t got = ::read(uffd_, msgs, sizeof msgs);
            if (got <= 0) break;   // EAGAIN: all served
            for (ssize_t i = 0; i < got / static_cast<ssize_t>(sizeof(uffd_msg)); ++i)
                if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
                    on_fault(static_cast<std::uintptr_t>(msgs[i].arg.pagefault.address));
        }
    }
}

void Guard::on_fault(std::uintptr_t addr) {
    // The table lock keeps the region alive while its fault is served; release_all takes it
    // too before deleting regions.
    faults_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(table_mu_);
    auto it = regions_.upper_bound(addr);
    if (it != regions_.begin()) {
        --it;
        if (addr < it->second->hi_) return it->second->fault(addr);
    }
    // No region: a stale fault (its region un-protected the page and woke the writer since).
    // Un-protect the page anyway, so that a writer can never fault there forever.
    if (!write_protect(addr & ~(page_size() - 1), page_size(), false)) wake(addr);
}

bool Guard::registered(std::uintptr_t lo, std::uintptr_t hi) {
    std::lock_guard<std::mutex> lock(reg_mu_);
    auto it = registered_.upper_bound(lo);
    return it != registered_.begin() && std::prev(it)->second >= hi;
}

bool Guard::register_range(std::uintptr_t lo, std::uintptr_t hi, std::string *why) {
    uffdio_register reg{};
    reg.range = {lo, hi - lo};
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (::ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
        const int err = errno;
        if (err == EINVAL) *why = kNotAnonymous;
        else if (err == EBUSY) *why = "another userfaultfd already guards this memory";
        else *why = errno_text("UFFDIO_REGISTER", err);
        return false;
    }
    if (!(reg.ioctls & (std::uint64_t(1) << _UFFDIO_WRITEPROTECT))) {
        uffdio_range r{lo, hi - lo};
        (void)::ioctl(uffd_, UFFDIO_UNREGISTER, &r);
        *why = "userfaultfd cannot write-protect this memory";
        return false;
    }
    std::lock_guard<std::mutex> lock(reg_mu_);
    // Overlapping or touching ranges are one registered range now.
    std::uintptr_t a = lo, b = hi;
    auto it = registered_.upper_bound(hi);
    while (it != registered_.begin()) {
        auto prev = std::prev(it);
        if (prev->second < a) break;
        a = std::min(a, prev->first);
        b = std::max(b, prev->second);
        it = registered_.erase(prev);
    }
    registered_[a] = b;
    return true;
}

void Guard::unregister_range(std::uintptr_t lo, std::uintptr_t hi) {
    // Clears the protection of the range and wakes every thread waiting on it; only ranges
    // registered with this userfaultfd are touched.
    uffdio_range r{lo, hi - lo};
    (void)::ioctl(uffd_, UFFDIO_UNREGISTER, &r);
    std::lock_guard<std::mutex> lock(reg_mu_);
    // Forget every remembered range that overlaps: the next protect registers afresh.
    auto it = registered_.upper_bound(hi);
    while (it != registered_.begin()) {
        auto prev = std::prev(it);
        if (prev->second <= lo) break;
        it = registered_.erase(prev);
    }
}

void Guard::unregister_all() {
    std::map<std::uintptr_t, std::uintptr_t> all;
    {
        std::lock_guard<std::mutex> lock(reg_mu_);
        all.swap(registered_);
    }
    for (const auto &e : all) {
        uffdio_range r{e.first, e.second - e.first};
        (void)::ioctl(uffd_, UFFDIO_UNREGISTER, &r);
    }
}

bool private_anonymous(int maps, bool *query, std::uintptr_t lo, std::uintptr_t hi) {
    if (maps < 0) return false;
    std::vector<Vma> vmas;
    for (std::uintptr_t a = lo; a < hi && *query;) {
        ProcmapQuery q{};
        q.size = sizeof q;
        q.query_addr = a;
        if (::ioctl(maps, kProcmapQuery, &q) != 0) {
            if (errno == ENOENT) return false;   // a hole: not mapped
            *query = false;   // an older kernel: read the text below
            break;
        }
        vmas.push_back({static_cast<std::uintptr_t>(q.vma_start), static_cast<std::uintptr_t>(q.vma_end),
                        !(q.vma_flags & kProcmapShared) && q.inode == 0 && q.dev_major == 0 &&
                            q.dev_minor == 0});
        a = static_cast<std::uintptr_t>(q.vma_end);
    }
    if (!*query) vmas = parse_maps(maps, lo, hi);
    // Every byte covered, by private anonymous mappings only.
    std::uintptr_t covered = lo;
    for (const auto &v : vmas) {
        if (!v.private_anonymous || v.start > covered) return false;
        covered = std::max(covered, v.end);
    }
    return covered >= hi;
}

// userfaultfd also registers shared memory (MAP_SHARED|MAP_ANONYMOUS, memfd, /dev/shm, even
// privately mapped) and hugetlbfs; but protecting our mapping of shared memory does not stop
// another mapping (another process) from writing to it, so only private anonymous memory may
// be left in place.
bool Guard::private_anonymous(std::uintptr_t lo, std::uintptr_t hi) {
    return cow::private_anonymous(maps_, &query_maps_, lo, hi);
}

bool Guard::write_protect(std::uintptr_t lo, std::uint64_t n, bool on) {
    uffdio_writeprotect wp{};
    wp.range = {lo, n};
    wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
    for (int attempt = 0; attempt < 100; ++attempt) {
        if (::ioctl(uffd_, UFFDIO_WRITEPROTECT, &wp) == 0) return true;
        if (errno != EAGAIN && errno != EINTR) return false;
    }
    return false;
}

void Guard::wake(std::uintptr_t addr) {
    uffdio_range r{addr & ~(page_size() - 1), page_size()};
    (void)::ioctl(uffd_, UFFDIO_WAKE, &r);
}

Region *Guard::protect(const char *live, char *shadow, std::uint64_t bytes, std::string *why) {
    const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(live), ps = page_size();
    const std::uintptr_t lo = (p + ps - 1) & ~(ps - 1), hi = (p + bytes) & ~(ps - 1);
    if (hi <= lo || hi - lo < kMinBytes) {
        *why = "smaller than " + std::to_string(kMinBytes >> 10) + " KiB of whole pages";
        return nullptr;
    }
    Region *r;
    std::unique_lock<std::mutex> region_lock;
    {
        std::lock_guard<std::mutex> lock(table_mu_);
        // Regions never overlap: the same memory added twice (tied weights) is copied the
        // second time. Only the region starting last below `hi` can overlap [lo, hi).
        auto it = regions_.lower_bound(hi);
        if (it != regions_.begin() && std::prev(it)->second->hi_ > lo) {
            *why = "its memory is also part of another slice of this snapshot";
            return nullptr;
        }
        auto owned = std::make_unique<Region>(*this, live, shadow, bytes, lo, hi);
        r = owned.get();
        regions_.emplace(lo, std::move(owned));
        // Held until the range is protected: a stale fault from an earlier snapshot of the
        // same memory must not be served against a half-made region.
        region_lock = std::unique_lock<std::mutex>(r->mu_);
    }
    auto drop = [&](const std::string &reason) -> Region * {
        *why = reason;
        region_lock.unlock();
        std::lock_guard<std::mutex> lock(table_mu_);
        regions_.erase(lo);
        return nullptr;
    };
    if (!private_anonymous(lo, hi)) return drop(kNotAnonymous);
    // Without UFFD_FEATURE_WP_UNPOPULATED (Linux < 6.4) a page never touched has no page
    // table entry to protect, and a write to it would go unseen: populate first.
    if (!unpopulated_ &&
        ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_POPULATE_WRITE) != 0)
        return drop(errno_text("MADV_POPULATE_WRITE (Linux >= 5.14)", errno));
    // Registered ranges are kept from one snapshot to the next (unregistered by ~Guard):
    // registration alone changes nothing for the memory, and a trainer snapshots the same
    // buffers every time, so each snapshot then costs one ioctl per slice instead of three
    // (register, which splits the mapping under the mmap lock, protect, unregister).
    const bool known = registered(lo, hi);
    std::string reason;
    if (!known && !register_range(lo, hi, &reason)) return drop(reason);
    r->protected_ = true;   // from here on, a failure un-protects what it may have protected
    if (write_protect(lo, hi - lo, true)) return r;
    int err = errno;
    if (known && err == ENOENT) {
        // Unmapped and mapped again since: the registration went with the old mapping.
        unregister_range(lo, hi);
        if (!register_range(lo, hi, &reason)) {
            r->unprotect_locked();
            return drop(reason);
        }
        if (write_protect(lo, hi - lo, true)) return r;
        err = errno;
    }
    r->unprotect_locked();
    return drop(errno_text("UFFDIO_WRITEPROTECT", err));
}

#else  // !OMNI_CKPT_HAVE_UFFD

std::unique_ptr<Guard> Guard::open(std::string *why) {
    *why = "built without userfaultfd (not Linux, or headers without write protection)";
    return nullptr;
}
Guard::~Guard() = default;
void *Guard::handler_main(void *) { return nullptr; }
void Guard::serve() {}
void Guard::on_fault(std::uintptr_t) {}
bool Guard::write_protect(std::uintptr_t, std::uint64_t, bool) { return false; }
void Guard::wake(std::uintptr_t) {}
bool private_anonymous(int, bool *, std::uintptr_t, std::uintptr_t) { return false; }
bool Guard::private_anonymous(std::uintptr_t, std::uintptr_t) { return false; }
bool Guard::registered(std::uintptr_t, std::uintptr_t) { return false; }
bool Guard::register_range(std::uintptr_t, std::uintptr_t, std::string *) { return false; }
void Guard::unregister_range(std::uintptr_t, std::uintptr_t) {}
void Guard::unregister_all() {}
Region *Guard::protect(const char *, char *, std::uint64_t, std::string *why) {
    *why = "built without userfaultfd";
    return nullptr;
}

#endif

std::size_t Guard::registered_count() {
    std::lock_guard<std::mutex> lock(reg_mu_);
    return registered_.size();
}

void Guard::release_all() {
    if (::getpid() != pid_) return;   // see ~Guard
    std::lock_guard<std::mutex> lock(table_mu_);
    for (auto &e : regions_) e.second->finish();
    regions_.clear();
    // A trainer whose buffers move from one checkpoint to the next leaves registrations of
    // memory it freed: bounded here, when nothing is protected.
    if (registered_count() > kMaxRegistered) unregister_all();
}

}  // namespace cow
}  // namespace ckpt
}  // namespace omni
