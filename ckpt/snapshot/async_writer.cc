// AsyncShardWriter: the training loop pays for a memcpy into host memory (Snapshot::copy) or
// for write-protecting its buffers (Snapshot::copy_on_write, cow.h); hashing, HDF5 and fsync
// happen in a background thread, which in copy-on-write mode first makes the copy.
//
// The snapshot arena is a list of large blocks reused from one checkpoint to the next: after
// the first checkpoint the copy touches no fresh pages, so the stall is bounded by memory
// bandwidth rather than by page faults. A copy-on-write slice gets an arena range of its
// size too, its shadow: the partial pages around the protected part are copied there at
// once, the protected part by the fault handler or the persist's drain (cow.h).
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>

#include "ckpt/format.h"
#include "ckpt/h5.h"
#include "ckpt/index.h"
#include "ckpt/writer_internal.h"
#include "cow.h"
#include "omni/ckpt_cpp.h"
#include "write_track.h"

namespace omni {
namespace ckpt {

namespace {
constexpr std::size_t kBlockBytes = std::size_t(256) << 20;
// The size of new arena blocks: kBlockBytes, smaller in tests that need many blocks.
std::atomic<std::size_t> g_block_bytes{kBlockBytes};

struct FreeDeleter {
    void operator()(char *p) const { std::free(p); }
};

struct Block {
    std::unique_ptr<char, FreeDeleter> data;
    std::size_t size = 0;
};

// Arena blocks are page aligned, so streaming stores (cow::snapshot_copy) run on aligned
// lines from the first byte. Not advised into transparent huge pages: measured here, the
// first snapshot into fresh huge pages took anywhere from 0.25x to 3x the time of 4 KiB
// pages, depending on how much compaction the kernel had to do. Returns null when out of
// memory.
char *alloc_block(std::size_t size) {
    void *p = nullptr;
    if (::posix_memalign(&p, 4096, size) != 0) return nullptr;
    return static_cast<char *>(p);
}

struct Pending {
    std::string name;
    DType dtype;
    Shape shape, offset, count;
    const char *data;      // the copy in the arena; null: a slice the base holds unchanged,
                           // not snapshotted at all
    cow::Region *region;   // a protected slice: `data` is whole once the region is drained
    Change change;
    const char *live = nullptr;   // the caller's buffer, armed by write tracking at `epoch`
    std::uint64_t epoch = 0;
};
}  // namespace

void set_arena_block_bytes(std::size_t bytes) { g_block_bytes = bytes ? bytes : kBlockBytes; }

struct AsyncShardWriter::Impl {
    std::vector<Block> blocks;
    std::size_t block = 0, used = 0;   // allocation cursor
    std::vector<Pending> pending;
    std::set<std::string> names;   // of `pending`, for the checks add_tensor makes at the call
    std::vector<RankState> states;
    std::string root;
    std::uint64_t step = 0;
    std::uint32_t rank = 0;
    WriterOptions options;
    BaseSlices base;                      // options.base's slices, read at begin()
    track::Tracker *tracker = nullptr;    // options.track_writes where the kernel can
    bool open = false;
    pthread_t worker{};
    bool running = false;   // worker started and not joined yet
    Status result;
    bool result_seen = true;
    // Copy-on-write: the mode asked for, the userfaultfd guard (opened at the first
    // copy_on_write begin and kept), or why there is none.
    Snapshot snapshot = Snapshot::copy;
    std::unique_ptr<cow::Guard> guard;
    std::string guard_error;
    AsyncStats stats;
    std::uint64_t faults_before = 0, faulted_before = 0, drained_before = 0;   // the guard's
                                                                             // counters at begin

    char *alloc(std::size_t n) {
        while (block < blocks.size() && blocks[block].size - used < n) {
            ++block;
            used = 0;
        }
        if (block == blocks.size()) {
            Block b;
            b.size = std::max(n, g_block_bytes.load());
            b.data.reset(alloc_block(b.size));
            if (!b.data) return nullptr;
            blocks.push_back(std::move(b));
            used = 0;
        }
        char *p = blocks[block].data.get() + used;
        used += (n + 63) & ~std::size_t(63);   // keep slices cache-line aligned
        if (used > blocks[block].size) used = blocks[block].size;
        return p;
    }

