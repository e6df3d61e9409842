#include "wallfacer/train/video.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"

namespace wallfacer::train {

namespace {

struct Shape {
  double x0, y0, vx, vy, r;
  float colour[3];
};

// Position along one axis at frame f, bouncing between lo and hi.
double bounce(double p0, double v, int f, double lo, double hi) {
  const double span = hi - lo;
  if (span <= 0) return lo;
  double u = std::fmod(p0 - lo + v * f, 2 * span);
  if (u < 0) u += 2 * span;
  return lo + (u <= span ? u : 2 * span - u);
}

bool inside(int kind, double dx, double dy, double r) {
  switch (kind) {
    case 0:
      return std::abs(dx) <= r && std::abs(dy) <= r;
    case 1:
      return dx * dx + dy * dy <= r * r;
    case 2:  // apex up
      return dy >= -r && dy <= r && std::abs(dx) <= 0.5 * (dy + r);
    default:
      return std::abs(dx) + std::abs(dy) <= r;
  }
}

}  // namespace

int render_clip(const VideoSpec& spec, uint64_t seed, int64_t index, float* out) {
  WF_CHECK(spec.classes >= 1 && spec.classes <= kVideoShapeKinds, "video classes must be 1..{}",
           kVideoShapeKinds);
  Rng rng(mix64(seed, uint64_t(index)));
  const int S = spec.size, ch = spec.channels;
  const int kind = int(rng.next_u64() % uint64_t(spec.classes));
  float bg[3];
  for (float& c : bg) c = float(-1.0 + 0.6 * rng.uniform());
  const int count = 1 + int(rng.next_u64() % 2);
  Shape shapes[2];
  for (int i = 0; i < count; ++i) {
    Shape& s = shapes[i];
    s.r = S * (0.1 + 0.1 * rng.uniform());
    s.x0 = s.r + (S - 2 * s.r) * rng.uniform();
    s.y0 = s.r + (S - 2 * s.r) * rng.uniform();
    const double angle = 6.283185307179586 * rng.uniform();
    const double speed = S / 32.0 * (0.5 + rng.uniform());
    s.vx = speed * std::cos(angle);
    s.vy = speed * std::sin(angle);
    for (float& c : s.colour) c = float(-0.2 + 1.2 * rng.uniform());
  }
  for (int f = 0; f < spec.frames; ++f) {
    double cx[2], cy[2];
    for (int i = 0; i < count; ++i) {
      cx[i] = bounce(shapes[i].x0, shapes[i].vx, f, shapes[i].r, S - shapes[i].r);
      cy[i] = bounce(shapes[i].y0, shapes[i].vy, f, shapes[i].r, S - shapes[i].r);
    }
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x) {
        const float* colour = bg;
        for (int i = 0; i < count; ++i)  // later shapes are drawn on top
          if (inside(kind, x + 0.5 - cx[i], y + 0.5 - cy[i], shapes[i].r))
            colour = shapes[i].colour;
        float* px = out + ((int64_t(f) * S + y) * S + x) * ch;
        if (ch == 3) {
          std::copy_n(colour, 3, px);
        } else {
          const float grey = (colour[0] + colour[1] + colour[2]) / 3.0f;
          std::fill_n(px, ch, grey);
        }
      }
  }
  return kind;
}

TimeSampling parse_time_sampling(std::string_view name) {
  const std::string s(name);
  if (s == "logit_normal") return TimeSampling::LogitNormal;
  if (s == "uniform") return TimeSampling::Uniform;
  throw UsageError("train.time_sampling must be 'logit_normal' or 'uniform' (got '" + s + "')");
}

std::string_view time_sampling_name(TimeSampling how) {
  return how == TimeSampling::Uniform ? "uniform" : "logit_normal";
}

float flow_time(uint64_t seed, int64_t step, int64_t clip, TimeSampling how) {
  Rng rng(mix64(mix64(seed ^ 0x7417e5ULL, uint64_t(step)), uint64_t(clip)));
  double t = how == TimeSampling::Uniform ? rng.uniform() : 1.0 / (1.0 + std::exp(-rng.normal()));
  return float(std::clamp(t, 1e-4, 1.0 - 1e-4));
}

float flow_noise(uint64_t seed, int64_t step, int64_t clip, int64_t i) {
  const uint64_t key = mix64(mix64(seed ^ 0x4015eULL, uint64_t(step)), uint64_t(clip));
  Rng rng(mix64(key, uint64_t(i / 2)));
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
  return float(i % 2 == 0 ? r * std::cos(a) : r * std::sin(a));
}

std::vector<int> packed_clip_frames(uint64_t seed, int64_t step, int64_t sequence, int64_t frames,
                                    int min_frames, int max_frames) {
  WF_CHECK(min_frames >= 1 && min_frames <= max_frames && frames >= 1,
           "packed clips of {}..{} frames into {} frames", min_frames, max_frames, frames);
  const uint64_t key = mix64(mix64(seed ^ 0xc11b5ULL, uint64_t(step)), uint64_t(sequence));
  const auto span = uint64_t(max_frames - min_frames + 1);
  std::vector<int> out;
  for (int64_t left = frames, k = 0; left > 0; ++k) {
    Rng rng(mix64(key, uint64_t(k)));
    const int64_t f = std::min<int64_t>(min_frames + int64_t(rng.next_u64() % span), left);
    out.push_back(int(f));
    left -= f;
  }
  return out;
}

}  // namespace wallfacer::train
