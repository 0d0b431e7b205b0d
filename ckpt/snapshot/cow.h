// Copy-on-write snapshots of host memory, for AsyncShardWriter in Snapshot::copy_on_write
// mode: instead of copying a slice when it is added, the library write-protects the caller's
// buffer with userfaultfd, and the background persist makes the copy; a write that gets
// there first copies its own piece.
//
//   add_tensor:  the page-aligned interior of the slice's buffer is registered with a
//                userfaultfd (UFFDIO_REGISTER_MODE_WP; it stays registered, unprotected,
//                between snapshots, so the next snapshot of the same buffer is one ioctl)
//                and write-protected; the partial pages before and after it are copied
//                (they share pages with other data).
//   a write:     the writing thread stops in a write-protect fault; the handler thread copies
//                the enclosing chunk (kChunkBytes, aligned, clipped to the interior) into the
//                slice's shadow buffer and un-protects the chunk, which lets the write
//                proceed. A trainer rewriting a whole tensor before the persist's drain
//                gets there pays one fault per chunk. Chunks are aligned to 2 MiB so that
//                memory in transparent huge pages is protected and released a page table
//                entry per huge page, never split.
//   persist:     first drains every region of the snapshot: copies each chunk still
//                protected into the shadow and un-protects it, at memory speed, before it
//                writes anything; then writes from the shadows as a copy snapshot would.
//                The caller's memory is protected for the length of one memcpy of it in
//                the background, not for the length of the write to storage: a trainer
//                that rewrites its buffers soon after the snapshot rarely faults, and a
//                system call into them that would fail with EFAULT (user-mode-only
//                userfaultfd) has a window of milliseconds.
//
// The handler never blocks on anything but a region's lock, which is held only for memcpy
// and ioctls; no signal handlers are involved. Memory that cannot be registered (file or
// shared mappings, hugetlbfs pages, memory another userfaultfd guards) is reported through `why`
// and the caller copies it instead.
#ifndef OMNI_CKPT_COW_H
#define OMNI_CKPT_COW_H

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace omni {
namespace ckpt {
namespace cow {

// The grain of the copies the fault handler makes: one fault per 2 MiB a trainer rewrites.
// A transparent huge page is this size, so an aligned chunk is one page table entry.
constexpr std::uint64_t kChunkBytes = std::uint64_t(2) << 20;
// Smaller slices are copied: their copy costs about what registering them costs.
constexpr std::uint64_t kMinBytes = std::uint64_t(64) << 10;

class Guard;

// One slice of a snapshot. Bytes [0, bytes) of the slice are `live`[0, bytes) of the caller
// as of protect(); the page-aligned interior stays in place, everything else is in
// `shadow`[0, bytes) (the caller copies the partial pages, the fault handler or drain()
// the chunks).
class Region final {
public:
    // Copies every chunk still protected into the shadow and un-protects it, one chunk per
    // hold of the region's lock: afterwards shadow[0, bytes) is the whole slice as of
    // protect() and writes to the caller's memory no longer fault.
    void drain();
    // Un-protects and unregisters what is left: the caller's memory is its own again.
    void finish();

    std::uint64_t head() const;   // bytes before the protected interior
    std::uint64_t tail() const;   // bytes after it
    std::uint64_t protected_bytes() const { return hi_ - lo_; }

    Region(Guard &g, const char *live, char *shadow, std::uint64_t bytes, std::uintptr_t lo,
           std::uintptr_t hi);

private:
    friend class Guard;
    enum State : std::uint8_t { kProtected, kCopied };
    std::uintptr_t chunk_lo(std::size_t k) const;
    std::uintptr_t chunk_hi(std::size_t k) const;
    std::size_t chunk_of(std::uintptr_t addr) const;
    void fault(std::uintptr_t addr);   // the handler thread
    void copy_chunk(std::size_t k);
    // The kernel refused to un-protect a chunk: copies every chunk still protected, so the
    // snapshot stays whole, then unregisters the region, which un-protects all of it and
    // wakes every waiting writer.
    void give_up_locked();
    void unprotect_locked();

    Guard &g_;
    const char *live_;
    char *shadow_;
    std::uint64_t bytes_;
    std::uintptr_t lo_, hi_;   // the protected interior
    std::uintptr_t base_;      // lo_ rounded down to a chunk boundary
    std::mutex mu_;            // guards everything below
    std::vector<State> state_;   // per chunk
    bool protected_ = false;   // write protection set (in part or whole) and not yet cleared
};

// A userfaultfd, the thread that serves its write-protect faults, and the regions it guards.
class Guard {
public:
    // Null, with the reason in *why, when this process cannot have one (kernel without
    // userfaultfd or without write protection, not permitted, OMNI_CKPT_NO_UFFD set).
    static std::unique_ptr<Guard> open(std::string *why);
    ~Guard();   // finishes every region, unregisters, stops the thread, closes descriptors
    Guard(const Guard &) = delete;
    Guard &operator=(const Guard &) = delete;

    // Write-protects the page-aligned interior of live[0, bytes). Null, with the reason in
    // *why, when it cannot (too small, overlapping another region, memory of a kind
    // userfaultfd cannot protect); the caller then copies the slice itself.
    Region *protect(const char *live, char *shadow, std::uint64_t bytes, std::string *why);
    // Finishes and forgets every region (their memory stays registered, unprotected).
    void release_all();

    // Whether kernel-mode writes (system calls writing into protected memory) fail with
    // EFAULT instead of waiting for the handler: the unprivileged userfaultfd.
    bool user_mode_only() const { return user_mode_only_; }
    std::uint64_t faults() const { return faults_.load(std::memory_order_relaxed); }
    std::uint64_t bytes_faulted() const { return bytes_faulted_.load(std::memory_order_relaxed); }
    std::uint64_t bytes_drained() const { return bytes_drained_.load(std::memory_order_relaxed); }

    Guard() = default;   // use open()

private:
    friend class Region;
    static void *handler_main(void *arg);
    void serve();
    void on_fault(std::uintptr_t addr);
    bool write_protect(std::uintptr_t lo, std::uint64_t n, bool on);
    void wake(std::uintptr_t addr);
    bool private_anonymous(std::uintptr_t lo, std::uintptr_t hi);
    bool registered(std::uintptr_t lo, std::uintptr_t hi);   // all of it, by us
    bool register_range(std::uintptr_t lo, std::uintptr_t hi, std::string *why);
    void unregister_range(std::uintptr_t lo, std::uintptr_t hi);
    void unregister_all();
    std::size_t registered_count();

    pid_t pid_ = 0;            // the process that opened it (a forked child leaves it alone)
    int uffd_ = -1;
    bool counted_ = false;     // counted in user_mode_guards_exist()
    int maps_ = -1;            // /proc/self/maps
    bool query_maps_ = true;   // PROCMAP_QUERY works (Linux >= 6.11), else parse the text
    int stop_ = -1;   // eventfd: the handler thread exits when it is readable
    bool user_mode_only_ = false;
    bool unpopulated_ = false;   // UFFD_FEATURE_WP_UNPOPULATED: empty pages are protected too
    pthread_t thread_{};
    bool running_ = false;
    std::mutex table_mu_;   // guards regions_; held by the handler while it serves a fault
    std::map<std::uintptr_t, std::unique_ptr<Region>> regions_;   // by interior start
    // Ranges registered with uffd_ (write protection mode), kept from one snapshot to the
    // next; at most kMaxRegistered between snapshots.
    static constexpr std::size_t kMaxRegistered = 4096;
    std::mutex reg_mu_;
    std::map<std::uintptr_t, std::uintptr_t> registered_;   // start -> end, disjoint
    // Faults served (every write that stopped), bytes the handler copied for them, bytes
    // copied for no write (Region::drain, give_up_locked).
    std::atomic<std::uint64_t> faults_{0}, bytes_faulted_{0}, bytes_drained_{0};
};

// Whether this process has a Guard on the unprivileged, user-mode-only userfaultfd: then a
// system call writing into protected memory fails with EFAULT, and a reader that gets EFAULT
// for its own destination may touch it (from user mode) and try again.
bool user_mode_guards_exist();

// Whether [lo, hi) of this process is all private anonymous memory (MAP_PRIVATE, not
// file-backed, not shared memory: nothing but this process's own page tables can write it).
// `maps` is an open /proc/self/maps; *query says PROCMAP_QUERY may be used (Linux >= 6.11)
// and is cleared, for the next calls, when the kernel lacks it (the text is read instead).
// False for a hole, or where this build has no userfaultfd. Used by Guard::protect and by
// write tracking (write_track.cc); not thread-safe for one *query.
bool private_anonymous(int maps, bool *query, std::uintptr_t lo, std::uintptr_t hi);

// The copy of both snapshot modes (add_tensor's in copy mode, the fault handler's): with
// streaming stores for large sizes where the CPU has AVX2, memcpy otherwise.
void snapshot_copy(char *dst, const char *src, std::size_t n);

// For tests: pretend the process may only have an unprivileged userfaultfd, or that the
// kernel lacks UFFD_FEATURE_WP_UNPOPULATED (then pages are populated before protection).
// Applies to guards opened afterwards.
struct TestOverrides {
    bool user_mode_only = false;
    bool no_wp_unpopulated = false;
    bool maps_text = false;   // read /proc/self/maps as text, as before Linux 6.11
};
void set_test_overrides(const TestOverrides &o);

}  // namespace cow
}  // namespace ckpt
}  // namespace omni

#endif
