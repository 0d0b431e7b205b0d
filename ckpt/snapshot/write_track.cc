// Write tracking with userfaultfd asynchronous write protection and PAGEMAP_SCAN; see
// write_track.h.
#include "write_track.h"

#include "cow.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <vector>

#if defined(__linux__) && __has_include(<linux/userfaultfd.h>)
#include <linux/fs.h>
#include <linux/userfaultfd.h>
#if defined(SYS_userfaultfd) && defined(UFFDIO_WRITEPROTECT)
#define OMNI_CKPT_HAVE_WP_ASYNC 1
#endif
#endif

#ifdef OMNI_CKPT_HAVE_WP_ASYNC
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
// Linux 6.7 added these; Debian 12's headers (6.1) lack them. The values are the kernel's
// ABI (include/uapi/linux/userfaultfd.h and fs.h).
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef PAGEMAP_SCAN
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
struct page_region {
    __u64 start, end, categories;
};
struct pm_scan_arg {
    __u64 size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
        category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif
#endif

namespace omni {
namespace ckpt {
namespace track {

namespace {

std::uintptr_t page_size() {
    static const std::uintptr_t p = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    return p;
}

std::string errno_text(const char *what, int err) { return std::string(what) + ": " + std::strerror(err); }

const char *const kNotPrivate =
    "write tracking: only private anonymous memory is tracked; this slice is (in part) a file "
    "or shared mapping, shared memory or hugetlbfs pages, which can be written without this "
    "mapping's page tables seeing it, so it is hashed";
const char *const kNotRegistered =
    "write tracking: the kernel would not register or scan this memory (another userfaultfd, "
    "e.g. a copy-on-write snapshot's, guards it, or the mapping changed), so it is hashed";

#ifdef OMNI_CKPT_HAVE_WP_ASYNC
// Asynchronous write protection resolves every fault in the kernel, so a descriptor that
// handles user-mode faults only (which any process may open) tracks writes made by system
// calls as well (those that fault on the page tables: not writes into long-term pinned
// memory, see write_track.h); the unrestricted kind is the fallback for kernels before 5.11.
int open_uffd(std::string *why) {
    int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0 && errno == EINVAL)
        fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd < 0) {
        *why = errno_text("userfaultfd", errno);
        return -1;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_WP_ASYNC;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) {
        const int err = errno;
        ::close(fd);
        *why = err == EINVAL ? "userfaultfd: this kernel has no asynchronous write protection "
                               "(Linux >= 6.7 needed)"
                             : errno_text("userfaultfd UFFDIO_API", err);
        return -1;
    }
    return fd;
}
#endif

}  // namespace

Tracker::Tracker(int uffd, int pagemap, int maps)
    : uffd_(uffd), pagemap_(pagemap), maps_(maps), pid_(::getpid()) {}

Tracker::~Tracker() {
    ::close(uffd_);
    ::close(pagemap_);
    ::close(maps_);
}

Tracker *Tracker::get(std::string *why) {
    static std::mutex mu;
    static Tracker *current = nullptr;
    static std::string failure;
    static pid_t failed_in = 0;
    std::string ignored;
    if (!why) why = &ignored;
    std::lock_guard<std::mutex> lock(mu);
    const pid_t pid = ::getpid();
    // A child of fork() has neither the registrations nor the page tables that the parent's
    // descriptors speak of (/proc/self/pagemap was opened as the parent's); the parent's
    // tracker is left alone (its mutex may have been held by another thread at the fork).
    if (current && current->pid() == pid) return current;
    if (failed_in == pid) {
        *why = failure;
        return nullptr;
    }
    const char *off = std::getenv("OMNI_CKPT_NO_UFFD");
    if (off && *off && std::strcmp(off, "0") != 0) {
        *why = "OMNI_CKPT_NO_UFFD is set";
        return nullptr;
    }
#ifdef OMNI_CKPT_HAVE_WP_ASYNC
    const int uffd = open_uffd(&failure);
    if (uffd >= 0) {
        const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        const int maps = pagemap >= 0 ? ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC) : -1;
        if (maps >= 0) {
            current = new Tracker(uffd, pagemap, maps);   // lives as long as the process
            return current;
        }
        failure = errno_text(pagemap < 0 ? "/proc/self/pagemap" : "/proc/self/maps", errno);
        if (pagemap >= 0) ::close(pagemap);
        ::close(uffd);
    }
#else
    failure = "this build has no userfaultfd (Linux only)";
#endif
    failed_in = pid;
    *why = failure;
    return nullptr;
}

#ifdef OMNI_CKPT_HAVE_WP_ASYNC

bool Tracker::register_pages(std::uintptr_t lo, std::uintptr_t hi) {
    uffdio_register r{};
    r.range.start = lo;
    r.range.len = hi - lo;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    // EBUSY: another userfaultfd (a copy-on-write snapshot's) guards some of it; EINVAL: a
    // mapping the kernel cannot protect. Either way the slice is hashed.
    return ::ioctl(uffd_, UFFDIO_REGISTER, &r) == 0;
}

Tracker::Scan Tracker::scan_and_rearm(std::uintptr_t lo, std::uintptr_t hi) {
    page_region regions[32];
    bool clean = true;
    std::uintptr_t expect = lo;   // where the next region must start for no gap
    std::uintptr_t at = lo;
    while (at < hi) {
        pm_scan_arg a{};
        a.size = sizeof a;
        // Every page is matched (no category filter), so every page is protected again;
        // CHECK_WPASYNC fails the call if a mapping in the range is not registered with us.
        a.flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC;
        a.start = at;
        a.end = hi;
        a.vec = reinterpret_cast<std::uintptr_t>(regions);
        a.vec_len = sizeof regions / sizeof regions[0];
        a.return_mask = PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
        const long n = ::ioctl(pagemap_, PAGEMAP_SCAN, &a);
        if (n < 0) {
            if (errno == EINTR) continue;
            return Scan::unregistered;
        }
        for (long i = 0; i < n; ++i) {
            const page_region &r = regions[i];
            if (r.start != expect) clean = false;   // an unmapped gap
            expect = r.end;
            if ((r.categories & PAGE_IS_WRITTEN) ||
                !(r.categories & (PAGE_IS_PRESENT | PAGE_IS_SWAPPED)))
                clean = false;
        }
        if (a.walk_end <= at) return Scan::unregistered;   // no progress: never loop
        at = a.walk_end;
    }
    if (expect != hi) clean = false;   // unmapped at the end
    return clean ? Scan::clean : Scan::dirty;
}

#else

bool Tracker::register_pages(std::uintptr_t, std::uintptr_t) { return false; }
Tracker::Scan Tracker::scan_and_rearm(std::uintptr_t, std::uintptr_t) { return Scan::unregistered; }

#endif

void Tracker::forget_overlapping(std::uintptr_t lo, std::uintptr_t hi) {
    // A slice overlapping [lo, hi) starts before hi and no earlier than lo - longest_.
    const std::uintptr_t from = lo > longest_ ? lo - longest_ : 0;
    for (auto it = slices_.lower_bound(Key(from, 0)); it != slices_.end() && it->first.first < hi; ++it) {
        const std::uintptr_t end = it->first.first + it->first.second;
        const std::uintptr_t ps = page_size();
        // Overlap in pages, not bytes: a slice ending in a page the scan re-protected lost
        // that page's written state too.
        if ((end + ps - 1) / ps * ps > lo) {
            it->second.known = false;
            it->second.epoch = next_epoch_++;
        }
    }
}

Lookup Tracker::arm(const void *p, std::uint64_t n) {
    Lookup out;
    const std::uintptr_t ps = page_size();
    const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(p);
    if (n == 0 || addr + n < addr) return out;
    // A tracker used by a forked child (a writer opened before the fork) would scan the
    // parent's page tables: in a child, nothing is tracked through it.
    if (::getpid() != pid_) return out;
    const std::uintptr_t lo = addr / ps * ps, hi = (addr + n + ps - 1) / ps * ps;
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.arms;
    Scan s = scan_and_rearm(lo, hi);
    if (s == Scan::unregistered) {
        // New memory, or memory that was unmapped and mapped again since: register the pages
        // and protect them; until then every page counts as written. Only private anonymous
        // memory: the kernel registers shared and file-backed mappings as well, but a write
        // through another mapping of the same pages (another process, another mmap of a
        // memfd), pwrite() to the file or a punched hole never shows in our page tables,
        // and the slice would be reported clean with stale bytes.
        const char *reason = nullptr;
        if (!cow::private_anonymous(maps_, &query_maps_, lo, hi)) {
            reason = kNotPrivate;
            ++counters_.not_private;
        } else if (register_pages(lo, hi)) {
            s = scan_and_rearm(lo, hi);
        }
        if (s == Scan::unregistered) {
            if (!reason) reason = kNotRegistered;
            untracked_reason_ = reason;
            ++counters_.untracked;
            forget_overlapping(lo, hi);
            slices_.erase(Key(addr, n));
            return out;
        }
        s = Scan::dirty;
    }
    if (s == Scan::dirty) {
        ++counters_.dirty;
        forget_overlapping(lo, hi);
    } else {
        ++counters_.clean;
    }
    if (slices_.size() >= kMaxSlices && !slices_.count(Key(addr, n))) {
        // Bounded memory: forget half. Forgetting is always safe (it means hashing again).
        auto mid = slices_.begin();
        std::advance(mid, slices_.size() / 2);
        slices_.erase(slices_.begin(), mid);
    }
    Slice &sl = slices_[Key(addr, n)];
    if (s == Scan::dirty) {
        sl.known = false;
        sl.epoch = next_epoch_++;
    }
    if (n > longest_) longest_ = n;
    out.tracked = true;
    out.known = sl.known;
    out.hash = sl.hash;
    out.epoch = sl.epoch;
    return out;
}

void Tracker::remember(const void *p, std::uint64_t n, std::uint64_t hash, std::uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slices_.find(Key(reinterpret_cast<std::uintptr_t>(p), n));
    if (it == slices_.end() || it->second.epoch != epoch) return;
    it->second.known = true;
    it->second.hash = hash;
}

Counters Tracker::counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
}

std::string Tracker::untracked_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return untracked_reason_;
}

}  // namespace track
}  // namespace ckpt
}  // namespace omni
