#include "wallfacer/kernels/reference/ops_ref.h"

#include <cmath>

namespace wallfacer::kernels::ref {

Vec matmul(const Vec& inp, const Vec& w, int64_t N, int C, int OC) {
  Vec out(size_t(N * OC), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += inp[n * C + c] * w[int64_t(o) * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

void matmul_bwd(Vec& dinp, Vec& dw, const Vec& dout, const Vec& inp, const Vec& w, int64_t N, int C,
                int OC) {
  dinp.assign(size_t(N * C), 0.0);
  dw.assign(size_t(OC) * C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o)
      for (int c = 0; c < C; ++c) {
        dinp[n * C + c] += dout[n * OC + o] * w[int64_t(o) * C + c];
        dw[int64_t(o) * C + c] += dout[n * OC + o] * inp[n * C + c];
      }
}

namespace {
void moments(const double* x, int C, double eps, double& mean, double& rstd) {
  mean = 0;
  for (int c = 0; c < C; ++c) mean += x[c];
  mean /= C;
  double var = 0;
  for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
  rstd = 1.0 / std::sqrt(var / C + eps);
}
}  // namespace

Vec layernorm(const Vec& inp, const Vec& w, const Vec& b, int64_t N, int C, double eps) {
  Vec out(inp.size());
  for (int64_t n = 0; n < N; ++n) {
    double m, r;
    moments(&inp[n * C], C, eps, m, r);
    for (int c = 0; c < C; ++c) out[n * C + c] = (inp[n * C + c] - m) * r * w[c] + b[c];
  }
  return out;
}

void layernorm_bwd(Vec& dinp, Vec& dw, Vec& db, const Vec& dout, const Vec& inp, const Vec& w,
                   int64_t N, int C, double eps) {
  dinp.assign(inp.size(), 0.0);
  dw.assign(size_t(C), 0.0);
  db.assign(size_t(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m, r;
    moments(&inp[n * C], C, eps, m, r);
    double mg = 0, mgx = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[n * C + c] - m) * r, g = dout[n * C + c] * w[c];
      mg += g / C;
      mgx += g * xhat / C;
      dw[c] += dout[n * C + c] * xhat;
      db[c] += dout[n * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[n * C + c] - m) * r, g = dout[n * C + c] * w[c];
      dinp[n * C + c] = r * (g - mg - xhat * mgx);
    }
  }
}

double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double gelu_grad(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x);
}

Vec rope(const Vec& x, const std::vector<int64_t>& pos, int B, int T, int H, int D, double theta,
         bool inverse) {
  Vec y(x.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < D / 2; ++i) {
          const double a = double(pos[size_t(t)]) * std::pow(theta, -2.0 * i / D);
          const double c = std::cos(a), s = inverse ? -std::sin(a) : std::sin(a);
          const int64_t o = ((int64_t(b) * T + t) * H + h) * D + 2 * i;
          y[o] = x[o] * c - x[o + 1] * s;
          y[o + 1] = x[o] * s + x[o + 1] * c;
        }
  return y;
}

Vec rmsnorm(const Vec& inp, const Vec& w, int64_t N, int C, double eps) {
  Vec out(inp.size());
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += inp[n * C + c] * inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) out[n * C + c] = inp[n * C + c] * w[c] / std::sqrt(ms + eps);
  }
  return out;
}

