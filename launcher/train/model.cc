// Reference trainer model; see model.h for why gradients are summed in fixed point.
#include "train/model.h"

#include <cmath>

namespace omni::train {
namespace {

// SplitMix64: a counter-based generator, so sample i needs no state from sample i-1.
std::uint64_t mix(std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 bits: exact in float.
float unit(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
    const std::uint64_t r = mix(mix(mix(a) ^ b) ^ c);
    return static_cast<float>(static_cast<double>(r >> 40) / 8388608.0 - 1.0);
}

std::int64_t fixed(double g, std::uint64_t &clamped) {
    if (g > kClamp) { g = kClamp; ++clamped; }
    if (g < -kClamp) { g = -kClamp; ++clamped; }
    return static_cast<std::int64_t>(std::llround(std::ldexp(g, kFracBits)));
}

// Forward pass in double; h receives the hidden activations.
double forward(const std::vector<float> &p, const float *x, double *h) {
    const float *W1 = p.data(), *b1 = W1 + kHidden * kIn, *W2 = b1 + kHidden, *b2 = W2 + kHidden;
    double out = b2[0];
    for (int j = 0; j < kHidden; ++j) {
        double a = b1[j];
        for (int i = 0; i < kIn; ++i) a += static_cast<double>(W1[j * kIn + i]) * x[i];
        h[j] = std::tanh(a);
        out += static_cast<double>(W2[j]) * h[j];
    }
    return out;
}

}  // namespace

void make_sample(const DataSpec &data, std::uint64_t index, float *x, float *y) {
    for (int i = 0; i < kIn; ++i) x[i] = unit(data.seed, index, static_cast<std::uint64_t>(i));
    // A smooth teacher with an interaction term and a little deterministic noise.
    double t = 0;
    for (int i = 0; i < kIn; ++i) t += (i % 3 == 0 ? 0.5 : -0.25) * x[i];
    const double noise = 0.01 * unit(data.seed ^ 0x5eedULL, index, 999);
    *y = static_cast<float>(std::sin(2.0 * t) + 0.5 * x[0] * x[1] + noise);
}

std::vector<float> init_params(std::uint64_t seed) {
    std::vector<float> p(kParams);
    const double s1 = 1.0 / std::sqrt(static_cast<double>(kIn));
    const double s2 = 1.0 / std::sqrt(static_cast<double>(kHidden));
    std::size_t k = 0;
    for (int i = 0; i < kHidden * kIn; ++i, ++k) p[k] = static_cast<float>(s1 * unit(seed, 1, k));
    for (int i = 0; i < kHidden; ++i, ++k) p[k] = 0.0f;
    for (int i = 0; i < kHidden; ++i, ++k) p[k] = static_cast<float>(s2 * unit(seed, 2, k));
    p[k] = 0.0f;
    return p;
}

void accumulate(const std::vector<float> &p, const DataSpec &data, const std::uint64_t *indices,
                std::size_t n, Accum &acc) {
    const float *W2 = p.data() + kHidden * kIn + kHidden;
    float x[kIn], y;
    double h[kHidden];
    for (std::size_t s = 0; s < n; ++s) {
        make_sample(data, indices[s], x, &y);
        const double out = forward(p, x, h);
        const double d = out - y;  // dL/dout for L = 0.5 d^2
        std::int64_t *g = acc.v.data();
        for (int j = 0; j < kHidden; ++j) {
            const double dh = d * W2[j] * (1.0 - h[j] * h[j]);
            for (int i = 0; i < kIn; ++i) g[j * kIn + i] += fixed(dh * x[i], acc.clamped);
            g[kHidden * kIn + j] += fixed(dh, acc.clamped);
            g[kHidden * kIn + kHidden + j] += fixed(d * h[j], acc.clamped);
        }
        g[kParams - 1] += fixed(d, acc.clamped);
        g[kParams] += fixed(0.5 * d * d, acc.clamped);
    }
}

std::vector<double> mean_gradient(const Accum &acc, std::uint64_t batch) {
    std::vector<double> g(kParams);
    for (std::size_t k = 0; k < kParams; ++k)
        g[k] = std::ldexp(static_cast<double>(acc.v[k]), -kFracBits) / static_cast<double>(batch);
    return g;
}

double mean_loss(const Accum &acc, std::uint64_t batch) {
    return std::ldexp(static_cast<double>(acc.v[kParams]), -kFracBits) / static_cast<double>(batch);
}

double sample_loss(const std::vector<float> &p, const DataSpec &data, std::uint64_t index) {
    float x[kIn], y;
    double h[kHidden];
    make_sample(data, index, x, &y);
    const double d = forward(p, x, h) - y;
    return 0.5 * d * d;
}

}  // namespace omni::train
