#pragma once
// A decoder-only Transformer with explicit forward and backward passes (llm.c style), one code
// for the architectures of model.arch:
//   x = wte[tokens]
//   per block: x += proj(attn(rope(q), rope(k), v)) with q, k, v = split(qkv(norm1(x)) [+ qkv_b])
//              x += fcproj(act(fc(norm2(x))))
//   logits = norm_f(x) @ head^T     (head: wte when model.tie_embeddings, else its own lm_head_w)
// "gpt" (GPT-2 style): norm = layernorm with weight and bias (eps 1e-5), act = tanh GELU of the
// fc output (M = mlp_hidden() wide).
// "llama": norm = RMSNorm with weight only (eps model.norm_eps), act = SwiGLU: fc is the fused
// gate and up projection (rows of gate, then rows of up: (2 M, C)), act = silu(gate) * up.
// Linear layers have no bias, except q, k, v with model.qkv_bias (Qwen2). The rotary embedding
// rotates the pairs (2i, 2i+1) of each head by pos * inv_freq[i] (kernels::rope_inv_freq, with
// model.rope_scaling): a Hugging Face checkpoint's q and k rows are permuted on import
// (model/hf_layout.h). Rotary embeddings use the GLOBAL
// token positions of the rows this rank holds, so sequence-parallel shards agree. Attention goes
// through an AttentionOp (the sequence-parallel DistAttention in training), and GQA shares each kv
// head among heads / kv_heads query heads.
//
// Parameters, gradients and activations live in contiguous arenas. With checkpointing
// `Attention`, the forward keeps only each block's input and the attention output (o, lse); the
// backward recomputes norms, projections and MLP of a block and never reruns the attention forward.
//
// With Dtype::bf16 the matrix products (QKV, projection, MLP fc and fcproj, LM head) run in bf16
// with fp32 accumulation (kernels/dense_bf16.h) and the attention takes bf16 tensors (the
// AttentionOp's Act views): each forward rounds the fp32 master weights to a bf16 copy once; the
// outputs of ln1, ln2 and the final layernorm, q, k, v, o, the fc and GELU outputs are stored in
// bf16, and so are the gradients that enter a product (d o, dq, dk, dv, the MLP's). The residual
// stream and its gradient, layernorm statistics, the rotary embedding (computed in fp32 on widened
// values, then rounded), the attention LSE, softmax and loss, and every weight gradient stay fp32
// (GELU computes in fp32 between bf16 input and output). One block_forward / block_backward serves
// both dtypes, and each stored activation is one buffer (an Act) in the model's dtype.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/model/parts.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::model {

// model.arch of a text model: the norm and MLP of its blocks (see above).
enum class Arch { Gpt, Llama };
// "gpt" | "llama"; any other name: UsageError naming it.
Arch parse_arch(std::string_view name);
std::string_view arch_name(Arch a);

struct GptConfig {
  Arch arch = Arch::Gpt;
  int vocab = 257;
  int layers = 2;
  int dim = 64;
  int heads = 4;
  int kv_heads = 4;
  int mlp_ratio = 4;     // hidden width = mlp_ratio * dim, unless intermediate is set
  int intermediate = 0;  // model.intermediate: the MLP's hidden width (0: mlp_ratio * dim)
  // model.norm_eps: the epsilon of the RMSNorms (llama); the GPT's layernorms use 1e-5 (the only
  // value accepted with arch "gpt").
  double norm_eps = 1e-5;
  bool tie_embeddings = true;  // model.tie_embeddings: the LM head is wte (else lm_head_w)
  bool qkv_bias = false;       // model.qkv_bias: q, k and v projections have a bias (qkv_b)
  double rope_theta = 10000.0;
  kernels::RopeScaling rope_scaling{};  // model.rope_scaling.{type, factor, ...}
  // model.window: the sliding window of the windowed layers (0: none): a query at position i
  // attends to keys j with i - window < j <= i (and, with packed documents, in its own document
  // only). model.window_layers: the indices of the windowed layers; empty: every layer when
  // window > 0. The other layers attend to every earlier position (global).
  int64_t window = 0;
  std::vector<int64_t> window_layers{};
  // The window of layer l: window for a windowed layer, else 0.
  int64_t layer_window(int l) const;
  int head_dim() const { return dim / heads; }
  int qkv_dim() const { return (heads + 2 * kv_heads) * head_dim(); }
  bool rmsnorm() const { return arch == Arch::Llama; }
  bool swiglu() const { return arch == Arch::Llama; }
  int mlp_hidden() const { return intermediate > 0 ? intermediate : mlp_ratio * dim; }
  // The width of the fc output: mlp_hidden(), or twice it (gate and up) with SwiGLU.
  int fc_dim() const { return swiglu() ? 2 * mlp_hidden() : mlp_hidden(); }
  // The rotary inverse frequencies of a head (D / 2), with rope_scaling.
  std::vector<double> rope_inv_freq() const;
  // Throws UsageError when the shapes do not fit together.
  void validate() const;
};

