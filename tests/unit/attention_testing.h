#pragma once
// What the fp32 and bf16 attention tests share: problem cases, random inputs, the error measure
// of docs/numerics.md, and a guard that sets an environment variable for one scope.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/bench/inputs.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::kernels::attn_testing {

struct Case {
  int batch = 1, seq_q = 0, seq_k = 0, heads = 1, kv_heads = 1, head_dim = 0;
  bool causal = false;
  int64_t q_pos0 = 0, k_pos0 = 0;
  std::string name;
  int64_t window = 0;  // sliding window (causal); 0: none
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  return wallfacer::bench::uniform_values(n, seed);
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

// Relative error max |x - ref| / max |ref|; rows where ref is -inf must be -inf in x as well
// (and count as error 1e30 otherwise). When ref is all zero the absolute error is returned.
inline double rel_err(const std::vector<float>& x, const std::vector<double>& ref) {
  EXPECT_EQ(x.size(), ref.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (x[i] != ref[i]) max_err = 1e30;
      continue;
    }
    if (!std::isfinite(x[i])) return 1e30;
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_err = std::max(max_err, std::fabs(double(x[i]) - ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Cases every attention kernel runs, whatever its element type: Sq != Sk both ways, causal masks by
// global position (key block in the past, straddling the diagonal, in the future, rows fully masked
// at the start of a block), GQA ratios 1, 2, 8 and MQA.
inline std::vector<Case> shape_and_position_cases() {
  return {
      {1, 5, 300, 4, 2, 16, false, 0, 0, "Sq5_Sk300"},
      {1, 300, 5, 4, 2, 16, false, 0, 0, "Sq300_Sk5"},
      {1, 70, 90, 2, 1, 32, true, 1000, 100, "keys_in_past"},
      {1, 130, 130, 2, 1, 32, true, 500, 500, "diagonal"},
      {1, 70, 90, 2, 1, 32, true, 100, 1000, "keys_in_future"},
      {1, 70, 300, 2, 1, 32, true, 100, 150, "first_rows_masked"},
      {1, 300, 70, 2, 1, 32, true, 250, 120, "long_q_short_k"},
      {2, 65, 65, 8, 8, 32, true, 0, 0, "gqa1"},
      {2, 65, 65, 8, 4, 32, true, 0, 0, "gqa2"},
      {1, 65, 80, 8, 1, 32, false, 0, 0, "gqa8"},
      {1, 65, 80, 16, 1, 24, true, 3, 0, "mqa16"},
  };
}

// The cases compared with the fp64 reference: sequence lengths `seqs` (square, full and causal,
// `heads` heads of `head_dim`), the head dims `head_dims` (2 batches of 33 queries by 41 keys,
// causal when even), D = 256 against 300 keys, then shape_and_position_cases().
inline std::vector<Case> reference_cases(std::initializer_list<int> seqs, int heads, int head_dim,
                                         std::initializer_list<int> head_dims) {
  std::vector<Case> cs;
  for (int s : seqs)
    for (bool causal : {false, true})
      cs.push_back({1, s, s, heads, 1, head_dim, causal, 0, 0,
                    fmt::format("S{}{}", s, causal ? "_causal" : "")});
  for (int hd : head_dims)
    cs.push_back({2, 33, 41, 2, 2, hd, hd % 2 == 0, 0, 0, fmt::format("D{}", hd)});
  cs.push_back({1, 20, 300, 1, 1, 256, false, 0, 0, "D256"});
  for (const Case& c : shape_and_position_cases()) cs.push_back(c);
  return cs;
}

inline AttnDims dims_of(const Case& c) {
  return {c.batch, c.seq_q, c.seq_k, c.heads, c.kv_heads, c.head_dim};
}

inline reference::AttnRefProblem ref_problem(const Case& c) {
  reference::AttnRefProblem pr{dims_of(c), 1.0 / std::sqrt(double(c.head_dim)), c.causal, c.q_pos0,
                               c.k_pos0};
  pr.window = c.window;
  return pr;
}

// Packed documents (doc_of_pos): a case with document lengths over the global positions
// 0 .. max(q_pos0 + Sq, k_pos0 + Sk) - 1.
struct DocCase {
  Case c;
  std::vector<int64_t> lengths;
};

inline void PrintTo(const DocCase& dc, std::ostream* os) { *os << dc.c.name; }

// The doc_of_pos array of a document case.
inline std::vector<int32_t> doc_ids_of(const Case& c, const std::vector<int64_t>& lengths) {
  const int64_t seq = std::max(c.q_pos0 + c.seq_q, c.k_pos0 + c.seq_k);
  return doc_of_pos(doc_bounds_from_lengths(lengths, seq));
}

// Document cases, full and causal, for kernels whose tiles are 128 or 256 query rows by 256 key
// rows: boundaries on and next to tile borders, documents of one token, one document spanning all,
// key segments offset from the query segment and key segments in other documents only.
inline std::vector<DocCase> doc_cases() {
  std::vector<DocCase> cs;
  for (bool causal : {false, true}) {
    const std::string m = causal ? "_causal" : "_full";
    auto add = [&](Case c, std::vector<int64_t> lengths) {
      c.causal = causal;
      c.name += m;
      cs.push_back({c, std::move(lengths)});
    };
    add({1, 600, 600, 4, 2, 16, false, 0, 0, "on_tile_borders"}, {256, 256, 88});
    add({1, 600, 600, 4, 2, 16, false, 0, 0, "on_query_tile_border"}, {128, 384, 88});
    add({1, 600, 600, 4, 2, 16, false, 0, 0, "off_by_one_before"}, {255, 257, 88});
    add({1, 600, 600, 4, 2, 16, false, 0, 0, "off_by_one_after"}, {129, 128, 257, 86});
    add({1, 300, 300, 4, 2, 16, false, 0, 0, "one_token_docs"}, {1, 1, 150, 1, 146, 1});
    add({1, 530, 530, 4, 4, 16, false, 0, 0, "one_doc"}, {530});
    add({2, 300, 300, 4, 1, 16, false, 0, 0, "mqa_batch2"}, {100, 7, 193});
    add({1, 300, 300, 8, 2, 24, false, 0, 0, "gqa4_many_short"},
        {13, 1, 40, 2, 9, 33, 60, 1, 1, 17, 23, 100});
    // q at positions 600..899, k at 300..699, documents [0, 350), [350, 351), [351, 800), ...
    add({1, 300, 400, 4, 2, 16, false, 600, 300, "k_before_q"}, {350, 1, 449, 100});
    // q at 0..299, k at 200..599: the k segment starts inside the q segment
    add({1, 300, 400, 4, 2, 16, false, 0, 200, "k_overlaps_q"}, {256, 100, 244});
    // every key in a later document than every query
    add({1, 200, 300, 4, 2, 16, false, 0, 500, "k_in_other_doc_after"}, {400, 400});
    // every key in an earlier document than every query
    add({1, 200, 300, 4, 2, 16, false, 500, 0, "k_in_other_doc_before"}, {400, 300});
    // queries 0..299 in documents [0, 250) and [250, 1000); keys 500..799: rows 0..249 see nothing
    add({1, 300, 300, 4, 2, 16, false, 0, 500, "some_rows_see_nothing"}, {250, 550});
  }
  return cs;
}

// Sliding windows (causal, window W > 0), for kernels whose tiles are 128 or 256 query rows by 256
// key rows: windows ending on and next to tile borders, W = 1 (each query sees itself only),
// W >= the sequence (the causal mask), query and key segments offset so that the window's edge
// crosses the key segment, a key segment wholly outside every window (O = 0, LSE = -inf) and
// windows with documents. Empty lengths: no documents.
inline std::vector<DocCase> window_cases() {
  std::vector<DocCase> cs;
  auto add = [&](Case c, int64_t window, std::vector<int64_t> lengths = {}) {
    c.causal = true;
    c.window = window;
    c.name += fmt::format("_W{}", window);
    cs.push_back({c, std::move(lengths)});
  };
  for (int64_t w : {1, 2, 127, 128, 129, 255, 256, 257, 300, 512})
    add({1, 700, 700, 4, 2, 16, true, 0, 0, "S700"}, w);
  add({1, 300, 300, 4, 2, 16, true, 0, 0, "equals_seq"}, 300);
  add({1, 300, 300, 4, 2, 16, true, 0, 0, "beyond_seq"}, 100000);
  add({2, 97, 97, 8, 1, 24, true, 0, 0, "mqa_odd"}, 13);
  add({1, 1000, 1000, 1, 1, 16, true, 0, 0, "S1000"}, 333);
  // q at 1000..1299, k at 600..999: the window's edge sweeps through the key segment
  add({1, 300, 400, 4, 2, 16, true, 1000, 600, "k_before_q"}, 350);
  // keys 0..299, queries 1000..1199: every key is older than every window
  add({1, 200, 300, 4, 2, 16, true, 1000, 0, "k_outside"}, 400);
  // q at 0..299, k at 200..599 (k overlaps q, part in the future)
  add({1, 300, 400, 4, 2, 16, true, 0, 200, "k_overlaps_q"}, 64);
  add({1, 600, 600, 4, 2, 16, true, 0, 0, "docs_on_tile_borders"}, 200, {256, 256, 88});
  add({1, 600, 600, 4, 2, 16, true, 0, 0, "docs_short"}, 100, {129, 128, 257, 86});
  add({1, 300, 300, 8, 2, 24, true, 0, 0, "docs_many_short"}, 20,
      {13, 1, 40, 2, 9, 33, 60, 1, 1, 17, 23, 100});
  add({1, 300, 400, 4, 2, 16, true, 600, 300, "docs_k_before_q"}, 300, {350, 1, 449, 100});
  return cs;
}

// The shape of a test problem and its contiguous strides.
struct ProblemShape {
  Case c;
  AttnDims d;
  std::vector<int32_t> doc_ids;  // doc_of_pos over global positions; empty: no documents
  explicit ProblemShape(const Case& cs) : c(cs), d(dims_of(cs)) {}
  const int32_t* docs() const { return doc_ids.empty() ? nullptr : doc_ids.data(); }
  size_t nq() const { return size_t(d.batch) * d.seq_q * d.heads * d.head_dim; }
  size_t nk() const { return size_t(d.batch) * d.seq_k * d.kv_heads * d.head_dim; }
  float scale() const { return 1.0f / std::sqrt(float(d.head_dim)); }
  Strides3 qs() const { return Strides3::contiguous(d.seq_q, d.heads, d.head_dim); }
  Strides3 ks() const { return Strides3::contiguous(d.seq_k, d.kv_heads, d.head_dim); }
  Strides2 ls() const { return Strides2::contiguous(d.heads, d.seq_q); }
};

// The fp64 reference of a problem (its case and documents) on its inputs widened exactly; with an
// empty dout, the forward only.
struct ReferenceOutputs {
  std::vector<double> o, lse, dq, dk, dv;
  ReferenceOutputs(const ProblemShape& pb, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v,
                   const std::vector<double>& dout) {
    reference::AttnRefProblem pr = ref_problem(pb.c);
    pr.doc_of_pos = pb.docs();
    reference::attn_fwd_ref(pr, q, k, v, o, lse);
    if (!dout.empty()) reference::attn_bwd_ref(pr, q, k, v, dout, dq, dk, dv);
  }
};

// ref + x elementwise (the expected result of a call that adds into x).
inline std::vector<double> plus(const std::vector<double>& ref, const std::vector<float>& x) {
  std::vector<double> s(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) s[i] = ref[i] + x[i];
  return s;
}

// Points the fields that the fp32 and bf16 params structs share at a problem's contiguous tensors:
// dims, q, k, v, lse (and dout, delta for a backward), scale, masks and positions. The outputs are
// the caller's to set. `pb` has d, c, q, k, v, dout, lse, delta, qs(), ks(), ls(), scale() and
// docs() (doc_of_pos or nullptr).
template <typename Params, typename Problem>
void set_inputs(Params& p, Problem& pb) {
  p.dims = pb.d;
  p.q = pb.q.data(), p.q_stride = pb.qs();
  p.k = pb.k.data(), p.k_stride = pb.ks();
  p.v = pb.v.data(), p.v_stride = pb.ks();
  p.lse = pb.lse.data(), p.lse_stride = pb.ls();
  if constexpr (requires { p.dout; }) {
    p.dout = pb.dout.data(), p.dout_stride = pb.qs();
    p.delta = pb.delta.data(), p.delta_stride = pb.ls();
  }
  p.scale = pb.scale();
  p.causal = pb.c.causal;
  p.q_pos0 = pb.c.q_pos0;
  p.k_pos0 = pb.c.k_pos0;
  p.doc_of_pos = pb.docs();
  p.window = pb.c.window;
}

// The forward and backward parameters of problem pb, whose element type is T: the inputs as
// set_inputs sets them, and the outputs pb.o (forward), pb.dq, pb.dk, pb.dv (backward) as
// out(tensor) gives them to the kernels.
template <typename T, typename Problem, typename Out>
AttnFwdParamsOf<T> fwd_params_of(Problem& pb, Out out) {
  AttnFwdParamsOf<T> p;
  set_inputs(p, pb);
  p.o = out(pb.o), p.o_stride = pb.qs();
  return p;
}
template <typename T, typename Problem, typename Out>
AttnBwdParamsOf<T> bwd_params_of(Problem& pb, Out out) {
  AttnBwdParamsOf<T> p;
  set_inputs(p, pb);
  p.dq = out(pb.dq), p.dq_stride = pb.qs();
  p.dk = out(pb.dk), p.dk_stride = pb.ks();
  p.dv = out(pb.dv), p.dv_stride = pb.ks();
  return p;
}

// The strided tests' layout of a problem with Sq = Sk and H = Hkv: q, k, v are slices of one packed
// (B, S, 3, H, D) buffer; dout and the outputs live in rows padded by kPad elements; lse and delta
// have padded (B, H) strides. T is the element type of the inputs (float or bf16).
template <typename T>
struct StridedLayout {
  static constexpr int kPad = 5;
  int B, S, H, D;
  Strides3 packed, padded;
  Strides2 lpad;
  std::vector<T> qkv, dout;
  std::vector<float> lse, delta;

  template <typename Problem>
  explicit StridedLayout(const Problem& pb)
      : B(pb.d.batch),
        S(pb.d.seq_q),
        H(pb.d.heads),
        D(pb.d.head_dim),
        packed{int64_t(S) * 3 * H * D, int64_t(3) * H * D, D},
        padded{int64_t(S) * (H * D + kPad), H * D + kPad, D},
        lpad{int64_t(H) * (S + 3), S + 3},
        qkv(size_t(B) * packed.batch),
        dout(padded_size()),
        lse(size_t(B) * lpad.batch),
        delta(lse.size()) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < S; ++t)
        for (int h = 0; h < H; ++h)
          for (int e = 0; e < D; ++e) {
            const size_t x = at(packed, b, t, h, e), y = contiguous(b, t, h, e);
            qkv[x] = pb.q[y];
            qkv[x + H * D] = pb.k[y];
            qkv[x + 2 * H * D] = pb.v[y];
            dout[at(padded, b, t, h, e)] = pb.dout[y];
          }
  }
  size_t padded_size() const { return size_t(B) * padded.batch; }
  size_t at(const Strides3& s, int b, int t, int h, int e) const {
    return size_t(b * s.batch + t * s.seq + h * s.head + e);
  }
  size_t contiguous(int b, int t, int h, int e) const {
    return ((size_t(b) * S + t) * H + h) * D + e;
  }
  // Params fields as set_inputs sets them, with this layout's tensors and strides.
  template <typename Params>
  void set_inputs(Params& p, const AttnDims& d, float scale, bool causal) {
    p.dims = d;
    p.q = qkv.data(), p.q_stride = packed;
    p.k = qkv.data() + H * D, p.k_stride = packed;
    p.v = qkv.data() + 2 * H * D, p.v_stride = packed;
    p.lse = lse.data(), p.lse_stride = lpad;
    if constexpr (requires { p.dout; }) {
      p.dout = dout.data(), p.dout_stride = padded;
      p.delta = delta.data(), p.delta_stride = lpad;
    }
    p.scale = scale;
    p.causal = causal;
  }
  // A padded (B, S, H, D) tensor and this layout's LSE back in contiguous layouts.
  template <typename U>
  std::vector<U> gather(const std::vector<U>& x) const {
    std::vector<U> y(size_t(B) * S * H * D);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < S; ++t)
        for (int h = 0; h < H; ++h)
          for (int e = 0; e < D; ++e) y[contiguous(b, t, h, e)] = x[at(padded, b, t, h, e)];
    return y;
  }
  std::vector<float> gather_lse() const {
    std::vector<float> y(size_t(B) * H * S);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < S; ++t)
          y[(size_t(b) * H + h) * S + t] = lse[b * lpad.batch + h * lpad.head + t];
    return y;
  }
  // Whether the kPad elements after every padded row still hold `value`.
  template <typename U>
  bool padding_is(const std::vector<U>& x, U value) const {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < S; ++t)
        for (int e = H * D; e < H * D + kPad; ++e)
          if (!(x[b * padded.batch + t * padded.seq + e] == value)) return false;
    return true;
  }
};

// Sets an environment variable for the lifetime of the object (null value: unset), then restores
// it. wallfacer::num_threads() (OMP_NUM_THREADS) and the bf16 kernels (WALLFACER_BF16_PATH) read
// theirs at every call.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), saved_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

}  // namespace wallfacer::kernels::attn_testing
