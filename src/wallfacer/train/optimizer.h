#pragma once
// AdamW over the parameter arena: decoupled weight decay on the tensors marked `decay`
// (matrices), none on norms; moments m and v in one arena each, like the parameters.

#include <cstdint>
#include <vector>

#include "wallfacer/model/gpt.h"

namespace wallfacer::train {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(std::vector<model::ParamTensor> tensors, int64_t num_params, const AdamWConfig& cfg);
  // One step at learning rate lr; increments step().
  void update(float* params, const float* grads, float lr);

  int64_t step() const { return step_; }
  void set_step(int64_t s) { step_ = s; }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

 private:
  std::vector<model::ParamTensor> tensors_;
  AdamWConfig cfg_;
  int64_t step_ = 0;
  std::vector<float> m_, v_;
};

// Learning rate at 0-based step s: linear warm-up over `warmup` steps to lr, then cosine decay to
// min_lr at step `total`.
double lr_schedule(int64_t s, int64_t total, int64_t warmup, double lr, double min_lr);

}  // namespace wallfacer::train