    // The persist runs on a thread of its own, started SCHED_BATCH: it gets its fair share
    // of the CPU, but its wake-ups never preempt the training loop's threads. With a normal
    // policy, starting K persists on a machine with fewer cores preempted the trainer in the
    // middle of submit() and added milliseconds to the stall (0.3 to 17 ms measured on 2
    // cores). Where SCHED_BATCH is refused, a thread with the default policy; where no thread
    // can be started, the persist runs in the caller (correct, only not asynchronous).
    static void *persist_main(void *arg) {
        Impl *a = static_cast<Impl *>(arg);
        // Nothing may unwind out of a pthread start routine (it would terminate the
        // trainer): an allocation failure becomes the persist's error.
        try {
            a->result = a->persist();
        } catch (const std::bad_alloc &) {
            a->result = make_error("persist of rank " + std::to_string(a->rank) + ": out of memory");
        } catch (...) {
            a->result = make_error("persist of rank " + std::to_string(a->rank) + ": unexpected failure");
        }
        // Whatever happened, the caller's memory is its own again once the persist is over.
        if (a->guard) a->guard->release_all();
        return nullptr;
    }
    bool start_worker() {
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) return false;
        sched_param param{};
        param.sched_priority = 0;
        const bool batch = pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED) == 0 &&
                           pthread_attr_setschedpolicy(&attr, SCHED_BATCH) == 0 &&
                           pthread_attr_setschedparam(&attr, &param) == 0;
        int rc = pthread_create(&worker, batch ? &attr : nullptr, persist_main, this);
        if (rc != 0 && batch) rc = pthread_create(&worker, nullptr, persist_main, this);
        pthread_attr_destroy(&attr);
        running = rc == 0;
        return running;
    }
    void join() {
        if (!running) return;
        pthread_join(worker, nullptr);
        running = false;
    }

    Status persist() {
        // Copy-on-write: make the copies first, at memory speed, so that the caller's memory
        // is protected only that long rather than until the last byte reaches storage.
        for (const auto &p : pending)
            if (p.region) {
                p.region->drain();
                p.region->finish();
            }
        // The writer reads snapshots, not the caller's memory: what tracking knows about the
        // caller's buffers is recorded here, from each slice's checksum.
        WriterOptions wo = options;
        wo.track_writes = false;
        auto w = ShardWriter::open(root, step, rank, wo);
        if (!w) return make_error(w.error());
        for (const auto &p : pending) {
            if (auto st = w.value()->add_tensor(p.name, p.dtype, p.shape, p.offset, p.count, p.data, p.change); !st)
                return st;
            // The snapshot holds the buffer's bytes as of the arm, so its checksum is theirs.
            if (p.live)
                tracker->remember(p.live, element_count(p.count) * dtype_size(p.dtype),
                                  last_slice_hash(*w.value()), p.epoch);
        }
        for (const auto &s : states)
            if (auto st = w.value()->add_rank_state(s); !st) return st;
        return w.value()->finish();
    }

    // A copy_on_write slice: protected in place, or null (then copied) with the reason in
    // stats.fallback for the first one.
    cow::Region *protect(const std::string &name, const char *data, char *shadow, std::size_t bytes) {
        if (!guard) {
            if (stats.fallback.empty()) stats.fallback = guard_error;
            return nullptr;
        }
        if (bytes < cow::kMinBytes) return nullptr;   // by design, not a fallback
        std::string why;
        cow::Region *r = guard->protect(data, shadow, bytes, &why);
        if (!r && stats.fallback.empty()) stats.fallback = "tensor " + name + ": " + why;
        return r;
    }
};

AsyncShardWriter::AsyncShardWriter() : impl_(std::make_unique<Impl>()) {}

