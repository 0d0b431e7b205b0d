// Reference trainer optimizer; see optim.h.
#include "train/optim.h"

#include <cmath>

namespace omni::train {

double LrSchedule::at(std::uint64_t step) const {
    if (warmup > 0 && step < warmup)
        return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (total <= warmup || step >= total) return base * min_ratio;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return base * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

Range shard_range(std::size_t params, int rank, int world) {
    const std::size_t w = static_cast<std::size_t>(world), r = static_cast<std::size_t>(rank);
    const std::size_t base = params / w, extra = params % w;
    Range out;
    out.begin = r * base + (r < extra ? r : extra);
    out.end = out.begin + base + (r < extra ? 1 : 0);
    return out;
}

void AdamShard::update(float *params, const std::vector<double> &grad, double lr,
                       std::uint64_t t, const AdamConfig &cfg) {
    const double c1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(t));
    const double c2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(t));
    for (std::size_t i = 0; i < range.size(); ++i) {
        const std::size_t k = range.begin + i;
        const double g = grad[k];
        const double m1 = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g;
        const double v1 = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g * g;
        m[i] = static_cast<float>(m1);
        v[i] = static_cast<float>(v1);
        params[k] = static_cast<float>(params[k] - lr * (m1 / c1) / (std::sqrt(v1 / c2) + cfg.eps));
    }
}

}  // namespace omni::train
