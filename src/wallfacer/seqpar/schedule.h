#pragma once
// A strategy is a pure function from (config, P, rank) to a Schedule: the ordered steps one rank
// takes in the forward and in the backward. Plain data, no MPI. The same schedule is run by the
// executor (real MPI, real kernels), summed for bytes and steps (schedule_totals), and replayed by
// the planner with a cost model.
//
// Buffers. Every tensor a schedule touches is a buffer of `blocks` blocks; a block holds `rows`
// token rows of one source rank (consecutive global positions per PositionRun), in one format:
//   Rows  (B, rows, heads, D)                 q, o, dout, dq, and the user's k, v, dk, dv
//   KV    (B, rows, 2, kv_heads, D)           k and v interleaved per row: one message per hop
//   Stat  (B, heads, rows)                    lse, delta
//   QPack [q (B,rows,H,D) | dout (B,rows,H,D) | lse (B,H,rows) | delta (B,H,rows)]
//                                             the immutable part of a backward query package
// Buffers 0..kNumUserBuffers-1 are the caller's tensors (one block of the rank's own rows); the
// others are scratch that the executor allocates once. A buffer id names one tensor: the forward
// and the backward use the same id for the same tensor (kv_local, kv_ring0, ...), and no id
// serves two roles. Two roles share memory only where a buffer says so (BufferSpec::alias).
//
// Element types. Each buffer has a dtype, the type of its Rows and KV elements and of the q and
// dout parts of a QPack; Stat buffers and the lse, delta parts of a QPack are fp32 always. With
// AttnConfig::dtype = bf16 the tensors and their messages are bf16 while the accumulators (the
// kernels' o, dq, dk, dv across key blocks, and the dq, dk, dv that travel between ranks) are
// fp32; Copy ops round an accumulator into a bf16 buffer (docs/seqpar.md, "bf16").
//
// Layout geometry of WallFacer-C (ring and zigzag are C = 1): rank r = t*C + a (team t, member a),
// T = P/C teams, G = P/C^2 = sub-ring length. Placement: rank (t, a) sends its team's K,V block to
// rank (a*G + t/C)*C + t%C. Sub-ring: next rank is team ((t%G)+1)%G + G*(t/G), same member.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/seqpar/config.h"