AsyncShardWriter::AsyncShardWriter(Snapshot snapshot) : impl_(std::make_unique<Impl>()) {
    impl_->snapshot = snapshot;
}

AsyncShardWriter::~AsyncShardWriter() {
    impl_->join();
    impl_->guard.reset();   // un-protects a snapshot never submitted, stops the handler
}

void AsyncShardWriter::set_snapshot(Snapshot snapshot) { impl_->snapshot = snapshot; }

AsyncStats AsyncShardWriter::stats() const {
    const Impl &a = *impl_;
    AsyncStats s = a.stats;
    if (a.guard && s.snapshot == Snapshot::copy_on_write) {
        s.faults = a.guard->faults() - a.faults_before;
        s.bytes_faulted = a.guard->bytes_faulted() - a.faulted_before;
        s.bytes_drained = a.guard->bytes_drained() - a.drained_before;
        s.kernel_writes_fail = a.guard->user_mode_only();
    }
    return s;
}

Status AsyncShardWriter::begin(const std::string &root, std::uint64_t step, std::uint32_t rank,
                               const WriterOptions &options) {
    Impl &a = *impl_;
    // The arena is reused, so the previous persist must be done before the next snapshot. A
    // failure nobody collected with wait() is reported here rather than lost.
    a.join();
    if (!a.result && !a.result_seen) {
        a.result_seen = true;
        return make_error("the previous checkpoint's persist failed: " + a.result.error());
    }
    if (auto st = check_attempt(options.attempt); !st) return st;
    // The base's slices, so that add_tensor can leave the ones it holds unchanged without a
    // snapshot (this rank's own shard of the base, or its index, cached in the process); the
    // persist's writer checks the base as a ShardWriter always does.
    BaseSlices base;
    if (!options.base.empty()) {
        auto bs = BaseSlices::open(options.base, rank);
        if (!bs) return make_error("base checkpoint " + options.base + ": " + bs.error());
        base = std::move(bs.value());
    }
    // A snapshot begun and never submitted still protects the caller's memory.
    if (a.guard) a.guard->release_all();
    a.pending.clear();
    a.names.clear();
    a.states.clear();
    a.block = a.used = 0;
    a.stats = AsyncStats();
    a.stats.snapshot = a.snapshot;
    if (a.snapshot == Snapshot::copy_on_write && !a.guard && a.guard_error.empty()) {
        // Opened once per writer and kept; a failure is remembered, not retried.
        a.guard = cow::Guard::open(&a.guard_error);
        if (!a.guard && a.guard_error.empty()) a.guard_error = "userfaultfd unavailable";
    }
    if (a.guard) {
        a.faults_before = a.guard->faults();
        a.faulted_before = a.guard->bytes_faulted();
        a.drained_before = a.guard->bytes_drained();
    }
    a.root = root;
    a.step = step;
    a.rank = rank;
    a.options = options;
    a.base = std::move(base);
    a.tracker = options.track_writes ? track::Tracker::get(nullptr) : nullptr;
    a.open = true;
    a.result = Status::success();
    return Status::success();
}

