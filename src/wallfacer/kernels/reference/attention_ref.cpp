#include "wallfacer/kernels/reference/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::reference {
namespace {

struct Index {
  const AttnDims& d;
  int64_t q(int b, int i, int h, int c) const {
    return ((int64_t(b) * d.seq_q + i) * d.heads + h) * d.head_dim + c;
  }
  int64_t k(int b, int j, int h, int c) const {
    return ((int64_t(b) * d.seq_k + j) * d.kv_heads + h) * d.head_dim + c;
  }
  int64_t lse(int b, int h, int i) const { return (int64_t(b) * d.heads + h) * d.seq_q + i; }
};

bool visible(const AttnRefProblem& pr, int i, int j) {
  const int64_t qp = pr.q_pos0 + i, kp = pr.k_pos0 + j;
  if (pr.doc_of_pos && pr.doc_of_pos[qp] != pr.doc_of_pos[kp]) return false;
  if (pr.causal && pr.window > 0 && qp - kp >= pr.window) return false;
  return !pr.causal || qp >= kp;
}

void check(const AttnRefProblem& pr, size_t nq, size_t nk, size_t nv) {
  const AttnDims& d = pr.dims;
  WF_CHECK(d.heads % d.kv_heads == 0, "attn ref: heads {} % kv_heads {} != 0", d.heads, d.kv_heads);
  WF_CHECK(nq == size_t(d.batch) * d.seq_q * d.heads * d.head_dim, "attn ref: q has {} elements",
           nq);
  WF_CHECK(nk == size_t(d.batch) * d.seq_k * d.kv_heads * d.head_dim && nv == nk,
           "attn ref: k, v have {}, {} elements", nk, nv);
}

// Probabilities of row (b, h, i) over all keys; returns the row's LSE (-inf when fully masked).
// T is double (the full reference) or float (spot checks that read the kernel's fp32 inputs).
template <typename T>
double row_probs(const AttnRefProblem& pr, const T* q, const T* k, int b, int h, int i,
                 std::vector<double>& p) {
  const AttnDims& d = pr.dims;
  const Index ix{d};
  const int hk = h / (d.heads / d.kv_heads);
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < d.seq_k; ++j) {
    if (!visible(pr, i, j)) {
      p[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const T* qi = q + ix.q(b, i, h, 0);
    const T* kj = k + ix.k(b, j, hk, 0);
    double s = 0;
    for (int c = 0; c < d.head_dim; ++c) s += double(qi[c]) * double(kj[c]);
    p[j] = s * pr.scale;
    m = std::max(m, p[j]);
  }
  if (m == -std::numeric_limits<double>::infinity()) {
    std::fill(p.begin(), p.end(), 0.0);
    return m;
  }
  double sum = 0;
  for (int j = 0; j < d.seq_k; ++j) {
    p[j] = std::exp(p[j] - m);
    sum += p[j];
  }
  for (int j = 0; j < d.seq_k; ++j) p[j] /= sum;
  return m + std::log(sum);
}

}  // namespace

void attn_fwd_ref(const AttnRefProblem& pr, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  std::vector<double>& o, std::vector<double>& lse) {
  check(pr, q.size(), k.size(), v.size());
  const AttnDims& d = pr.dims;
  const Index ix{d};
  o.assign(q.size(), 0.0);
  lse.assign(size_t(d.batch) * d.heads * d.seq_q, 0.0);
  std::vector<double> p(d.seq_k);
  for (int b = 0; b < d.batch; ++b)
    for (int h = 0; h < d.heads; ++h) {
      const int hk = h / (d.heads / d.kv_heads);
      for (int i = 0; i < d.seq_q; ++i) {
        lse[ix.lse(b, h, i)] = row_probs(pr, q.data(), k.data(), b, h, i, p);
        double* oi = o.data() + ix.q(b, i, h, 0);
        for (int j = 0; j < d.seq_k; ++j) {
          const double* vj = v.data() + ix.k(b, j, hk, 0);
          for (int c = 0; c < d.head_dim; ++c) oi[c] += p[j] * vj[c];
        }
      }
    }
}

void attn_bwd_ref(const AttnRefProblem& pr, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  const std::vector<double>& dout, std::vector<double>& dq, std::vector<double>& dk,
                  std::vector<double>& dv) {
  check(pr, q.size(), k.size(), v.size());
  WF_CHECK(dout.size() == q.size(), "attn ref: dout has {} elements", dout.size());
  const AttnDims& d = pr.dims;
  const Index ix{d};
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  std::vector<double> p(d.seq_k), dp(d.seq_k);
  for (int b = 0; b < d.batch; ++b)
    for (int h = 0; h < d.heads; ++h) {
      const int hk = h / (d.heads / d.kv_heads);
      for (int i = 0; i < d.seq_q; ++i) {
        row_probs(pr, q.data(), k.data(), b, h, i, p);
        // O_i = sum_j p_j v_j;  dp_j = dO_i . v_j;  ds_j = p_j (dp_j - sum_l p_l dp_l)
        const double* doi = dout.data() + ix.q(b, i, h, 0);
        const double* qi = q.data() + ix.q(b, i, h, 0);
        double* dqi = dq.data() + ix.q(b, i, h, 0);
        double pdp = 0;
        for (int j = 0; j < d.seq_k; ++j) {
          const double* vj = v.data() + ix.k(b, j, hk, 0);
          double s = 0;
          for (int c = 0; c < d.head_dim; ++c) s += doi[c] * vj[c];
          dp[j] = s;
          pdp += p[j] * s;
        }
        for (int j = 0; j < d.seq_k; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = p[j] * (dp[j] - pdp) * pr.scale;
          const double* kj = k.data() + ix.k(b, j, hk, 0);
          double* dkj = dk.data() + ix.k(b, j, hk, 0);
          double* dvj = dv.data() + ix.k(b, j, hk, 0);
          for (int c = 0; c < d.head_dim; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
            dvj[c] += p[j] * doi[c];
          }
        }
      }
    }
}

double attn_fwd_ref_row(const AttnRefProblem& pr, const float* q, const float* k, const float* v,
                        int b, int h, int i, double* o_row) {
  const AttnDims& d = pr.dims;
  WF_CHECK(d.heads % d.kv_heads == 0, "attn ref: heads {} % kv_heads {} != 0", d.heads, d.kv_heads);
  WF_CHECK(b >= 0 && b < d.batch && h >= 0 && h < d.heads && i >= 0 && i < d.seq_q,
           "attn ref: row (b={}, h={}, i={}) out of range", b, h, i);
  const Index ix{d};
  const int hk = h / (d.heads / d.kv_heads);
  std::vector<double> p(d.seq_k);
  const double lse = row_probs(pr, q, k, b, h, i, p);
  std::fill(o_row, o_row + d.head_dim, 0.0);
  for (int j = 0; j < d.seq_k; ++j) {
    const float* vj = v + ix.k(b, j, hk, 0);
    for (int c = 0; c < d.head_dim; ++c) o_row[c] += p[j] * double(vj[c]);
  }
  return lse;
}

}  // namespace wallfacer::kernels::reference
