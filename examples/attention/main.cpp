// Distributed exact attention from a program that owns MPI: it starts MPI itself, hands wallfacer
// a communicator of its own, lays the sequence out with local_positions, runs the forward and
// the backward with WallFacer-C and with ring attention, gathers the results on rank 0 and checks
// them against the single-process kernel on the whole sequence. Exit code 1 on a mismatch.
//
//   mpirun -np 4 attention_example     (any number of ranks dividing 128; WallFacer takes the
//                                        largest C with C^2 dividing it)

#include <mpi.h>
#include <wallfacer/wallfacer.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace kernels = wallfacer::kernels;
namespace seqpar = wallfacer::seqpar;

// Shapes of the example: one sequence of 1024 tokens, 4 query heads sharing 2 key/value heads.
constexpr int kBatch = 1, kHeads = 4, kKvHeads = 2, kHeadDim = 32;
constexpr int64_t kSeq = 1024;

// The whole sequence's tensors: q, dout (B, S, H, D); k, v (B, S, Hkv, D), the same on every rank.
struct Inputs {
  std::vector<float> q, k, v, dout;
};

std::vector<float> random_tensor(int64_t rows, int heads, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(size_t(kBatch * rows * heads * kHeadDim));
  for (float& e : x) e = dist(gen);
  return x;
}

// Rows `pos` (global token positions) of a (B, S, heads, D) tensor, in that order.
std::vector<float> take_rows(const std::vector<float>& whole, const std::vector<int64_t>& pos,
                             int heads) {
  const int64_t row = int64_t(heads) * kHeadDim, n = int64_t(pos.size());
  std::vector<float> part(size_t(kBatch * n * row));
  for (int b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(whole.data() + (b * kSeq + pos[size_t(i)]) * row, row,
                  part.data() + (b * n + i) * row);
  return part;
}

// The results of every rank gathered on rank 0 and put back in global row order: o, dq (B, S, H,
// D), dk, dv (B, S, Hkv, D), lse (B, H, S).
struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

// Gathers equal-sized blocks of every rank on rank 0 (of the host's communicator).
std::vector<float> gather(MPI_Comm comm, const std::vector<float>& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<float> all(rank == 0 ? mine.size() * size_t(size) : 0);
  MPI_Gather(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), int(mine.size()), MPI_FLOAT, 0,
             comm);
  return all;
}

// Rank 0: blocks of rows (rank r's rows at positions `pos_of[r]`) back into a (B, S, heads, D)
// tensor.
std::vector<float> place_rows(const std::vector<float>& blocks,
                              const std::vector<std::vector<int64_t>>& pos_of, int heads) {
  const int64_t row = int64_t(heads) * kHeadDim;
  std::vector<float> whole(size_t(kBatch * kSeq * row));
  const float* src = blocks.data();
  for (const auto& pos : pos_of)
    for (int b = 0; b < kBatch; ++b)
      for (int64_t p : pos) {
        std::copy_n(src, row, whole.data() + (b * kSeq + p) * row);
        src += row;
      }
  return whole;
}

// Rank 0: blocks of (B, H, n) statistics back into (B, H, S).
std::vector<float> place_stats(const std::vector<float>& blocks,
                               const std::vector<std::vector<int64_t>>& pos_of) {
  std::vector<float> whole(size_t(kBatch * kHeads * kSeq));
  const float* src = blocks.data();
  for (const auto& pos : pos_of)
    for (int bh = 0; bh < kBatch * kHeads; ++bh)
      for (int64_t p : pos) whole[size_t(bh * kSeq + p)] = *src++;
  return whole;
}

// The single-process kernels on the whole sequence.
Outputs single_process(const Inputs& in, bool causal) {
  const kernels::AttnDims d{kBatch, int(kSeq), int(kSeq), kHeads, kKvHeads, kHeadDim};
  const auto qs = kernels::Strides3::contiguous(int(kSeq), kHeads, kHeadDim);
  const auto ks = kernels::Strides3::contiguous(int(kSeq), kKvHeads, kHeadDim);
  const auto ls = kernels::Strides2::contiguous(kHeads, int(kSeq));
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  Outputs out;
  out.o.resize(in.q.size());
  out.dq.resize(in.q.size());
  out.dk.resize(in.k.size());
  out.dv.resize(in.v.size());
  out.lse.resize(size_t(kBatch * kHeads * kSeq));
  std::vector<float> delta(out.lse.size());

  kernels::AttnFwdParams f;
  f.dims = d;
  f.q = in.q.data(), f.q_stride = qs;
  f.k = in.k.data(), f.k_stride = ks;
  f.v = in.v.data(), f.v_stride = ks;
  f.o = out.o.data(), f.o_stride = qs;
  f.lse = out.lse.data(), f.lse_stride = ls;
  f.scale = scale;
  f.causal = causal;
  kernels::attn_fwd(f);

  kernels::attn_bwd_preprocess(d, out.o.data(), qs, in.dout.data(), qs, delta.data(), ls);
  kernels::AttnBwdParams g;
  g.dims = d;
  g.q = in.q.data(), g.q_stride = qs;
  g.k = in.k.data(), g.k_stride = ks;
  g.v = in.v.data(), g.v_stride = ks;
  g.dout = in.dout.data(), g.dout_stride = qs;
  g.lse = out.lse.data(), g.lse_stride = ls;
  g.delta = delta.data(), g.delta_stride = ls;
  g.dq = out.dq.data(), g.dq_stride = qs;
  g.dk = out.dk.data(), g.dk_stride = ks;
  g.dv = out.dv.data(), g.dv_stride = ks;
  g.scale = scale;
  g.causal = causal;
  kernels::attn_bwd(g);
  return out;
}

