// The reference trainer's optimizer: Adam with its state sharded across data-parallel ranks
// (ZeRO stage 1), and a learning rate with linear warmup and cosine decay.
//
// Every update is element-wise, so a parameter's new value depends only on its own gradient,
// moments and the step number: any partition of the parameters among ranks (any DP size, any
// resize) gives bitwise the same parameters.
#ifndef OMNI_TRAIN_OPTIM_H
#define OMNI_TRAIN_OPTIM_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace omni::train {

struct LrSchedule {
    double base = 1e-2;
    double min_ratio = 0.1;      // the decay ends at base * min_ratio
    std::uint64_t warmup = 20;   // steps of linear warmup
    std::uint64_t total = 1000;  // warmup + decay; later steps stay at the minimum
    // LR of optimizer step `step` (0-based): base*(step+1)/warmup during warmup, then
    // base*(min + (1-min)*(1+cos(pi*progress))/2) with progress = (step-warmup)/(total-warmup).
    double at(std::uint64_t step) const;
};

struct AdamConfig {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// The contiguous range of the parameter vector that rank r of `world` owns: sizes differ by at
// most one, lower ranks take the larger ones.
struct Range {
    std::size_t begin = 0, end = 0;
    std::size_t size() const { return end - begin; }
};
Range shard_range(std::size_t params, int rank, int world);

// Adam moments for one shard [range.begin, range.end) of the parameters.
struct AdamShard {
    Range range;
    std::vector<float> m, v;  // range.size() each
    explicit AdamShard(Range r = {}) : range(r), m(r.size(), 0.0f), v(r.size(), 0.0f) {}
    // One update of params[range] with the full-length mean gradient, at 1-based step t.
    void update(float *params, const std::vector<double> &grad, double lr, std::uint64_t t,
                const AdamConfig &cfg = AdamConfig());
};

}  // namespace omni::train

#endif
