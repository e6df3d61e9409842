#include "wallfacer/model/dit_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "wallfacer/core/error.h"
#include "wallfacer/core/gif.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/local_attention.h"

namespace wallfacer::model {

std::vector<float> dit_sample_clip(const DitConfig& cfg, const float* params, int steps, int label,
                                   uint64_t seed) {
  WF_USAGE_CHECK(steps >= 1, "--steps must be >= 1 (got {})", steps);
  WF_USAGE_CHECK(cfg.classes == 0 || (label >= 0 && label < cfg.classes),
                 "--class must be in [0, {}) for this checkpoint (got {})", cfg.classes, label);
  const int64_t T = cfg.tokens(), PD = cfg.patch_dim();
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  LocalAttention attn(1, int(T), cfg.heads, cfg.heads, cfg.head_dim(), false);
  Dit model(cfg, 1, pos, attn);
  std::copy_n(params, model.num_params(), model.params());
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(T * PD));
  for (float& v : x) v = float(rng.normal());
  const int32_t y = label;
  for (int i = 0; i < steps; ++i) {
    const float t = 1.0f - float(i) / float(steps);
    model.predict(x.data(), &t, cfg.classes > 0 ? &y : nullptr);
    const float* v = model.output();
    for (size_t j = 0; j < x.size(); ++j) x[j] -= v[j] / float(steps);
  }
  std::vector<float> clip(static_cast<size_t>(cfg.clip_values()));
  dit_unpatchify(cfg, x.data(), pos.data(), int(T), clip.data());
  return clip;
}

void write_clip_gif(const std::string& path, const DitConfig& cfg, const float* clip, int scale,
                    int delay_cs) {
  WF_USAGE_CHECK(scale >= 1 && scale <= 16, "--scale must be in [1, 16] (got {})", scale);
  const int S = cfg.size, W = S * scale, ch = cfg.channels;
  std::vector<uint8_t> rgb(static_cast<size_t>(cfg.frames) * W * W * 3);
  for (int f = 0; f < cfg.frames; ++f)
    for (int y = 0; y < W; ++y)
      for (int x = 0; x < W; ++x) {
        const float* px = clip + ((int64_t(f) * S + y / scale) * S + x / scale) * ch;
        uint8_t* o = &rgb[size_t(((int64_t(f) * W + y) * W + x) * 3)];
        for (int c = 0; c < 3; ++c) {
          const float v = px[ch == 3 ? c : 0];
          o[c] = uint8_t(std::lround(std::clamp((v + 1.0f) * 127.5f, 0.0f, 255.0f)));
        }
      }
  write_gif(path, rgb.data(), cfg.frames, W, W, delay_cs);
}

}  // namespace wallfacer::model
