#pragma once
// Naive fp64 twins of kernels/ops.h, written from the formulas for tests. Same shapes and
// conventions as the fast kernels; every backward here OVERWRITES its outputs.

#include <cstdint>
#include <vector>

namespace wallfacer::kernels::ref {

using Vec = std::vector<double>;

// out (N, OC) = inp (N, C) @ w (OC, C)^T
Vec matmul(const Vec& inp, const Vec& w, int64_t N, int C, int OC);
// dinp (N, C), dw (OC, C)
void matmul_bwd(Vec& dinp, Vec& dw, const Vec& dout, const Vec& inp, const Vec& w, int64_t N, int C,
                int OC);

Vec layernorm(const Vec& inp, const Vec& w, const Vec& b, int64_t N, int C, double eps);
// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w; dw = sum dy xhat; db = sum dy.
void layernorm_bwd(Vec& dinp, Vec& dw, Vec& db, const Vec& dout, const Vec& inp, const Vec& w,
                   int64_t N, int C, double eps);

double gelu(double x);
double gelu_grad(double x);

// x (B, T, H, D) contiguous, positions pos (T): rotated copy (inverse = true rotates backwards).
Vec rope(const Vec& x, const std::vector<int64_t>& pos, int B, int T, int H, int D, double theta,
         bool inverse);

// RMSNorm: out (N, C) = x w / sqrt(mean(x^2) + eps); its backward (dinp, dw overwritten).
Vec rmsnorm(const Vec& inp, const Vec& w, int64_t N, int C, double eps);
void rmsnorm_bwd(Vec& dinp, Vec& dw, const Vec& dout, const Vec& inp, const Vec& w, int64_t N,
                 int C, double eps);

// SwiGLU of inp (N, 2I) = [gate | up]: out (N, I); its backward dinp (N, 2I).
Vec swiglu(const Vec& inp, int64_t N, int I);
Vec swiglu_bwd(const Vec& inp, const Vec& dout, int64_t N, int I);

// The rotary inverse frequencies with scaling: type 0 none, 1 linear, 2 llama3 (factor, low and
// high frequency factors, original context), from the wavelength of each frequency.
Vec rope_inv_freq(int D, double theta, int type, double factor, double low, double high,
                  double original);
// x (B, T, H, D) rotated by pos[t] * inv_freq[i] on the pairs (2i, 2i+1).
Vec rope_freq(const Vec& x, const std::vector<int64_t>& pos, int B, int T, int H, int D,
              const Vec& inv_freq);

// losses (N)
Vec softmax_xent(const Vec& logits, const std::vector<int32_t>& targets, int64_t N, int V);
Vec softmax_xent_bwd(const Vec& logits, const std::vector<int32_t>& targets, double dloss,
                     int64_t N, int V);

// One AdamW step on copies; returns the new (params, m, v).
void adamw(Vec& p, const Vec& g, Vec& m, Vec& v, double lr, double b1, double b2, double eps,
           double wd, int64_t step);

}  // namespace wallfacer::kernels::ref