// max |x - ref| / max |ref|; infinite when x holds a NaN or infinity where ref is finite.
double rel_err(const std::vector<float>& x, const std::vector<float>& ref) {
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<double>::infinity();
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
    max_err = std::max(max_err, std::fabs(double(x[i]) - double(ref[i])));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// One configuration: distributed forward and backward on `group`, checked on rank 0 of `host`
// (the same ranks). Returns true on every rank when the results match.
bool run(const seqpar::AttnConfig& cfg, wallfacer::comm::Communicator& group, MPI_Comm host,
         const Inputs& in) {
  const int P = group.size(), rank = group.rank();
  // This rank's rows of the sequence: positions in local row order (contiguous blocks for
  // ring, two half-blocks of the zigzag layout for causal WallFacer).
  const std::vector<int64_t> pos = seqpar::local_positions(cfg, P, rank);
  const int64_t n = int64_t(pos.size());
  const std::vector<float> q = take_rows(in.q, pos, kHeads), k = take_rows(in.k, pos, kKvHeads),
                           v = take_rows(in.v, pos, kKvHeads),
                           dout = take_rows(in.dout, pos, kHeads);
  // Outputs start as NaN: an element the calls do not write shows as a mismatch.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> o(q.size(), nan), lse(size_t(kBatch * kHeads * n), nan), dq(q.size(), nan),
      dk(k.size(), nan), dv(v.size(), nan);

  seqpar::DistAttention attn(cfg, group);  // collective: every rank of the group
  attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
  attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                dk.data(), dv.data());

  // Rank r of `group` is rank r of `host` (from_mpi_comm keeps the order).
  const auto all_o = gather(host, o), all_lse = gather(host, lse), all_dq = gather(host, dq),
             all_dk = gather(host, dk), all_dv = gather(host, dv);
  int ok = 1;
  if (rank == 0) {
    // Where every rank's rows belong: local_positions needs no communication.
    std::vector<std::vector<int64_t>> pos_of;
    for (int r = 0; r < P; ++r) pos_of.push_back(seqpar::local_positions(cfg, P, r));
    const Outputs want = single_process(in, cfg.causal);
    const double err[5] = {rel_err(place_rows(all_o, pos_of, kHeads), want.o),
                           rel_err(place_stats(all_lse, pos_of), want.lse),
                           rel_err(place_rows(all_dq, pos_of, kHeads), want.dq),
                           rel_err(place_rows(all_dk, pos_of, kKvHeads), want.dk),
                           rel_err(place_rows(all_dv, pos_of, kKvHeads), want.dv)};
    // Both sides are fp32: twice the kernels' 32 eps, times sqrt(S / 1000) (docs/numerics.md).
    const double tol = 64 * 1.1920928955078125e-7 * std::sqrt(std::max(1.0, kSeq / 1000.0));
    for (double e : err) ok = ok && e <= tol;
    const auto& st = attn.stats();
    std::printf(
        "%-9s C=%d %s P=%d: max error o %.1e lse %.1e dq %.1e dk %.1e dv %.1e (tolerance %.1e) "
        "%s; rank 0 sent %lld bytes point-to-point, %lld in collectives\n",
        std::string(seqpar::strategy_name(cfg.strategy)).c_str(), cfg.teams,
        cfg.causal ? "causal" : "full", P, err[0], err[1], err[2], err[3], err[4], tol,
        ok ? "ok" : "MISMATCH", (long long)(st.p2p_bytes_fwd + st.p2p_bytes_bwd),
        (long long)(st.coll_bytes_fwd + st.coll_bytes_bwd));
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, host);
  return ok != 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  // The host's own communicator; wallfacer works on a duplicate of it and never frees it.
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &host);
  int rank = 0, P = 1;
  MPI_Comm_rank(host, &rank);
  MPI_Comm_size(host, &P);

  int rc = 0;
  try {
    wallfacer::comm::Communicator group = wallfacer::comm::from_mpi_comm(host);
    const Inputs in{random_tensor(kSeq, kHeads, 1), random_tensor(kSeq, kKvHeads, 2),
                    random_tensor(kSeq, kKvHeads, 3), random_tensor(kSeq, kHeads, 4)};
    int teams = 1;  // WallFacer-C needs C^2 to divide P
    while ((teams + 1) * (teams + 1) <= P && P % ((teams + 1) * (teams + 1)) == 0) ++teams;

    seqpar::AttnConfig cfg;
    cfg.batch = kBatch;
    cfg.seq = kSeq;
    cfg.heads = kHeads;
    cfg.kv_heads = kKvHeads;
    cfg.head_dim = kHeadDim;
    bool ok = true;
    for (bool causal : {true, false}) {
      cfg.causal = causal;
      cfg.strategy = seqpar::Strategy::WallFacer;
      cfg.teams = teams;
      ok = run(cfg, group, host, in) && ok;
      cfg.strategy = seqpar::Strategy::Ring;
      cfg.teams = 1;
      ok = run(cfg, group, host, in) && ok;
    }
    rc = ok ? 0 : 1;
  } catch (const wallfacer::Error& e) {
    // Bad input fails alike on every rank; anything else may leave other ranks waiting.
    std::fprintf(stderr, "attention_example: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_free(&host);
  MPI_Finalize();
  return rc;
}
