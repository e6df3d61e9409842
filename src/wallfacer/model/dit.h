#pragma once
// A diffusion transformer (DiT) for video clips with explicit forward and backward passes:
//   x   = patches @ patch_w^T + patch_b + pos          patches of p x p pixels, frame-major tokens
//   c   = mlp(timestep_freq(t)) [+ y_emb[label]]       conditioning vector per clip; every row
//                                                      takes the modulation of its clip
//   per block (adaLN-Zero, modulation from silu(c)):
//     shift1, scale1, gate1, shift2, scale2, gate2 = silu(c) @ ada_w^T + ada_b
//     x += gate1 * proj(attn(qkv(ln(x) * (1 + scale1) + shift1)))      non-causal attention
//     x += gate2 * fc2(gelu(fc1(ln(x) * (1 + scale2) + shift2)))
//   shift, scale = silu(c) @ final_ada_w^T + final_ada_b
//   out = (ln(x) * (1 + scale) + shift) @ out_w^T + out_b                (one patch per token)
// Layernorms have no affine parameters; every linear layer has a bias. Positions are fixed 3-D
// sinusoids of (frame, patch row, patch column) of the GLOBAL token index, so sequence-parallel
// shards agree; with packed clips (set_clips), of the token index within the row's clip. The
// objective is rectified flow: the model predicts v = noise - x0 at x_t = (1 - t) x0 + t noise, and
// the loss is the squared error.
//
// Parameters, gradients and activations live in contiguous arenas.
//
// With Dtype::bf16 the products of every block (QKV, projection, fc1, fc2) run in bf16 with fp32
// accumulation (kernels/dense_bf16.h, a bf16 copy of the fp32 master weights made at each
// forward) and the attention takes bf16 tensors (the AttentionOp's Act views): the modulated
// layernorm outputs h1 and h2, q, k, v, o, the fc1 and GELU outputs are stored in bf16 (one
// buffer each, an Act in the model's dtype), as are the gradients that enter those products. The
// residual stream, layernorm statistics and outputs (the modulation backward reads them), the gated
// branch outputs, the conditioning MLP, the adaLN modulation, the patch embedding and the final
// layer, the loss and every weight gradient stay fp32.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/model/parts.h"

namespace wallfacer::model {

// The largest clips and patches: tokens, values per clip and values per patch stay far inside
// their integer types (int64, int64, int).
inline constexpr int kDitMaxFrames = 1 << 20, kDitMaxSize = 1 << 16, kDitMaxPatch = 1 << 10;

struct DitConfig {
  int channels = 3;  // pixel channels
  int patch = 4;     // patch side p
  int frames = 16;   // frames per clip
  int size = 64;     // frame height = width, in pixels
  int layers = 2;
  int dim = 64;
  int heads = 4;
  int mlp_ratio = 4;  // hidden width = mlp_ratio * dim
  int freq_dim = 64;  // width of the sinusoidal timestep features
  int classes = 0;    // class labels (0: unconditional)
  int head_dim() const { return dim / heads; }
  int grid() const { return size / patch; }                             // patches per side
  int64_t tokens() const { return int64_t(frames) * grid() * grid(); }  // per clip
  int patch_dim() const { return patch * patch * channels; }            // values per token
  int64_t clip_values() const { return int64_t(frames) * size * size * channels; }
  // Whether frames, size and patch lie within the bounds above and the patches tile a frame:
  // tokens() and clip_values() are then exact.
  bool clip_shape_ok() const {
    return frames >= 1 && frames <= kDitMaxFrames && size >= 1 && size <= kDitMaxSize &&
           patch >= 1 && patch <= kDitMaxPatch && size % patch == 0;
  }
  // Throws UsageError when the shapes do not fit together.
  void validate() const;
};

struct DitLayerParams {
  float* ada_w;   // (6C, C)
  float* ada_b;   // (6C)
  float* qkv_w;   // (3C, C): rows of q heads, then k heads, then v heads
  float* qkv_b;   // (3C)
  float* proj_w;  // (C, C)
  float* proj_b;  // (C)
  float* fc1_w;   // (M, C)
  float* fc1_b;   // (M)
  float* fc2_w;   // (C, M)
  float* fc2_b;   // (C)
};

struct DitParams {
  float* patch_w;  // (C, PD)  PD = p p channels
  float* patch_b;  // (C)
  float* t1_w;     // (C, F)   F = freq_dim
  float* t1_b;     // (C)
  float* t2_w;     // (C, C)
  float* t2_b;     // (C)
  float* y_emb;    // (K, C), null when classes = 0
  std::vector<DitLayerParams> layers;
  float* final_ada_w;  // (2C, C)
  float* final_ada_b;  // (2C)
  float* out_w;        // (PD, C)
  float* out_b;        // (PD)
};

// The parameter tensors in arena order (the order of DitParams above).
std::vector<ParamTensor> dit_param_tensors(const DitConfig& cfg);
int64_t dit_num_params(const DitConfig& cfg);
DitParams dit_param_view(const DitConfig& cfg, float* arena);
// DiT initialisation from a seed: Xavier-uniform linear weights, zero biases, N(0, 0.02) for the
// timestep MLP and the label table, and zero adaLN and output layers (adaLN-Zero).
void dit_init_params(const DitConfig& cfg, float* arena, uint64_t seed);

// Fixed sinusoidal positions of the tokens at global indices pos (T) -> (T, C). The channels are
// three equal even-width groups (frame, patch row, patch column), each [sin(a w_k), cos(a w_k)]
// with w_k = 10000^(-k / half); channels beyond 3 * group width are zero. fp64, then rounded.
void dit_pos_embedding(const DitConfig& cfg, const int64_t* pos, int T, float* out);
// Timestep features (B, F): [cos(1000 t w_k), sin(1000 t w_k)], w_k = 10000^(-k / (F / 2)).
void dit_timestep_features(const float* t, int B, int F, float* out);

// Clip (F, S, S, ch) pixels -> the patches of the tokens at global indices pos (T, PD), each patch
// ordered (row in patch, column in patch, channel). unpatchify is the inverse (writes the pixels
// of those tokens only).
void dit_patchify(const DitConfig& cfg, const float* clip, const int64_t* pos, int T, float* out);
void dit_unpatchify(const DitConfig& cfg, const float* patches, const int64_t* pos, int T,
                    float* clip);

class Dit {
 public:
  // batch: sequences of this rank; positions: global token indices of the rows this rank holds.
  // Each sequence is one clip (its conditioning from t[b], labels[b]) until set_clips; max_clips:
  // the most clips set_clips may pass (0: batch).
  Dit(const DitConfig& cfg, int batch, std::vector<int64_t> positions, AttentionOp& attention,
      Dtype dtype = Dtype::fp32, int max_clips = 0);
  ~Dit();
  Dit(const Dit&) = delete;
  Dit& operator=(const Dit&) = delete;

