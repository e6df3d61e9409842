#include "wallfacer/kernels/attention_params.h"

#include "wallfacer/core/error.h"

namespace wallfacer::kernels {
namespace {

// The fields every parameter struct has, from t.
template <class P, class T>
P common(const AttnInputs<T>& t) {
  P p;
  p.dims = t.dims;
  p.q = t.q;
  p.q_stride = t.q_stride;
  p.k = t.k;
  p.k_stride = t.kv_stride;
  p.v = t.v;
  p.v_stride = t.kv_stride;
  p.scale = t.scale;
  p.causal = t.causal;
  p.q_pos0 = t.q_pos0;
  p.k_pos0 = t.k_pos0;
  p.doc_of_pos = t.doc_of_pos;
  p.window = t.window;
  p.accumulate = t.accumulate;
  return p;
}

// The backward's inputs besides q, k, v.
template <class P, class T, class G>
void set_grad_inputs(P& p, const AttnInputs<T>& t, const AttnGrads<T, G>& g) {
  p.dout = g.dout;
  p.dout_stride = t.q_stride;
  p.lse = g.lse;
  p.lse_stride = t.stat_stride;
  p.delta = g.delta;
  p.delta_stride = t.stat_stride;
}

// Where a bf16 kernel writes one output: bf16 (rounded once) or fp32.
AttnOutput output(bf16* x, Strides3 s) { return {x, nullptr, s}; }
AttnOutput output(float* x, Strides3 s) { return {nullptr, x, s}; }

template <class G>
AttnFwdBf16Params fwd_bf16(const AttnInputs<bf16>& t, G* o, float* lse) {
  auto p = common<AttnFwdBf16Params>(t);
  p.o = output(o, t.q_stride);
  p.lse = lse;
  p.lse_stride = t.stat_stride;
  return p;
}

template <class G>
AttnBwdBf16Params bwd_bf16(const AttnInputs<bf16>& t, const AttnGrads<bf16, G>& g) {
  auto p = common<AttnBwdBf16Params>(t);
  set_grad_inputs(p, t, g);
  p.dq = output(g.dq, t.q_stride);
  p.dk = output(g.dk, t.kv_stride);
  p.dv = output(g.dv, t.kv_stride);
  return p;
}

}  // namespace

AttnFwdParams fwd_params(const AttnInputs<float>& t, float* o, float* lse) {
  auto p = common<AttnFwdParams>(t);
  p.o = o;
  p.o_stride = t.q_stride;
  p.lse = lse;
  p.lse_stride = t.stat_stride;
  return p;
}

AttnFwdBf16Params fwd_params(const AttnInputs<bf16>& t, bf16* o, float* lse) {
  return fwd_bf16(t, o, lse);
}

AttnFwdBf16Params fwd_params(const AttnInputs<bf16>& t, float* o, float* lse) {
  return fwd_bf16(t, o, lse);
}

AttnBwdParams bwd_params(const AttnInputs<float>& t, const AttnGrads<float, float>& g) {
  auto p = common<AttnBwdParams>(t);
  set_grad_inputs(p, t, g);
  p.dq = g.dq;
  p.dq_stride = t.q_stride;
  p.dk = g.dk;
  p.dk_stride = t.kv_stride;
  p.dv = g.dv;
  p.dv_stride = t.kv_stride;
  return p;
}

AttnBwdBf16Params bwd_params(const AttnInputs<bf16>& t, const AttnGrads<bf16, bf16>& g) {
  return bwd_bf16(t, g);
}

AttnBwdBf16Params bwd_params(const AttnInputs<bf16>& t, const AttnGrads<bf16, float>& g) {
  return bwd_bf16(t, g);
}

}  // namespace wallfacer::kernels
