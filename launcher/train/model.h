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

// Tensor (model) parallelism: M ranks (M divides kHidden) split the hidden layer. MP rank m
// holds hidden units [m*kHidden/M, (m+1)*kHidden/M): those rows of W1, those entries of b1
// and W2, and b2, which every MP rank holds (its gradient is the same on all of them). Its
// flat parameter vector is W1 rows, b1 part, W2 part, b2: with M = 1, the whole model in the
// order above.
//
// Why the loss is bitwise the same for every M: the hidden units are computed alone, and the
// output sum over them, the only place where slices meet, is taken in fixed point
// (partial_outputs), so that the model-parallel group's integer allreduce of the partial sums
// gives the very sum a single rank computes. Every gradient component then depends on one
// hidden unit and the summed output only.
struct Slice {
    int mp_rank = 0, mp_size = 1;
    int h0() const { return mp_rank * (kHidden / mp_size); }
    int h1() const { return (mp_rank + 1) * (kHidden / mp_size); }
    int hidden() const { return h1() - h0(); }
    std::size_t params() const { return static_cast<std::size_t>(hidden()) * (kIn + 2) + 1; }
};
// Whether M = mp_size splits the model: 1 <= M <= kHidden and M divides kHidden.
bool valid_mp(std::uint64_t mp_size);

// The model's logical tensors (flat, fp32): what a checkpoint stores whatever the layout.
struct TensorSpec {
    const char *name;    // "W1", "b1", "W2", "b2"
    std::size_t length;  // elements
};
const std::vector<TensorSpec> &model_tensors();

// A slice's flat vector is the concatenation of its segments: elements [begin, begin+length)
// of tensor model_tensors()[tensor], at offset `local` of the slice's vector. `replicated`:
// every MP rank holds it (b2).
struct Segment {
    std::size_t tensor, begin, length, local;
    bool replicated;
};
std::vector<Segment> slice_segments(const Slice &s);

// Deterministic initialisation (scaled uniform) from a seed: the slice's part of the model
// that Slice{} would hold whole.
std::vector<float> init_params(std::uint64_t seed, const Slice &s = {});

// Fixed point: value = integer / 2^kFracBits. With |per-sample component| <= kClamp = 2^20
// per sample, a sum over a global batch of at most kMaxBatch = 2048 samples stays below 2^63.
constexpr int kFracBits = 32;
constexpr double kClamp = 1048576.0;
constexpr std::uint64_t kMaxBatch = 2048;
// The output's terms W2[j]*h[j] (|.| < 2^8 for any sane weights; clamped beyond 2^20) are
// summed at 2^-kOutFracBits.
constexpr int kOutFracBits = 40;

// Gradient and loss accumulator of a set of samples: the slice's gradient sums, then the loss
// sum, all fixed point. Sums of accumulators are exact.
struct Accum {
    explicit Accum(std::size_t params = kParams) : v(params + 1, 0) {}
    std::vector<std::int64_t> v;
    std::uint64_t clamped = 0;  // per-sample components that hit the clamp
};

// The first half of the forward pass of n samples on a slice: each sample's hidden
// activations of the slice (into hidden, n x s.hidden()) and its partial output
// sum_j W2[j]*h[j] over the slice's hidden units, in fixed point (into partial[n]). The
// model-parallel group sums partial (an exact integer allreduce) before the second half.
void partial_outputs(const std::vector<float> &params, const Slice &s, const DataSpec &data,
                     const std::uint64_t *indices, std::size_t n, std::vector<double> &hidden,
                     std::int64_t *partial, std::uint64_t &clamped);
// The second half: with the summed partial outputs `total`, adds the per-sample gradients of
// 0.5 * (f(x) - y)^2 for the slice's parameters, and the losses, to acc.
void accumulate(const std::vector<float> &params, const Slice &s, const DataSpec &data,
                const std::uint64_t *indices, std::size_t n, const std::vector<double> &hidden,
                const std::int64_t *total, Accum &acc);
// Both halves on the whole model (M = 1).
void accumulate(const std::vector<float> &params, const DataSpec &data,
                const std::uint64_t *indices, std::size_t n, Accum &acc);

// Mean over `batch` samples of an accumulator: gradient (the accumulator's parameters) and loss.
std::vector<double> mean_gradient(const Accum &acc, std::uint64_t batch);
double mean_loss(const Accum &acc, std::uint64_t batch);

// Loss of one sample in double on the whole model, for tests.
double sample_loss(const std::vector<float> &params, const DataSpec &data, std::uint64_t index);

}  // namespace omni::train

#endif
