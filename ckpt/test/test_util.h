// Deterministic tensor contents shared by the ckpt tests and helpers, so that an independent
// reader (the h5py test) can recompute the expected values.
#ifndef OMNI_CKPT_TEST_UTIL_H
#define OMNI_CKPT_TEST_UTIL_H

#include <stdlib.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/fsio.h"
#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {
namespace test {

// A directory under /tmp, removed with everything in it at the end of the scope.
class TempDir {
public:
    TempDir() {
        char tmpl[] = "/tmp/omni-ckpt-test.XXXXXX";
        path_ = ::mkdtemp(tmpl);
    }
    ~TempDir() { (void)fsio::remove_tree(path_); }
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &n) const { return path_ + "/" + n; }

private:
    std::string path_;
};

// Anonymous private memory of its own mapping, as large model buffers are.
class Mapping {
public:
    explicit Mapping(std::size_t bytes) : bytes_(bytes) {
        void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
    }
    ~Mapping() {
        if (p_) ::munmap(p_, bytes_);
    }
    Mapping(const Mapping &) = delete;
    Mapping &operator=(const Mapping &) = delete;
    char *data() const { return p_; }

private:
    char *p_;
    std::size_t bytes_;
};

// The kB of transparent huge pages backing [p, p + bytes): AnonHugePages in /proc/self/smaps,
// summed over the mappings that overlap the range (a userfaultfd registration splits a
// mapping into several). Whole mappings are counted; -1 if smaps cannot be read.
inline long anon_huge_kb(const void *p, std::size_t bytes) {
    FILE *f = std::fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    char line[512];
    bool in = false;
    long total = 0;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        long kb;
        if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2)   // a mapping's first line
            in = lo < a + bytes && hi > a;
        else if (in && std::sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            total += kb;
    }
    std::fclose(f);
    return total;
}

// fp32 -> bf16 by truncation (the tests only need a deterministic bit pattern).
inline std::uint16_t to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint16_t>(u >> 16);
}

// Element i of a tensor with seed `seed`, as raw bytes of `t`.
inline void put(DType t, std::uint64_t i, std::uint64_t seed, char *dst) {
    const float f = static_cast<float>(i % 4096) * 0.25f + static_cast<float>(seed % 1000);
    switch (t) {
    case DType::fp32: std::memcpy(dst, &f, 4); break;
    case DType::bf16: {
        const std::uint16_t b = to_bf16(f);
        std::memcpy(dst, &b, 2);
        break;
    }
    case DType::fp16: {
        // Any deterministic 16-bit pattern; fp16 values are compared bitwise only.
        const std::uint16_t b = static_cast<std::uint16_t>((i * 2654435761u + seed) & 0x7bff);
        std::memcpy(dst, &b, 2);
        break;
    }
    case DType::int64: {
        const std::int64_t v = static_cast<std::int64_t>(i * 1000003u + seed) - 500;
        std::memcpy(dst, &v, 8);
        break;
    }
    case DType::uint8: dst[0] = static_cast<char>((i * 7 + seed) & 0xff); break;
    }
}

// The whole logical tensor, row-major.
inline std::vector<char> logical(DType t, const Shape &shape, std::uint64_t seed) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<char> out(n * dtype_size(t));
    for (std::uint64_t i = 0; i < n; ++i) put(t, i, seed, out.data() + i * dtype_size(t));
    return out;
}

// Rows [r0, r0+rows) of a logical tensor split along dimension 0.
inline std::vector<char> rows_of(const std::vector<char> &all, const Shape &shape, DType t,
                                 std::uint64_t r0, std::uint64_t rows) {
    std::uint64_t row = dtype_size(t);
    for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
    return std::vector<char>(all.begin() + static_cast<long>(r0 * row),
                             all.begin() + static_cast<long>((r0 + rows) * row));
}

// An uneven split of `rows` into `parts` (part p gets more rows than part p+1 where possible;
// parts beyond `rows` get none): the first part takes the remainder.
inline std::vector<std::pair<std::uint64_t, std::uint64_t>> uneven_split(std::uint64_t rows,
                                                                         std::uint32_t parts) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    const std::uint64_t base = rows / parts, extra = rows % parts;
    std::uint64_t start = 0;
    for (std::uint32_t p = 0; p < parts; ++p) {
        const std::uint64_t n = base + (p == 0 ? extra : 0);
        out.emplace_back(start, n);
        start += n;
    }
    return out;
}

}  // namespace test
}  // namespace ckpt
}  // namespace omni

#endif
