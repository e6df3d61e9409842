#pragma once
// Sampling a trained DiT: start from Gaussian noise at t = 1 and integrate the learned velocity
// dx/dt = v(x, t) down to t = 0 with Euler steps, x <- x - (1 / steps) v. One process, the whole
// clip (non-causal attention over all tokens).

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/model/dit.h"

namespace wallfacer::model {

// params: an arena laid out as dit_param_tensors(cfg). label: the class (ignored when
// cfg.classes = 0). Returns the clip (frames, size, size, channels), values about in [-1, 1].
std::vector<float> dit_sample_clip(const DitConfig& cfg, const float* params, int steps, int label,
                                   uint64_t seed);

// Writes a clip as an animated GIF, each pixel scaled up `scale` times, `delay_cs` 1/100 s per
// frame (grey when channels = 1).
void write_clip_gif(const std::string& path, const DitConfig& cfg, const float* clip, int scale,
                    int delay_cs);

}  // namespace wallfacer::model
