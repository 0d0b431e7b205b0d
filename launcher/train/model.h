// The reference trainer's model and data: a two-layer MLP regression on a synthetic dataset
// that any rank can generate sample by sample, with gradients summed exactly.
//
// Why exact: an elastic job must produce the same loss at every step whatever its
// data-parallel size and resize history. Floating-point sums depend on their order, and the
// order changes with the partition of a batch among ranks. Here every per-sample gradient
// (computed in double) is rounded once to a 64-bit fixed-point number; integer sums are
// associative, so the global sum is bitwise the same for any partition and any reduction
// tree. The cost: a per-sample gradient component is clamped to +-kClamp (counted, never hit
// by this model in practice) and resolved to 2^-kFracBits.
#ifndef OMNI_TRAIN_MODEL_H
#define OMNI_TRAIN_MODEL_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace omni::train {

// Samples are pure functions of (seed, index): no file, no state, any rank, any order.
struct DataSpec {
    std::uint64_t seed = 1;
    std::uint64_t samples = 131072;
};

constexpr int kIn = 16;      // input features
constexpr int kHidden = 32;  // hidden units (tanh)

// Input x[kIn] in [-1, 1) and the target y of sample `index`.
void make_sample(const DataSpec &data, std::uint64_t index, float *x, float *y);

// Parameters, flattened: W1 (kHidden x kIn, row-major), b1 (kHidden), W2 (kHidden), b2 (1).
constexpr std::size_t kParams = kHidden * kIn + kHidden + kHidden + 1;

// Deterministic initialisation (scaled uniform) from a seed.
std::vector<float> init_params(std::uint64_t seed);

// Fixed point: value = integer / 2^kFracBits. With |per-sample component| <= kClamp = 2^20
// per sample, a sum over a global batch of at most kMaxBatch = 2048 samples stays below 2^63.
constexpr int kFracBits = 32;
constexpr double kClamp = 1048576.0;
constexpr std::uint64_t kMaxBatch = 2048;

// Gradient and loss accumulator of a set of samples: kParams gradient sums, then the loss
// sum, all fixed point. Sums of accumulators are exact.
struct Accum {
    std::vector<std::int64_t> v = std::vector<std::int64_t>(kParams + 1, 0);
    std::uint64_t clamped = 0;  // per-sample components that hit the clamp
};

// Adds the per-sample gradients of 0.5 * (f(x) - y)^2 and the losses of `indices`.
void accumulate(const std::vector<float> &params, const DataSpec &data,
                const std::uint64_t *indices, std::size_t n, Accum &acc);

// Mean over `batch` samples of an accumulator: gradient (kParams) and loss.
std::vector<double> mean_gradient(const Accum &acc, std::uint64_t batch);
double mean_loss(const Accum &acc, std::uint64_t batch);

// Loss of one sample in double, for tests.
double sample_loss(const std::vector<float> &params, const DataSpec &data, std::uint64_t index);

}  // namespace omni::train

#endif
