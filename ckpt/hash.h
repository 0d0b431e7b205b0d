// XXH3-64, the checksum of every slice and rank state (omni-ckpt(5)).
//
// On x86-64 the library's runtime-dispatching entry points pick AVX2/AVX-512 code when the
// CPU has it: about twice the throughput of the baseline build on the data that the stream
// layer keeps in cache, and the result is bit-identical on every CPU.
#ifndef OMNI_CKPT_HASH_H
#define OMNI_CKPT_HASH_H

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

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

private:
    XXH3_state_t *s_;
};

}  // namespace ckpt
}  // namespace omni

#endif
