#pragma once
// Synthetic videos for the DiT, generated on the fly (no download): coloured shapes moving in
// straight lines and bouncing off the borders of a plain background. Every clip is a pure function
// of (seed, index), so any rank renders the same clip. The label of a clip is the kind of its
// shapes: 0 square, 1 disc, 2 triangle, 3 diamond.
//
// Rectified-flow training inputs: for clip b of step s the time t and the noise depend only on
// (seed, step, global clip number), never on the number of ranks.

#include <cstdint>
#include <string_view>
#include <vector>

namespace wallfacer::train {

inline constexpr int kVideoShapeKinds = 4;

struct VideoSpec {
  int frames = 16;
  int size = 64;  // height = width, pixels
  int channels = 3;
  int classes = kVideoShapeKinds;  // shape kinds in use, 1..kVideoShapeKinds
  int64_t values() const { return int64_t(frames) * size * size * channels; }
};

// Renders clip `index` of the stream `seed` into out (frames, size, size, channels), values in
// [-1, 1]; returns its label in [0, spec.classes).
int render_clip(const VideoSpec& spec, uint64_t seed, int64_t index, float* out);

enum class TimeSampling { LogitNormal, Uniform };
// "logit_normal" | "uniform"; throws UsageError naming the bad value.
TimeSampling parse_time_sampling(std::string_view name);
std::string_view time_sampling_name(TimeSampling how);

// The flow time of one clip of one step: sigmoid(N(0, 1)) (logit-normal) or U(0, 1), in (0, 1).
float flow_time(uint64_t seed, int64_t step, int64_t clip, TimeSampling how);
// Standard normal noise of the values [first, first + n) of one clip of one step: value i depends
// only on (seed, step, clip, i), so ranks holding different tokens draw consistent noise.
float flow_noise(uint64_t seed, int64_t step, int64_t clip, int64_t i);

// The frame counts of the clips packed into one sequence of `frames` frames (train.packing =
// "documents"): clip k's count is drawn uniformly from [min_frames, max_frames], keyed by (seed,
// step, sequence, k); the last clip takes the frames left, so the counts sum to `frames`.
std::vector<int> packed_clip_frames(uint64_t seed, int64_t step, int64_t sequence, int64_t frames,
                                    int min_frames, int max_frames);

}  // namespace wallfacer::train
