#include "wallfacer/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "wallfacer/kernels/ops.h"

namespace wallfacer::train {

AdamW::AdamW(std::vector<model::ParamTensor> tensors, int64_t num_params, const AdamWConfig& cfg)
    : tensors_(std::move(tensors)),
      cfg_(cfg),
      m_(size_t(num_params), 0.0f),
      v_(size_t(num_params), 0.0f) {}

void AdamW::update(float* params, const float* grads, float lr) {
  ++step_;
  for (const auto& t : tensors_) {
    kernels::AdamWParams p;
    p.lr = lr;
    p.beta1 = cfg_.beta1;
    p.beta2 = cfg_.beta2;
    p.eps = cfg_.eps;
    p.weight_decay = t.decay ? cfg_.weight_decay : 0.0f;
    p.step = step_;
    kernels::adamw(params + t.offset, grads + t.offset, m_.data() + t.offset, v_.data() + t.offset,
                   t.size, p);
  }
}

double lr_schedule(int64_t s, int64_t total, int64_t warmup, double lr, double min_lr) {
  if (s < warmup) return lr * double(s + 1) / double(warmup);
  const int64_t span = std::max<int64_t>(1, total - warmup);
  const double frac = std::min(1.0, double(s - warmup) / double(span));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * frac));
}

}  // namespace wallfacer::train