  const DitConfig& config() const { return cfg_; }
  int64_t num_params() const { return num_params_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // The activation and gradient buffers in floats (a bf16 value counts as half a float).
  int64_t activation_floats() const { return act_floats_; }
  Dtype dtype() const { return dtype_; }

  // Packed clips (docs/documents.md) for the following calls: row n of the local batch (B, T)
  // belongs to clip clip_of_row[n] in [0, clips), which sets its adaLN modulation, and sits at
  // token clip_positions[n] of that clip (its position embedding). t and labels then hold one
  // entry per clip. The attention masks are the AttentionOp's (set_documents).
  void set_clips(int clips, std::vector<int32_t> clip_of_row,
                 const std::vector<int64_t>& clip_positions);

  // xt: (B, T, PD) noisy patches, t: (K) times in [0, 1], labels: (K) or null, for the K clips
  // (K = B, one per sequence, unless set_clips said otherwise).
  // Computes the prediction (B, T, PD) into output().
  void predict(const float* xt, const float* t, const int32_t* labels);
  const float* output() const;
  // As predict, then returns the sum over the local rows of (output - target)^2 (fp64) and keeps
  // what the backward needs. target: (B, T, PD).
  double forward(const float* xt, const float* t, const int32_t* labels, const float* target);

  void zero_grads();
  // Adds the gradients of dloss * (sum of squared errors of the last forward) to grads().
  void backward(float dloss);

  struct Acts;

 private:
  // The bf16 copy of a block matrix given by its fp32 master (null in fp32).
  const bf16* weight16(const float* master) const {
    return params16_.empty() ? nullptr : params16_.data() + (master - params_.data());
  }
  void round_weights();  // params16_ = bf16(the block matrices of params_)
  void block_forward(int l);
  void block_backward(int l);
  DitConfig cfg_;
  int B_, T_;
  int K_;          // conditioned clips of the next forward
  int max_clips_;  // room for conditioned clips
  int64_t N_;
  std::vector<int64_t> positions_;
  AttentionOp& attn_;
  Dtype dtype_;
  int64_t num_params_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_, grads_;
  DitParams p_, g_;
  std::vector<float> pos_;  // (pos_rows_, C): row n of the batch takes row n % pos_rows_
  int64_t pos_rows_ = 0;
  std::vector<int32_t> clip_of_row_;  // (N): the clip whose modulation each row takes
  std::unique_ptr<Acts> a_;
  std::vector<bf16> params16_;  // bf16 copy of the block matrices (Dtype::bf16)
  int64_t act_floats_ = 0;
  const int32_t* labels_ = nullptr;
  const float* xt_ = nullptr;
};

}  // namespace wallfacer::model
