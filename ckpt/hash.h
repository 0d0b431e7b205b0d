// XXH3-64, the checksum of every slice and rank state (omni-ckpt(5)).
//
// On x86-64 the library's runtime-dispatching entry points pick AVX2/AVX-512 code when the
// CPU has it: about twice the throughput of the baseline build on the data that the stream
// layer keeps in cache, and the result is bit-identical on every CPU.
#ifndef OMNI_CKPT_HASH_H
#define OMNI_CKPT_HASH_H

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define OMNI_CKPT_XXH3_DISPATCH 1
#endif

namespace omni {
namespace ckpt {

inline std::uint64_t xxh3(const void *data, std::size_t n) {
#ifdef OMNI_CKPT_XXH3_DISPATCH
    return XXH3_64bits_dispatch(data, n);
#else
    return XXH3_64bits(data, n);
#endif
}

// Streaming XXH3-64: update() in pieces gives the same digest as xxh3() over the whole.
class Hasher {
public:
    Hasher() : s_(XXH3_createState()) { XXH3_64bits_reset(s_); }
    ~Hasher() { XXH3_freeState(s_); }
    Hasher(const Hasher &) = delete;
    Hasher &operator=(const Hasher &) = delete;
    void update(const void *data, std::size_t n) {
        if (n == 0) return;
#ifdef OMNI_CKPT_XXH3_DISPATCH
        XXH3_64bits_update_dispatch(s_, data, n);
#else
        XXH3_64bits_update(s_, data, n);
#endif
    }
    std::uint64_t digest() const { return XXH3_64bits_digest(s_); }
    void reset() { XXH3_64bits_reset(s_); }

private:
    XXH3_state_t *s_;
};

// XXH3-64 of a byte stream fed in pieces of any size, and of each `block_bytes` run of it
// from its start (the last one may be shorter): a slice's checksum and its block checksums
// (blocks.h) in one pass over bytes that are in the cache. block_bytes 0: the whole only;
// `whole` false: the blocks only (digest() is then that of nothing).
class BlockHasher {
public:
    explicit BlockHasher(std::uint64_t block_bytes, bool whole = true) : block_(block_bytes), whole_on_(whole) {}
    void update(const void *data, std::size_t n) {
        if (whole_on_) whole_.update(data, n);
        if (block_ == 0) return;
        const char *p = static_cast<const char *>(data);
        while (n > 0) {
            if (filled_ == 0 && n >= block_) {   // a whole block in this piece: one call
                blocks_.push_back(xxh3(p, static_cast<std::size_t>(block_)));
                p += block_;
                n -= static_cast<std::size_t>(block_);
                continue;
            }
            const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, block_ - filled_));
            part_.update(p, take);
            p += take;
            n -= take;
            if ((filled_ += take) == block_) close_part();
        }
    }
    std::uint64_t digest() const { return whole_.digest(); }
    // The block checksums so far, the last (partial) block's included.
    std::vector<std::uint64_t> blocks() {
        if (filled_ > 0) close_part();
        return blocks_;
    }

private:
    void close_part() {
        blocks_.push_back(part_.digest());
        part_.reset();
        filled_ = 0;
    }
    std::uint64_t block_;
    bool whole_on_;
    std::uint64_t filled_ = 0;   // bytes of the current block in part_
    Hasher whole_, part_;
    std::vector<std::uint64_t> blocks_;
};

}  // namespace ckpt
}  // namespace omni

#endif
