#include "wallfacer/kernels/attention_params.h"

#include <type_traits>

namespace wallfacer::kernels {
namespace {

// The fields both directions' structs have, from t.
template <class T>
void set_args(AttnArgs<T>& p, const AttnInputs<T>& t) {
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
}

// An output of element type G of the kernels of element type T: the pointer itself (fp32
// kernels), or an AttnOutput (bf16 kernels).
template <class T, class G>
AttnOut<T> output(G* x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<G, bf16>) {
    return {x, nullptr};
  } else {
    return {nullptr, x};
  }
}

}  // namespace

template <class T, class G>
AttnFwdParamsOf<T> fwd_params(const AttnInputs<T>& t, G* o, float* lse) {
  AttnFwdParamsOf<T> p;
  set_args(p, t);
  p.o = output<T>(o);
  p.o_stride = t.q_stride;
  p.lse = lse;
  p.lse_stride = t.stat_stride;
  return p;
}

template <class T, class G>
AttnBwdParamsOf<T> bwd_params(const AttnInputs<T>& t, const AttnGrads<T, G>& g) {
  AttnBwdParamsOf<T> p;
  set_args(p, t);
  p.dout = g.dout;
  p.dout_stride = t.q_stride;
  p.lse = g.lse;
  p.lse_stride = t.stat_stride;
  p.delta = g.delta;
  p.delta_stride = t.stat_stride;
  p.dq = output<T>(g.dq);
  p.dq_stride = t.q_stride;
  p.dk = output<T>(g.dk);
  p.dk_stride = t.kv_stride;
  p.dv = output<T>(g.dv);
  p.dv_stride = t.kv_stride;
  return p;
}

// fp32 inputs write fp32; bf16 inputs write bf16 (rounded once) or fp32.
template AttnFwdParamsOf<float> fwd_params(const AttnInputs<float>&, float*, float*);
template AttnFwdParamsOf<bf16> fwd_params(const AttnInputs<bf16>&, bf16*, float*);
template AttnFwdParamsOf<bf16> fwd_params(const AttnInputs<bf16>&, float*, float*);
template AttnBwdParamsOf<float> bwd_params(const AttnInputs<float>&,
                                           const AttnGrads<float, float>&);
template AttnBwdParamsOf<bf16> bwd_params(const AttnInputs<bf16>&, const AttnGrads<bf16, bf16>&);
template AttnBwdParamsOf<bf16> bwd_params(const AttnInputs<bf16>&, const AttnGrads<bf16, float>&);

}  // namespace wallfacer::kernels
