// AsyncShardWriter: the training loop pays for a memcpy into host memory; hashing, HDF5 and
// fsync happen in a background thread.
//
// The snapshot arena is a list of large blocks reused from one checkpoint to the next: after
// the first checkpoint the copy touches no fresh pages, so the stall is bounded by memory
// bandwidth rather than by page faults.
#include <cstring>
#include <thread>

#include "omni/ckpt_cpp.h"
#include "format.h"
#include "h5.h"

namespace omni {
namespace ckpt {

namespace {
constexpr std::size_t kBlockBytes = std::size_t(256) << 20;

struct Block {
    std::unique_ptr<char[]> data;
    std::size_t size = 0;
};

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
    std::thread worker;
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
            b.data.reset(new char[b.size]);
            blocks.push_back(std::move(b));
            used = 0;
        }
        char *p = blocks[block].data.get() + used;
        used += (n + 63) & ~std::size_t(63);   // keep slices cache-line aligned
        if (used > blocks[block].size) used = blocks[block].size;
        return p;
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
    if (impl_->worker.joinable()) impl_->worker.join();
}

Status AsyncShardWriter::begin(const std::string &root, std::uint64_t step, std::uint32_t rank,
                               const WriterOptions &options) {
    Impl &a = *impl_;
    // The arena is reused, so the previous persist must be done before the next snapshot. A
    // failure nobody collected with wait() is reported here rather than lost.
    if (a.worker.joinable()) a.worker.join();
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
    std::memcpy(copy, data, bytes);
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
    a.worker = std::thread([&a] { a.result = a.persist(); });
    return Status::success();
}

Status AsyncShardWriter::wait() {
    Impl &a = *impl_;
    if (a.worker.joinable()) a.worker.join();
    a.result_seen = true;
    return a.result;
}

}  // namespace ckpt
}  // namespace omni
