#pragma once
// Flash attention with bf16 storage and fp32 arithmetic: forward with row log-sum-exp, backward.
// Layouts, masks, positions, documents (doc_of_pos), the sliding window and GQA are those of
// attention.h; only the element types differ.
//
// What is bf16 and what is fp32:
//   q, k, v, dout                 bf16 inputs
//   o, dq, dk, dv                 bf16 or fp32 outputs (AttnOutput): bf16 is the fp32 result
//                                 rounded once at the end; fp32 holds it exactly and is what
//                                 `accumulate` needs (a running O across key blocks is merged in
//                                 fp32 with lse_merge, gradients are added in fp32), so nothing is
//                                 rounded per block; round it with fp32_to_bf16 when done
//   lse, delta                    fp32 (B, H, Sq)
//   inside                        every product accumulates in fp32; the running max, LSE, row
//                                 sums, online-softmax rescaling and delta are fp32.
//
// Three code paths:
//   amx       where the CPU reports amx_bf16, amx_tile and avx512_bf16 and Linux grants the tile
//             state: the kernels of the avx512 path with tile products on AMX tiles (TDPBF16PS,
//             16 x 16 fp32 accumulators; the operands packed the same way) and the forward's
//             softmax rows in AVX-512 (VCVTNE2PS2BF16), a chunk of 32 query rows at a time. On a
//             Xeon with AMX (2 threads, S = 4096 causal, D = 64) about 3.5x the avx512 path and
//             2.7x the portable one, forward and backward.
//   avx512    where the CPU reports avx512_bf16: tiled kernels whose tile products are AVX512-BF16
//             instructions (VDPBF16PS); the P tile (forward, backward) and the dS tile (backward)
//             are rounded to bf16 before they enter the next product (on the amx path too).
//   portable  any x86-64 CPU: the inputs widened to fp32 (exactly) and the fp32 kernels of
//             attention.h run on them, so P and dS stay fp32; the widened copies are made for all
//             heads at once, or a batch and a group of kv heads at a time past
//             detail::bf16_widen_budget() bytes.
// Their results agree within the tolerances of docs/numerics.md, not bit for bit; each is
// deterministic. WALLFACER_BF16_PATH=portable forces the portable path, WALLFACER_BF16_PATH=avx512
// or amx requires that path (an error where the CPU, the build or the kernel lacks it); unset or
// `auto` chooses by the CPU: amx, else avx512, else portable. It is read at every call.
// docs/numerics.md gives the exact order of operations and the measured errors.

#include <cstdint>

#include "wallfacer/core/bf16.h"
#include "wallfacer/kernels/attention.h"

namespace wallfacer::kernels {

// The parameter structs of attention.h with bf16 inputs; each output is an AttnOutput.
using AttnFwdBf16Params = AttnFwdParamsOf<bf16>;
using AttnBwdBf16Params = AttnBwdParamsOf<bf16>;

// O and LSE of softmax(scale * Q K^T + mask) V. Checks its arguments (throws wallfacer::Error).
void attn_fwd_bf16(const AttnFwdBf16Params& p);

// delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d] in fp32 (the products of two bf16 are
// exact), over dims.seq_q rows.
void attn_bwd_preprocess_bf16(const AttnDims& dims, const bf16* o, Strides3 o_stride,
                              const bf16* dout, Strides3 dout_stride, float* delta,
                              Strides2 delta_stride);

// dQ, dK, dV of the forward above, given the final LSE and delta.
void attn_bwd_bf16(const AttnBwdBf16Params& p);

// The code path that computes the tile products.
enum class Bf16Path { portable, avx512, amx };
// The path a call made now would take (reads WALLFACER_BF16_PATH; throws UsageError for a value
// other than auto, portable, avx512 or amx, for avx512 on a CPU without avx512_bf16, or for amx
// where bf16_amx_available() is false, naming what is missing).
Bf16Path bf16_path();
// Whether this build and CPU can run the AVX512-BF16 path.
bool bf16_avx512_available();
// Whether this build, CPU and kernel can run the AMX path: the CPU reports amx_bf16, amx_tile and
// avx512_bf16, the OS saves the tile state and the process was granted it
// (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once per process, at the first call).
bool bf16_amx_available();
const char* bf16_path_name(Bf16Path path);

// Tile sizes of the bf16 kernels (query x key rows). With a causal mask or packed documents
// (doc_of_pos) the backward's key tiles are 256 rows whatever attn_bwd_bf16_tiling says.
AttnTiling attn_fwd_bf16_tiling(const AttnDims& dims);
AttnTiling attn_bwd_bf16_tiling(const AttnDims& dims);

// Bytes of scratch memory the calls allocate with `threads` threads, on the path a call made now
// would take. Unlike the fp32 kernels these grow with the sequence: on the avx512 and amx paths
// the forward packs K and V (as large as k and v), the backward packs Q and dO (as large as q and
// dout) and, when dq is bf16, accumulates dQ in fp32 (as large as dq in fp32); the portable path
// holds fp32 copies of the inputs and of the bf16 outputs (up to detail::bf16_widen_budget()
// bytes) besides the fp32 kernels' scratch.
int64_t attn_fwd_bf16_workspace_bytes(const AttnDims& dims, int threads);
int64_t attn_bwd_bf16_workspace_bytes(const AttnDims& dims, int threads, bool dq_is_bf16);

namespace detail {
// The most bytes of fp32 copies the portable path holds at a time (default 256 MiB): beyond it, it
// widens one batch and a group of kv heads at a time. Settable for tests.
int64_t& bf16_widen_budget();
}  // namespace detail

}  // namespace wallfacer::kernels
