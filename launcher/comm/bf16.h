// bfloat16 <-> float, round to nearest even, as PyTorch and CUDA's __float2bfloat16 do.
// Used where Gloo (which knows no bf16) reduces bf16 buffers: each pair of values is summed
// in fp32 and rounded once.
#ifndef OMNI_LAUNCHER_BF16_H
#define OMNI_LAUNCHER_BF16_H

#include <cstdint>
#include <cstring>

namespace omni::launcher {

inline float bf16_to_float(std::uint16_t h) {
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

inline std::uint16_t float_to_bf16(float f) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))  // NaN stays a quiet NaN
        return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    const std::uint32_t lsb = (bits >> 16) & 1u;
    bits += 0x7fffu + lsb;
    return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace omni::launcher

#endif