Status AsyncShardWriter::add_tensor(const std::string &name, DType dtype, const Shape &shape,
                                    const Shape &offset, const Shape &count, const void *data,
                                    Change change) {
    Impl &a = *impl_;
    if (!a.open) return make_error("tensor " + name + ": no checkpoint begun (call begin first)");
    // Validate now so the caller learns of a bad slice at the call, not from the thread.
    if (auto st = check_tensor_name(name); !st) return st;
    if (auto st = check_shape(shape, "tensor " + name + ": shape"); !st) return st;
    if (auto st = check_slice(shape, offset, count, "tensor " + name); !st) return st;
    if (auto st = check_slice_bytes(dtype, shape, count, "tensor " + name); !st) return st;
    if (a.names.count(name))
        return make_error("tensor " + name + ": added twice to the checkpoint of rank " +
                          std::to_string(a.rank));
    if (const std::string other = name_path_conflict(a.names, name); !other.empty())
        return make_error("tensor " + name + ": conflicts with tensor " + other + " in the checkpoint of rank " +
                          std::to_string(a.rank) + " (a tensor name cannot be a '/'-prefix of another)");
    if (!data) return make_error("tensor " + name + ": data is null");
    const std::size_t bytes = element_count(count) * dtype_size(dtype);
    // A slice the base holds unchanged needs no snapshot: by the caller's word, or because
    // write tracking saw no store to it since its checksum was taken and that equals the
    // base's. Tracked memory is armed before it is copied or protected, so a store that
    // follows counts for the next checkpoint.
    track::Lookup tracked;
    const auto found = a.base.find(name, dtype, shape, offset, count);
    if (!found) return make_error("tensor " + name + ": base checkpoint " + a.options.base + ": " + found.error());
    const SourceRef *in_base = found.value();
    if (!(in_base && change == Change::unchanged) && a.tracker && bytes >= track::kMinBytes)
        tracked = a.tracker->arm(data, bytes);
    if (in_base && change != Change::changed &&
        (change == Change::unchanged || (tracked.known && tracked.hash == in_base->xxh3))) {
        a.stats.slices_referenced++;
        a.stats.bytes_referenced += bytes;
        a.pending.push_back({name, dtype, shape, offset, count, nullptr, nullptr, Change::unchanged});
        a.names.insert(name);
        return Status::success();
    }
    const char *live = tracked.tracked ? static_cast<const char *>(data) : nullptr;
    char *copy = a.alloc(bytes);
    if (!copy)
        return make_error("tensor " + name + ": out of memory for a snapshot of " +
                          std::to_string(bytes) + " bytes");
    const char *src = static_cast<const char *>(data);
    cow::Region *region = nullptr;
    if (a.stats.snapshot == Snapshot::copy_on_write) region = a.protect(name, src, copy, bytes);
    if (region) {
        // The partial pages around the protected interior share pages with other memory.
        const std::uint64_t head = region->head(), tail = region->tail();
        std::memcpy(copy, src, head);
        std::memcpy(copy + bytes - tail, src + bytes - tail, tail);
        a.stats.slices_protected++;
        a.stats.bytes_protected += region->protected_bytes();
        a.stats.bytes_copied += head + tail;
        a.pending.push_back({name, dtype, shape, offset, count, copy, region, change, live, tracked.epoch});
        a.names.insert(name);
        return Status::success();
    }
    cow::snapshot_copy(copy, src, bytes);
    a.stats.slices_copied++;
    a.stats.bytes_copied += bytes;
    a.pending.push_back({name, dtype, shape, offset, count, copy, nullptr, change, live, tracked.epoch});
    a.names.insert(name);
    return Status::success();
}

Status AsyncShardWriter::add_rank_state(const RankState &state) {
    if (!impl_->open) return make_error("rank state: no checkpoint begun (call begin first)");
    if (state.rank >= kMaxWriters)
        return make_error("rank state: rank " + std::to_string(state.rank) + " out of range");
    for (const auto &r : impl_->states)
        if (r.rank == state.rank)
            return make_error("rank state of rank " + std::to_string(state.rank) + " added twice");
    impl_->states.push_back(state);
    return Status::success();
}

Status AsyncShardWriter::submit() {
    Impl &a = *impl_;
    if (!a.open) return make_error("submit: no checkpoint begun");
    a.open = false;
    a.result_seen = false;
    // A non-thread-safe HDF5 would corrupt its state under a concurrent caller: correct but
    // synchronous is the only safe choice. So it is where no thread can be started.
    if (!h5::threadsafe() || !a.start_worker()) Impl::persist_main(&a);
    return Status::success();
}

Status AsyncShardWriter::wait() {
    Impl &a = *impl_;
    a.join();
    a.result_seen = true;
    return a.result;
}

}  // namespace ckpt
}  // namespace omni
