// AsyncShardWriter: the training loop pays for a memcpy into host memory; hashing, HDF5 and
// fsync happen in a background thread.
//
// The snapshot arena is a list of large blocks reused from one checkpoint to the next: after
// the first checkpoint the copy touches no fresh pages, so the stall is bounded by memory
// bandwidth rather than by page faults.
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "omni/ckpt_cpp.h"
#include "format.h"
#include "h5.h"

namespace omni {
namespace ckpt {

namespace {
constexpr std::size_t kBlockBytes = std::size_t(256) << 20;

struct FreeDeleter {
    void operator()(char *p) const { std::free(p); }
};

struct Block {
    std::unique_ptr<char, FreeDeleter> data;
    std::size_t size = 0;
};

// Arena blocks are page aligned, so streaming stores (below) run on aligned lines from the
// first byte. Not advised into transparent huge pages: measured here, the first snapshot
// into fresh huge pages took anywhere from 0.25x to 3x the time of 4 KiB pages, depending on
// how much compaction the kernel had to do. Returns null when out of memory.
char *alloc_block(std::size_t size) {
    void *p = nullptr;
    if (::posix_memalign(&p, 4096, size) != 0) return nullptr;
    return static_cast<char *>(p);
}

// Below this a slice is copied with memcpy: the snapshot of small tensors is cheap anyway.
constexpr std::size_t kStreamCopyBytes = std::size_t(256) << 10;

#if defined(__x86_64__)
// The snapshot copy with non-temporal (streaming) stores: the destination is not read into
// the cache first (no read-for-ownership) and does not evict the trainer's working set, so a
// copy of a large slice moves 2 bytes over the memory bus per byte copied instead of 3. The
// background persist reads the arena later, long after it would have left the cache anyway.
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
    // read the arena. Thread creation in submit() synchronises too; this makes it explicit.
    _mm_sfence();
}
#endif

void snapshot_copy(char *dst, const char *src, std::size_t n) {
#if defined(__x86_64__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2 && n >= kStreamCopyBytes) return stream_copy_avx2(dst, src, n);
#endif
    std::memcpy(dst, src, n);
}

struct Pending {
    std::string name;
    DType dtype;
    Shape shape, offset, count;
    const char *data;
    Change change;
};
}  // namespace

struct AsyncShardWriter::Impl {
    std::vector<Block> blocks;
    std::size_t block = 0, used = 0;   // allocation cursor
    std::vector<Pending> pending;
    std::vector<RankState> states;
    std::string root;
    std::uint64_t step = 0;
    std::uint32_t rank = 0;
    WriterOptions options;
    bool open = false;
    pthread_t worker{};
    bool running = false;   // worker started and not joined yet
    Status result;
    bool result_seen = true;

    char *alloc(std::size_t n) {
        while (block < blocks.size() && blocks[block].size - used < n) {
            ++block;
            used = 0;
        }
        if (block == blocks.size()) {
            Block b;
            b.size = std::max(n, kBlockBytes);
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
        auto w = ShardWriter::open(root, step, rank, options);
        if (!w) return make_error(w.error());
        for (const auto &p : pending)
            if (auto st = w.value()->add_tensor(p.name, p.dtype, p.shape, p.offset, p.count, p.data, p.change); !st)
                return st;
        for (const auto &s : states)
            if (auto st = w.value()->add_rank_state(s); !st) return st;
        return w.value()->finish();
    }
};

AsyncShardWriter::AsyncShardWriter() : impl_(std::make_unique<Impl>()) {}

AsyncShardWriter::~AsyncShardWriter() {
    impl_->join();
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
    a.pending.clear();
    a.states.clear();
    a.block = a.used = 0;
    a.root = root;
    a.step = step;
    a.rank = rank;
    a.options = options;
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
    if (!data) return make_error("tensor " + name + ": data is null");
    const std::size_t bytes = element_count(count) * dtype_size(dtype);
    char *copy = a.alloc(bytes);
    if (!copy)
        return make_error("tensor " + name + ": out of memory for a snapshot of " +
                          std::to_string(bytes) + " bytes");
    snapshot_copy(copy, static_cast<const char *>(data), bytes);
    a.pending.push_back({name, dtype, shape, offset, count, copy, change});
    return Status::success();
}

Status AsyncShardWriter::add_rank_state(const RankState &state) {
    if (!impl_->open) return make_error("rank state: no checkpoint begun (call begin first)");
    impl_->states.push_back(state);
    return Status::success();
}

Status AsyncShardWriter::submit() {
    Impl &a = *impl_;
    if (!a.open) return make_error("submit: no checkpoint begun");
    a.open = false;
    a.result_seen = false;
    if (!h5::threadsafe()) {
        // A non-thread-safe HDF5 would corrupt its state under a concurrent caller: correct
        // but synchronous is the only safe choice.
        a.result = a.persist();
        return Status::success();
    }
    if (!a.start_worker()) a.result = a.persist();
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