enum class Checkpointing { None, Attention };

// What a Gpt is built for. Train: forward, backward, every row's logits and loss. Infer: only
// forward_logits (a prefill): no gradients, the activations a block recomputes in training kept
// for one block at a time (as with attention checkpointing), and the final norm and LM head run on
// the rows whose logits are asked for (the (N, V) logits of every row are never allocated).
enum class GptUse { Train, Infer };
// The sets of block inputs, attention outputs and LSE of a Gpt built for inference (at most one
// per layer): the layers take them in turn, block l reading set l % kInferBlockSets and writing
// its output into the next.
constexpr int kInferBlockSets = 2;
Checkpointing parse_checkpointing(std::string_view name);  // "none" | "attention"
std::string_view checkpointing_name(Checkpointing c);

// The pointers of one block's tensors; those an architecture lacks are null. Tensor names (the
// arena's, gpt_param_tensors) in brackets, gpt / llama where they differ.
struct LayerParams {
  float* ln1_w = nullptr;     // (C) [h{l}.ln1_w]
  float* ln1_b = nullptr;     // (C) [h{l}.ln1_b] layernorm only
  float* qkv_w = nullptr;     // ((H + 2 Hkv) D, C) [h{l}.qkv_w]: rows of q heads, k heads, v heads
  float* qkv_b = nullptr;     // ((H + 2 Hkv) D) [h{l}.qkv_b] model.qkv_bias only
  float* proj_w = nullptr;    // (C, H D) [h{l}.proj_w]
  float* ln2_w = nullptr;     // (C) [h{l}.ln2_w]
  float* ln2_b = nullptr;     // (C) [h{l}.ln2_b] layernorm only
  float* fc_w = nullptr;      // (fc_dim, C) [h{l}.fc_w / h{l}.gate_up_w: gate rows, then up rows]
  float* fcproj_w = nullptr;  // (C, M) [h{l}.fcproj_w / h{l}.down_w]
};

struct GptParams {
  float* wte = nullptr;  // (V, C) [wte]
  std::vector<LayerParams> layers;
  float* lnf_w = nullptr;    // (C) [lnf_w]
  float* lnf_b = nullptr;    // (C) [lnf_b] layernorm only
  float* lm_head = nullptr;  // (V, C) [lm_head_w], or wte when tied
};

// Parameter count in closed form: V C (x2 untied) + L (norms + Q C [+ Q] + C C + (fc_dim + M) C)
// + the final norm, with Q = (H + 2 Hkv) D and a norm of 2 C (layernorm) or C (RMSNorm).
int64_t gpt_num_params(const GptConfig& cfg);
// The parameter tensors in arena order: wte, then per layer ln1_w [ln1_b] qkv_w [qkv_b] proj_w
// ln2_w [ln2_b] fc_w|gate_up_w fcproj_w|down_w, then lnf_w [lnf_b] [lm_head_w].
std::vector<ParamTensor> gpt_param_tensors(const GptConfig& cfg);
// Points a GptParams view at an arena laid out as gpt_param_tensors says.
GptParams gpt_param_view(const GptConfig& cfg, float* arena);
// GPT-2 style initialisation from a seed: N(0, 0.02) matrices, output projections (proj_w,
// fcproj_w, down_w) scaled by 1/sqrt(2 L), norm weights 1, biases 0.
void gpt_init_params(const GptConfig& cfg, float* arena, uint64_t seed);

