// Linked with wallfacer::wallfacer_static alone: layouts and one kernel call give known results.
#include <wallfacer/wallfacer.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  namespace seqpar = wallfacer::seqpar;
  namespace kernels = wallfacer::kernels;
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "static_link: %s\n", what), ++failures;
  };

  // Ring: rank 1 of 2 holds tokens 4..7 of 8; causal WallFacer (zigzag layout): 2 and 5.
  seqpar::AttnConfig cfg;
  cfg.seq = 8;
  cfg.head_dim = 4;
  check(seqpar::local_positions(cfg, 2, 1) == std::vector<int64_t>{4, 5, 6, 7}, "ring layout");
  cfg.strategy = seqpar::Strategy::WallFacer;
  cfg.causal = true;
  check(seqpar::local_positions(cfg, 4, 2) == std::vector<int64_t>{2, 5}, "zigzag layout");

  // One query, one key: softmax is 1, so o = v and lse = scale * q.k.
  const std::vector<float> q = {1, 2, 3, 4}, k = {0.5f, -1, 2, 0}, v = {7, 8, 9, 10};
  std::vector<float> o(4), lse(1);
  kernels::AttnFwdParams p;
  p.dims = {1, 1, 1, 1, 1, 4};
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
  p.q_stride = p.k_stride = p.v_stride = p.o_stride = kernels::Strides3::contiguous(1, 1, 4);
  p.lse_stride = kernels::Strides2::contiguous(1, 1);
  p.scale = 0.5f;
  kernels::attn_fwd(p);
  check(o == v, "attn_fwd: o != v for a single key");
  check(std::fabs(lse[0] - 0.5f * (0.5f - 2 + 6)) < 1e-6f, "attn_fwd: lse != scale q.k");

  // The planner's names.
  check(wallfacer::plan::parse_placement("ring-intra") == wallfacer::plan::Placement::RingIntra,
        "parse_placement");
  if (failures == 0) std::printf("static_link: ok\n");
  return failures == 0 ? 0 : 1;
}