void rmsnorm_bwd(Vec& dinp, Vec& dw, const Vec& dout, const Vec& inp, const Vec& w, int64_t N,
                 int C, double eps) {
  dinp.assign(inp.size(), 0.0);
  dw.assign(size_t(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += inp[n * C + c] * inp[n * C + c] / C;
    const double s = ms + eps;
    // y_c = x_c w_c s^(-1/2); d y_c / d x_j = w_c (delta_cj s^(-1/2) - x_c x_j s^(-3/2) / C)
    for (int c = 0; c < C; ++c) {
      dw[size_t(c)] += dout[n * C + c] * inp[n * C + c] / std::sqrt(s);
      for (int j = 0; j < C; ++j) {
        const double J = w[c] * ((c == j ? 1.0 : 0.0) / std::sqrt(s) -
                                 inp[n * C + c] * inp[n * C + j] / (C * s * std::sqrt(s)));
        dinp[n * C + j] += dout[n * C + c] * J;
      }
    }
  }
}

Vec swiglu(const Vec& inp, int64_t N, int I) {
  Vec out(size_t(N) * I);
  for (int64_t n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      const double g = inp[n * 2 * I + i], u = inp[n * 2 * I + I + i];
      out[n * I + i] = g / (1 + std::exp(-g)) * u;
    }
  return out;
}

Vec swiglu_bwd(const Vec& inp, const Vec& dout, int64_t N, int I) {
  Vec d(inp.size());
  for (int64_t n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      const double g = inp[n * 2 * I + i], u = inp[n * 2 * I + I + i], dy = dout[n * I + i];
      const double e = std::exp(-g);
      // silu(g) = g / (1 + e^-g); silu'(g) = 1 / (1 + e^-g) + g e^-g / (1 + e^-g)^2
      d[n * 2 * I + i] = dy * u * (1 / (1 + e) + g * e / ((1 + e) * (1 + e)));
      d[n * 2 * I + I + i] = dy * g / (1 + e);
    }
  return d;
}

Vec rope_inv_freq(int D, double theta, int type, double factor, double low, double high,
                  double original) {
  Vec f(size_t(D / 2));
  const double pi = std::acos(-1.0);
  for (int i = 0; i < D / 2; ++i) {
    const double base = 1.0 / std::pow(theta, double(2 * i) / D);
    double scaled = base;
    if (type == 1) scaled = base / factor;
    if (type == 2) {
      // The fraction of the original context one turn of this frequency spans.
      const double turns = original * base / (2 * pi);
      if (turns < low) {
        scaled = base / factor;
      } else if (turns <= high) {
        const double s = (turns - low) / (high - low);
        scaled = base * (s + (1 - s) / factor);
      }
    }
    f[size_t(i)] = scaled;
  }
  return f;
}

Vec rope_freq(const Vec& x, const std::vector<int64_t>& pos, int B, int T, int H, int D,
              const Vec& inv_freq) {
  Vec y(x.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < D / 2; ++i) {
          const double a = double(pos[size_t(t)]) * inv_freq[size_t(i)];
          const int64_t o = ((int64_t(b) * T + t) * H + h) * D + 2 * i;
          y[o] = x[o] * std::cos(a) - x[o + 1] * std::sin(a);
          y[o + 1] = x[o] * std::sin(a) + x[o + 1] * std::cos(a);
        }
  return y;
}

Vec softmax_xent(const Vec& logits, const std::vector<int32_t>& targets, int64_t N, int V) {
  Vec out(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int i = 0; i < V; ++i) s += std::exp(logits[n * V + i]);
    out[n] = std::log(s) - logits[n * V + targets[n]];
  }
  return out;
}

Vec softmax_xent_bwd(const Vec& logits, const std::vector<int32_t>& targets, double dloss,
                     int64_t N, int V) {
  Vec d(logits.size());
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int i = 0; i < V; ++i) s += std::exp(logits[n * V + i]);
    for (int i = 0; i < V; ++i)
      d[n * V + i] = dloss * (std::exp(logits[n * V + i]) / s - (i == targets[n] ? 1.0 : 0.0));
  }
  return d;
}

void adamw(Vec& p, const Vec& g, Vec& m, Vec& v, double lr, double b1, double b2, double eps,
           double wd, int64_t step) {
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = m[i] / (1 - std::pow(b1, double(step)));
    const double vhat = v[i] / (1 - std::pow(b2, double(step)));
    p[i] = p[i] - lr * wd * p[i] - lr * mhat / (std::sqrt(vhat) + eps);
  }
}

}  // namespace wallfacer::kernels::ref