class Gpt {
 public:
  // batch: sequences of this rank, tokens: rows per sequence on this rank (positions.size()).
  Gpt(const GptConfig& cfg, int batch, std::vector<int64_t> positions, Checkpointing ckpt,
      AttentionOp& attention, Dtype dtype = Dtype::fp32, GptUse use = GptUse::Train);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  int64_t num_params() const { return num_params_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  Dtype dtype() const { return dtype_; }
  // Bytes of the activation and gradient buffers (the bf16 ones count 2 bytes each).
  int64_t activation_bytes() const { return act_bytes_; }

  // tokens, targets: (B, T). Returns the sum of the losses of the local rows (fp64). Keeps what
  // the backward needs. In bf16, first rounds the dense weights of params() to their bf16 copy.
  double forward(const int32_t* tokens, const int32_t* targets);
  // GptUse::Infer: runs the blocks over tokens (B, T) and writes the logits (rows.size(), V) of
  // the local rows `rows` (indices 0 .. B*T-1) to `logits`, fp32, computed as forward computes
  // them (the same products in the model's dtype). In bf16, first rounds the dense weights.
  void forward_logits(const int32_t* tokens, const std::vector<int64_t>& rows, float* logits);
  // logits (B, T, V) of the last forward (valid until backward, which reuses the buffer).
  const float* logits() const;
  const float* losses() const;  // (B, T)

  void zero_grads();
  // Adds the gradients of dloss * (sum of the local losses) to grads().
  void backward(float dloss);

  // The global positions of every local row (B * T, row n of sequence n / T) for the following
  // forwards and backwards, replacing the positions the model was built with (the same for every
  // sequence): the rotary embedding follows them. For a layout that changes with the documents of
  // each step (seqpar Layout::Balanced); call it before a forward, not between a forward and its
  // backward.
  void set_positions(const std::vector<int64_t>& positions);

  struct Acts;
  struct BlockActs;

 private:
  void split_qkv(const BlockActs& b);
  void merge_dqkv();
  void block_forward(int l, bool run_attention);
  // The embedding and every block's forward (bf16: the weights rounded first): the input of the
  // final norm in x_final.
  void blocks_forward(const int32_t* tokens);
  void block_backward(int l);
  // out (N, OC) = in (N, C) @ w^T in the dtype of out and in (w: the fp32 master; bf16 uses its
  // bf16 copy); the backward adds the weight gradient to dw (fp32) and writes din.
  void dense_fwd(const Act& out, const Act& in, const float* w, int C, int OC,
                 const float* bias = nullptr);
  void dense_bwd(const Act& din, float* dw, const Act& dout, const Act& in, const float* w, int C,
                 int OC, float* dbias = nullptr);
  // out (N, C) = norm(x) (layernorm or RMSNorm) in the dtype of out (bf16: through scratch);
  // mean is unused by RMSNorm; rows >= 0: that many rows instead of N. The backward adds to dx,
  // dw and db (db null for RMSNorm).
  void norm_fwd(const Act& out, float* scratch, float* mean, float* rstd, const float* x,
                const float* w, const float* b, int64_t rows = -1);
  void norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                const float* mean, const float* rstd);
  void rope_tables(const int64_t* pos, int n);  // rope_cos_, rope_sin_ for n rows
  // The bf16 copy of a dense weight given by its fp32 master.
  const bf16* weight16(const float* master) const;
  void round_weights();  // params16_ = bf16(the matrices of params_)

  GptConfig cfg_;
  int B_, T_;
  int64_t N_;
  std::vector<int64_t> positions_;
  Checkpointing ckpt_;
  AttentionOp& attn_;
  Dtype dtype_;
  GptUse use_;
  int64_t num_params_;
  std::vector<ParamTensor> tensors_;
  LargeVector<float> params_, grads_;
  GptParams p_, g_;
  std::vector<double> inv_freq_;            // (D/2)
  std::vector<float> rope_cos_, rope_sin_;  // (T, D/2), or (B * T, D/2) after set_positions
  bool rope_per_row_ = false;               // set_positions gave every row its own angles
  std::unique_ptr<Acts> a_;
  LargeVector<bf16> params16_;  // bf16 copy of the dense weights (Dtype::bf16)
  int64_t act_bytes_ = 0;
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
};

}  // namespace wallfacer::model