namespace wallfacer::seqpar {

enum class Fmt : uint8_t { Rows, KV, Stat, QPack };

// Fixed ids of the caller's tensors (each one block of n = seq/P rows).
enum UserBuffer : int {
  kInQ = 0,  // (B, n, H, D)
  kInK,      // (B, n, Hkv, D)
  kInV,      // (B, n, Hkv, D)
  kInO,      // (B, n, H, D)    backward only
  kInLse,    // (B, H, n)       backward only
  kInDout,   // (B, n, H, D)    backward only
  kOutO,     // (B, n, H, D)
  kOutLse,   // (B, H, n)
  kOutDq,    // (B, n, H, D)
  kOutDk,    // (B, n, Hkv, D)
  kOutDv,    // (B, n, Hkv, D)
  kInDelta,  // (B, H, n)       backward, optional: rowsum(dout * o) given instead of o
  kNumUserBuffers
};

struct BufferSpec {
  std::string name;
  Fmt fmt = Fmt::Rows;
  int blocks = 1;
  int64_t rows = 0;  // per block
  int heads = 1;     // Rows, Stat, QPack: heads of the rows; KV: kv heads
  // Written by the forward and read by the backward that follows it (AttnConfig::keep_kv): one
  // copy per forward not yet followed by its backward, last in, first out.
  bool kept = false;
  Dtype dtype = Dtype::fp32;  // of the Rows / KV elements and the q, dout parts of a QPack
  // >= 0: this buffer has no memory of its own but that of buffer `alias` (a scratch buffer, not
  // kept, itself no alias, of at least this buffer's bytes): the schedule never needs both at
  // once.
  int alias = -1;
};

// Elements of one block of `spec` (batch B, head dim D).
int64_t block_elements(const BufferSpec& spec, int batch, int head_dim);
// Bytes of one block: elements of spec.dtype, with the Stat elements (a Stat buffer, the lse and
// delta of a QPack) 4 bytes each. A multiple of 4 whenever the block has Stat elements.
int64_t block_bytes(const BufferSpec& spec, int batch, int head_dim);

// Rows [row0, row0 + rows) of block `block` of a buffer, holding global positions from pos0.
struct Segment {
  int block = 0;
  int64_t row0 = 0;
  int64_t rows = 0;
  int64_t pos0 = 0;
};

enum class OpKind : uint8_t { Local, Send, Recv, Wait, Collective, Compute };

// Local data movement (no communication; the planner may charge memory bandwidth for it).
enum class LocalKind : uint8_t {
  PackKV,     // user k, v -> dst (KV, `shards` blocks: block j holds kv heads slice j)
  PackQPack,  // user q, dout, lse, delta = rowsum(dout * o) -> dst (QPack, `shards` head slices)
  Shard,      // src (Rows or Stat, 1 block) -> dst (`shards` blocks, block j = head slice j)
  Merge,      // inverse of Shard: src (`shards` blocks) -> dst (1 block)
  UnpackKV,   // src (KV, `shards` head slices) -> user dk, dv
  InitOut,    // dst (Rows) = 0, dst2 (Stat) = -inf: the identity of the LSE merge
  Zero,       // dst = 0
  Add,        // dst += src
  Copy,       // dst = src, converted to dst's dtype (fp32 -> bf16 rounds to nearest even)
};

enum class CollKind : uint8_t { AllGather, ReduceScatterSum, ReduceScatterLse, AllToAll };
// The group of a collective (group_ranks lists its ranks):
//   World      the P ranks of the sequence-parallel group.
//   Team       Schedule::team_ranks consecutive ranks: WallFacer's team, a Ulysses hybrid's
//              Ulysses team.
//   InnerTeam  a Ulysses x WallFacer hybrid's WallFacer team: the C = Schedule::inner_team_ranks
//              ranks (t*C + a)*u + m, a = 0..C-1, of the ring over the Ulysses teams that share
//              rank (t*C + a_r)*u + m's WallFacer team t and Ulysses member index m (u = ulysses).
enum class Group : uint8_t { World, Team, InnerTeam };

struct Op {
  OpKind kind = OpKind::Local;
  // Local: local, src, dst, dst2, shards. Send: src (whole buffer), peer. Recv: dst, peer.
  // Collective: coll, group, src (src2: LSE part of ReduceScatterLse), dst (dst2).
  // Compute: see below.
  LocalKind local = LocalKind::Copy;
  CollKind coll = CollKind::AllGather;
  Group group = Group::World;
  int src = -1, src2 = -1, dst = -1, dst2 = -1;
  int shards = 1;
  // Send / Recv
  int peer = -1;  // rank in the sequence-parallel group
  int tag = 0;
  int round = -1;  // Send: the communication round (p2p steps = distinct rounds)
  // Send / Recv / Collective: bytes moved (Send/Recv: message size; Collective: bytes per rank of
  // the Communicator call's count; ReduceScatterLse: of the O and LSE blocks) and counted_bytes
  // (the bytes this rank addresses to the other ranks, what the Communicator's coll_bytes adds;
  // for these four collectives also the ring-algorithm volume).
  int64_t bytes = 0;
  int64_t counted_bytes = 0;
  int group_size = 1;
  // Wait: indices (into the same op list) of the Send/Recv ops to complete.
  std::vector<int> waits;
  // Compute: forward  q = src (Rows), kv = src2 (KV), o = dst (Rows), lse = dst2 (Stat);
  //          backward qpack = src (QPack), kv = src2 (KV), dq = dst (Rows), dkv = dst2 (KV).
  // Always accumulates into dst/dst2. `masked`: the causal mask or the window cuts this block pair
  // (diagonal, window edge; the kernels then get the config's window);
  // pairs: (query, key) pairs kept by the mask, the window and the documents (kept_pairs), never 0:
  // a pair of segments that no document spans is no op at all. With documents the kernels also
  // get the schedule's doc_of_pos.
  bool backward = false;
  Segment qseg, kseg;
  bool masked = false;
  int64_t pairs = 0;
  int heads = 0, kv_heads = 0;  // heads of this compute (H/P and Hkv/P under Ulysses)
  double flops = 0;
  // A summed compute (Schedule::summed): the pairs that the kernel's tiles compute over every call
  // it stands for (qseg, kseg unset, masked: whether the mask cuts any of them). 0: one call.
  int64_t tile_pairs = 0;
};

// make_schedule's summed computes: each step's kernel calls (a team's query segments against the
// key segments of the block held: (2 C u)^2 calls under the zigzag layout) as one Compute op that
// carries their summed pairs, FLOPs and tile pairs (Op::tile_pairs, for the kernel's tiles below;
// <= 0: the kept pairs). What the planner times; the executor runs no such schedule.
struct SummedComputes {
  int tile_q = 0, tile_k = 0;
};

struct Schedule {
  AttnConfig cfg;
  int P = 1, rank = 0;
  int team_ranks = 1;         // the size of the Team group (ranks rank/C*C .. +C-1): C,
                              // or a hybrid's Ulysses degree u
  int inner_team_ranks = 1;   // the size of the InnerTeam group: a Ulysses x WallFacer hybrid's C
  int64_t n = 0;              // rows per rank
  bool bwd_moves_kv = false;  // backward: K,V travel (else the query packages)
  // The team ring's steps built (make_schedule's ring_steps): 0, all G of them.
  int ring_steps = 0;
  std::optional<SummedComputes> summed;  // computes summed per step (make_schedule's summed)
  // The documents of cfg (cumulative lengths; empty when cfg.doc_lengths is: one document).
  kernels::DocBounds docs;
  std::vector<BufferSpec> buffers;  // indexed by buffer id
  std::vector<Op> fwd, bwd;
};

// The ranks of `s.rank`'s group `g`, ascending (its rank order in the group's communicator).
std::vector<int> group_ranks(const Schedule& s, Group g);

// The backward of ring, zigzag and WallFacer moves either the query packages (q, dout, lse, delta
// out, dQ travelling back) or the K,V blocks (dK,dV travelling back) around the sub-ring, keeping
// the other side resident: K,V when that sends fewer bytes. With e bytes per tensor element (4 or
// 2) and 4 per statistic and gradient element, the G-1 hops of the travelling block and the G hops
// of its gradient send (G-1)*2*Hkv*D*e + G*2*Hkv*D*4 (K,V, dK,dV) against
// (G-1)*H*(2D*e + 8) + G*H*D*4 (q, dout, lse, delta; dQ): K,V under grouped-query attention with
// H/Hkv >= 2, the query packages otherwise. With a sliding window, where blocks stop at the last
// rank whose pairs need them and their gradients go from there straight home, the bytes that each
// side would really send at the busiest rank (on a tie: over all ranks). A contiguous causal ring
// with a window of a few ranks' rows then moves K,V, which the window needs a few hops forward,
// while a query package needs earlier keys, the long way round. The documents do not enter the
// choice (they change between calls, the buffers stay).
bool backward_moves_kv(const AttnConfig& cfg, int P);

// Elements that AttnConfig::keep_kv holds per forward between it and its backward (0 when the
// strategy keeps nothing).
int64_t kept_elements(const AttnConfig& cfg, int P);

// The schedule of `rank` (validates cfg first: UsageError when it cannot run on P ranks). A Ulysses
// hybrid (cfg.ulysses = u > 1) is one schedule too: all-to-alls of q and K,V in the team (Team
// group of u consecutive ranks) trade the members' rows for heads, the ring (zigzag ring) steps
// run with world peers on the team's rows of heads/u heads, and all-to-alls take O, LSE back
// (backward: the query packages and K,V in, dQ and dK,dV back). Ulysses x WallFacer-C runs
// WallFacer-C on the traded rows over the P/u ranks of member index m (rank j*u + m is ring rank
// j): its team all-gathers and reduce-scatters in the InnerTeam group, its placement and sub-ring
// hops with world peers, between the two all-to-alls.
// ring_steps > 0 (ring, zigzag, WallFacer-C and their hybrids only): the ring is cut to its first
// min(ring_steps, G) steps, each as in the whole ring, a block that goes on past the last of them
// treated as one that makes every hop (its gradient's last hop is the ring hop from prev(rank)), so
// that the cut ring is a ring of its own. Such a schedule computes part of the attention: the
// planner times it (docs/planner.md, "Planning at scale"), no executor runs it.
// summed: the computes of each call of the builders summed into one op (SummedComputes).
Schedule make_schedule(const AttnConfig& cfg, int P, int rank, int ring_steps = 0,
                       std::optional<SummedComputes> summed = std::nullopt);

// What a schedule sends, summed without running it.
struct ScheduleTotals {
  int64_t p2p_bytes_fwd = 0, p2p_bytes_bwd = 0;
  int64_t coll_bytes_fwd = 0, coll_bytes_bwd = 0;
  int64_t p2p_steps_fwd = 0, p2p_steps_bwd = 0;
  int64_t p2p_sends_fwd = 0, p2p_sends_bwd = 0;
  double flops_fwd = 0, flops_bwd = 0;
  bool operator==(const ScheduleTotals&) const = default;
};
ScheduleTotals schedule_totals(const Schedule& s);
ScheduleTotals operator+(const ScheduleTotals& a, const ScheduleTotals& b);

// Closed-form volumes of one rank (docs/algorithm.md, "Volumes": forward and backward, GQA, and
// the LSE and delta rows that travel with O and the query packages; the element size of
// cfg.dtype, docs/seqpar.md); hybrids: the sum of their Ulysses and ring volumes. flops fields are
// left 0. A causal contiguous ring with a sliding window: the hops the window needs (docs/
// documents.md, "Sliding windows: bytes"); other strategies with a window or documents: the volume
// without skipping (an upper bound of the schedule's).
ScheduleTotals formula_totals(const AttnConfig& cfg, int P, int rank);

// The schedule builders and closed forms the strategy table (seqpar/strategy.h) points at; call
// make_schedule and formula_totals instead, which validate first. The team ring builds ring,
// zigzag ring and WallFacer-C, and the Ulysses hybrids of each.
void build_team_ring_schedule(Schedule& s);
void build_ulysses_schedule(Schedule& s);
void build_double_ring_schedule(Schedule& s);
ScheduleTotals team_ring_totals(const AttnConfig& cfg, int P, int rank);
ScheduleTotals ulysses_totals(const AttnConfig& cfg, int P, int rank);
ScheduleTotals double_ring_totals(const AttnConfig& cfg, int P, int rank);

// WallFacer-C geometry (C = 1: ring). Ranks are in the sequence-parallel group.
struct WallFacerGeometry {
  int P = 1, C = 1, G = 1, T = 1;
  WallFacerGeometry(int P, int C);
  int placement_dst(int r) const;  // where rank r sends its team's K,V block
  int placement_src(int r) const;  // inverse
  int next(int r) const;           // sub-ring neighbours
  int prev(int r) const;
  int kv_team(int r, int step) const;     // team whose K,V rank r holds at forward ring step
  int query_team(int r, int step) const;  // team whose query package rank r holds at bwd step
};

// Double-ring geometry: rank r = g*W + i is member i of group g (W consecutive ranks, G = P/W
// groups). Step s = o*W + j (phase o = 0..G-1, inner step j = 0..W-1): rank (g, i) holds the
// K,V block of rank ((g-o) mod G, (i-j) mod W), so over the P steps it holds every block once.
// At inner step 0 of phase o the rank holds its phase's outer block, which came over the outer
// ring from rank (g-1, i) (posted at the start of phase o-1, it overlaps that phase's compute);
// the blocks of the other inner steps come over the inner ring from rank (g, i-1).
struct DoubleRingGeometry {
  int P = 1, W = 1, G = 1;
  DoubleRingGeometry(int P, int W);
  int inner_next(int r) const;
  int inner_prev(int r) const;
  int outer_next(int r) const;
  int outer_prev(int r) const;
  int origin(int r, int step) const;  // whose block rank r holds at step `step`
  int holder(int b, int step) const;  // who holds rank b's block at step `step` (inverse)
};

// (query, key) pairs with query position >= key position for runs [qpos0, qpos0+qrows) and
// [kpos0, kpos0+krows) (all pairs when !causal).
int64_t attention_pairs(int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows, bool causal);

// The (query, key) pairs a tiled kernel computes for the same runs: tiles of tile_q query rows x
// tile_k key rows (from the first row of each run), every tile that the mask does not cut away
// entirely counted whole. Tile sizes <= 0: the kept pairs (attention_pairs).
int64_t attention_tile_pairs(int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows,
                             bool causal, int tile_q, int tile_k);

// The same with documents and a sliding window (causal, window > 0; 0: none): a tile pair that
// shares no document, or that the causal mask or the window cuts away entirely, is skipped; every
// other one is counted whole (docs/documents.md, "Cost"). docs empty (no starts): one document.
int64_t attention_tile_pairs(const kernels::DocBounds& docs, int64_t qpos0, int64_t qrows,
                             int64_t kpos0, int64_t krows, bool causal, int tile_q, int tile_k,
                             int64_t window = 0);

// The (query, key) pairs kept between the runs, with the schedule's documents when it has them
// and its window.
int64_t kept_pairs(const Schedule& s, int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows);

// The (query, key) pairs that compute op `o` of schedule `s` works on with the kernel's tiles
// (attention_tile_pairs of its segments, the whole tiles where its mask cuts them; a summed
// compute's Op::tile_pairs).
int64_t compute_tile_pairs(const Schedule& s, const Op& o, int tile_q, int tile_k);

}  // namespace wallfacer::seqpar
