// A stand-in for a module that calls kernels: tests/layers/CMakeLists.txt links it as a module that
// may use seqpar but not kernels (the link must fail) and as one that may use kernels (it must
// link).
#include "wallfacer/kernels/attention.h"

void layering_probe_attention(const wallfacer::kernels::AttnFwdParams& p) {
  wallfacer::kernels::attn_fwd(p);
}
