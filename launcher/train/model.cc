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

// One hidden unit's activation in double.
double hidden_unit(const float *w1_row, float b1, const float *x) {
    double a = b1;
    for (int i = 0; i < kIn; ++i) a += static_cast<double>(w1_row[i]) * x[i];
    return std::tanh(a);
}

// Where the parts of a slice's flat vector start.
struct SliceView {
    const float *W1, *b1, *W2, *b2;
    explicit SliceView(const std::vector<float> &p, const Slice &s)
        : W1(p.data()), b1(W1 + s.hidden() * kIn), W2(b1 + s.hidden()), b2(W2 + s.hidden()) {}
};

}  // namespace

void make_sample(const DataSpec &data, std::uint64_t index, float *x, float *y) {
    for (int i = 0; i < kIn; ++i) x[i] = unit(data.seed, index, static_cast<std::uint64_t>(i));
    // A smooth teacher with an interaction term and a little deterministic noise.
    double t = 0;
    for (int i = 0; i < kIn; ++i) t += (i % 3 == 0 ? 0.5 : -0.25) * x[i];
    const double noise = 0.01 * unit(data.seed ^ 0x5eedULL, index, 999);
    *y = static_cast<float>(std::sin(2.0 * t) + 0.5 * x[0] * x[1] + noise);
}

bool valid_mp(std::uint64_t mp_size) { return mp_size >= 1 && mp_size <= kHidden && kHidden % mp_size == 0; }

const std::vector<TensorSpec> &model_tensors() {
    static const std::vector<TensorSpec> t = {{"W1", std::size_t(kHidden) * kIn},
                                              {"b1", std::size_t(kHidden)},
                                              {"W2", std::size_t(kHidden)},
                                              {"b2", 1}};
    return t;
}

std::vector<Segment> slice_segments(const Slice &s) {
    const std::size_t h0 = static_cast<std::size_t>(s.h0()), h = static_cast<std::size_t>(s.hidden());
    return {{0, h0 * kIn, h * kIn, 0, false},
            {1, h0, h, h * kIn, false},
            {2, h0, h, h * kIn + h, false},
            {3, 0, 1, h * kIn + 2 * h, true}};
}

std::vector<float> init_params(std::uint64_t seed, const Slice &s) {
    // The whole model's values, then the slice's segments of it: every layout starts from the
    // same model.
    std::vector<float> p(kParams);
    const double s1 = 1.0 / std::sqrt(static_cast<double>(kIn));
    const double s2 = 1.0 / std::sqrt(static_cast<double>(kHidden));
    std::size_t k = 0;
    for (int i = 0; i < kHidden * kIn; ++i, ++k) p[k] = static_cast<float>(s1 * unit(seed, 1, k));
    for (int i = 0; i < kHidden; ++i, ++k) p[k] = 0.0f;
    for (int i = 0; i < kHidden; ++i, ++k) p[k] = static_cast<float>(s2 * unit(seed, 2, k));
    p[k] = 0.0f;
    if (s.mp_size == 1) return p;
    std::vector<float> out(s.params());
    std::size_t tensor_start[4] = {0, std::size_t(kHidden) * kIn, std::size_t(kHidden) * (kIn + 1),
                                   std::size_t(kHidden) * (kIn + 2)};
    for (const Segment &g : slice_segments(s))
        std::copy(p.begin() + tensor_start[g.tensor] + g.begin,
                  p.begin() + tensor_start[g.tensor] + g.begin + g.length, out.begin() + g.local);
    return out;
}

void partial_outputs(const std::vector<float> &params, const Slice &s, const DataSpec &data,
                     const std::uint64_t *indices, std::size_t n, std::vector<double> &hidden,
                     std::int64_t *partial, std::uint64_t &clamped) {
    const SliceView v(params, s);
    const int h = s.hidden();
    hidden.resize(n * static_cast<std::size_t>(h));
    float x[kIn], y;
    for (std::size_t i = 0; i < n; ++i) {
        make_sample(data, indices[i], x, &y);
        std::int64_t sum = 0;
        for (int j = 0; j < h; ++j) {
            const double a = hidden_unit(v.W1 + j * kIn, v.b1[j], x);
            hidden[i * h + j] = a;
            double t = static_cast<double>(v.W2[j]) * a;
            if (t > kClamp) { t = kClamp; ++clamped; }
            if (t < -kClamp) { t = -kClamp; ++clamped; }
            sum += static_cast<std::int64_t>(std::llround(std::ldexp(t, kOutFracBits)));
        }
        partial[i] = sum;
    }
}

void accumulate(const std::vector<float> &params, const Slice &s, const DataSpec &data,
                const std::uint64_t *indices, std::size_t n, const std::vector<double> &hidden,
                const std::int64_t *total, Accum &acc) {
    const SliceView v(params, s);
    const int h = s.hidden();
    const std::size_t b1_at = static_cast<std::size_t>(h) * kIn, w2_at = b1_at + h, b2_at = w2_at + h;
    float x[kIn], y;
    std::int64_t *g = acc.v.data();
    for (std::size_t i = 0; i < n; ++i) {
        make_sample(data, indices[i], x, &y);
        const double out = static_cast<double>(v.b2[0]) + std::ldexp(static_cast<double>(total[i]), -kOutFracBits);
        const double d = out - y;  // dL/dout for L = 0.5 d^2
        for (int j = 0; j < h; ++j) {
            const double a = hidden[i * h + j];
            const double dh = d * v.W2[j] * (1.0 - a * a);
            for (int k = 0; k < kIn; ++k) g[j * kIn + k] += fixed(dh * x[k], acc.clamped);
            g[b1_at + j] += fixed(dh, acc.clamped);
            g[w2_at + j] += fixed(d * a, acc.clamped);
        }
        g[b2_at] += fixed(d, acc.clamped);
        g[b2_at + 1] += fixed(0.5 * d * d, acc.clamped);
    }
}

void accumulate(const std::vector<float> &params, const DataSpec &data, const std::uint64_t *indices,
                std::size_t n, Accum &acc) {
    std::vector<double> hidden;
    std::vector<std::int64_t> partial(n);
    partial_outputs(params, Slice{}, data, indices, n, hidden, partial.data(), acc.clamped);
    accumulate(params, Slice{}, data, indices, n, hidden, partial.data(), acc);
}

std::vector<double> mean_gradient(const Accum &acc, std::uint64_t batch) {
    const std::size_t n = acc.v.size() - 1;
    std::vector<double> g(n);
    for (std::size_t k = 0; k < n; ++k)
        g[k] = std::ldexp(static_cast<double>(acc.v[k]), -kFracBits) / static_cast<double>(batch);
    return g;
}

double mean_loss(const Accum &acc, std::uint64_t batch) {
    return std::ldexp(static_cast<double>(acc.v.back()), -kFracBits) / static_cast<double>(batch);
}

double sample_loss(const std::vector<float> &p, const DataSpec &data, std::uint64_t index) {
    // The loss in double, from the same forward pass as training (fixed-point output sum).
    std::vector<double> hidden;
    std::int64_t partial = 0;
    std::uint64_t clamped = 0;
    partial_outputs(p, Slice{}, data, &index, 1, hidden, &partial, clamped);
    float x[kIn], y;
    make_sample(data, index, x, &y);
    const double d = static_cast<double>(p[kParams - 1]) + std::ldexp(static_cast<double>(partial), -kOutFracBits) - y;
    return 0.5 * d * d;
}

}  // namespace omni::train
