// Write tracking for incremental checkpoints (WriterOptions::track_writes): remembers the
// XXH3 of a slice of host memory from one checkpoint to the next and asks the kernel whether
// any page under it was written in between, so an unchanged slice is recognised without
// hashing it again.
//
//   the kernel:  the pages covering a slice are registered with a userfaultfd in
//                asynchronous write-protect mode (UFFD_FEATURE_WP_ASYNC, Linux 6.7). A
//                write-protected page that is written loses its protection in the fault
//                path, without any handler (about a microsecond per 4 KiB page, once per
//                page per checkpoint interval), and PAGEMAP_SCAN reports it as written.
//   arm():       one PAGEMAP_SCAN over the slice's pages reports which pages were written
//                since the last arm and write-protects them again, atomically per page
//                table. The slice is clean when every page is mapped, present or swapped,
//                and unwritten; anything else (a write, a page that was dropped or never
//                touched, an unmapped page, memory no longer registered) makes it dirty.
//   remember():  the caller hashes the slice after arm() and stores the hash; the next
//                arm() of the same slice returns it if the slice is clean.
//
// A dirty scan re-protects pages that other tracked slices may share (slices need not be
// page-aligned), and that would hide the write from them; so it also forgets the hash of
// every slice that overlaps the scanned pages. A slice forgotten between its arm() and its
// remember() (another thread's scan) stays forgotten: arm() hands out an epoch and
// remember() only stores with the epoch still current.
//
// Only private anonymous memory is tracked (checked with cow::private_anonymous before the
// pages are registered). The kernel registers shared and file-backed mappings too, but a
// write that does not go through this mapping's page tables is never reported: through
// another mapping of the same memfd or shared memory, by a forked child into
// MAP_SHARED|MAP_ANONYMOUS memory, pwrite() or a hole punched into the file behind a
// mapping. Such memory is not tracked: the caller hashes it (Counters::not_private, and
// untracked_reason() says why).
//
// What the kernel does not see, the tracker cannot: stores by a device or by the kernel
// through memory pinned long-term (cudaHostRegister'ed, RDMA-registered, vfio, AF_XDP umem,
// io_uring registered buffers written by IORING_OP_READ_FIXED) bypass the page tables and
// cannot be detected here. Such buffers must not be tracked. Memory that cannot be
// registered (another userfaultfd guards it, as copy-on-write snapshots do; a mapping type
// the kernel does not support) is simply not tracked: the caller hashes it.
#ifndef OMNI_CKPT_WRITE_TRACK_H
#define OMNI_CKPT_WRITE_TRACK_H

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace omni {
namespace ckpt {
namespace track {

// Smaller slices are hashed: their hash costs less than the scan.
constexpr std::uint64_t kMinBytes = std::uint64_t(64) << 10;
// Slices remembered at most; beyond it the oldest-addressed half is forgotten (it is hashed
// again at the next checkpoint, nothing worse).
constexpr std::size_t kMaxSlices = 1u << 20;

struct Lookup {
    bool tracked = false;    // the slice's pages are registered and were armed just now
    bool known = false;      // clean since the hash in `hash` was remembered
    std::uint64_t hash = 0;
    std::uint64_t epoch = 0;   // for remember()
};

struct Counters {
    std::uint64_t arms = 0, clean = 0, dirty = 0, untracked = 0;
    std::uint64_t not_private = 0;   // of untracked: not private anonymous memory
};

class Tracker {
public:
    // The process's tracker, opened on first use; nullptr with the reason in *why (when why
    // is not null) if this kernel or process cannot track writes, or OMNI_CKPT_NO_UFFD=1 is
    // set. A forked child gets a tracker of its own.
    static Tracker *get(std::string *why);

    // Re-arms the pages of [p, p + n) and says whether the slice is unchanged since its hash
    // was remembered. Never fails: what cannot be tracked comes back with tracked = false.
    Lookup arm(const void *p, std::uint64_t n);
    // Stores the hash of [p, p + n) as read after arm() returned `epoch`.
    void remember(const void *p, std::uint64_t n, std::uint64_t hash, std::uint64_t epoch);
    Counters counters() const;
    // Why the last slice that came back untracked was not tracked ("" if none has).
    std::string untracked_reason() const;
    pid_t pid() const { return pid_; }

    Tracker(int uffd, int pagemap, int maps);
    ~Tracker();
    Tracker(const Tracker &) = delete;
    Tracker &operator=(const Tracker &) = delete;

private:
    struct Slice {
        bool known = false;
        std::uint64_t hash = 0;
        std::uint64_t epoch = 0;
    };
    using Key = std::pair<std::uintptr_t, std::uint64_t>;   // address, bytes
    enum class Scan { clean, dirty, unregistered };
    Scan scan_and_rearm(std::uintptr_t lo, std::uintptr_t hi);
    bool register_pages(std::uintptr_t lo, std::uintptr_t hi);
    void forget_overlapping(std::uintptr_t lo, std::uintptr_t hi);

    int uffd_, pagemap_;
    int maps_;                 // /proc/self/maps, for cow::private_anonymous
    pid_t pid_;
    mutable std::mutex mu_;
    bool query_maps_ = true;   // PROCMAP_QUERY works (Linux >= 6.11), else parse the text
    std::string untracked_reason_;
    std::map<Key, Slice> slices_;
    std::uint64_t longest_ = 0;    // bytes of the longest slice remembered (overlap search)
    std::uint64_t next_epoch_ = 1;
    Counters counters_;
};

}  // namespace track
}  // namespace ckpt
}  // namespace omni

#endif
