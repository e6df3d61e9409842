#pragma once
// What a distributed attention computes and how its ranks hold the sequence. Plain data, no MPI:
// the planner includes this too. Every function here is a pure function of its arguments (no
// communication, thread-safe), so any rank can compute any rank's layout.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/core/dtype.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/seqpar/strategy.h"

namespace wallfacer::seqpar {

// The strategies (Strategy, parse_strategy, strategy_name, team_size) and what each needs are
// the strategy table's (seqpar/strategy.h).

// The element type of the caller's tensors and of the tensor messages (docs/seqpar.md, "bf16"):
//   fp32  every buffer and message is fp32.
//   bf16  q, k, v, o, dout, dq, dk, dv are bf16 (wallfacer::bf16), and so is every message of
//         them: K,V blocks, the team all-gathers of q and K,V, the query packages' q and dout, the
//         partial O of the reduce-scatter, Ulysses' all-to-alls of q, K,V and O. The per-row
//         statistics (lse, delta) and the gradient accumulators that travel (dq, dk, dv between
//         ranks) stay fp32; the kernels accumulate in fp32 and the outputs are rounded once.
// The type, its parser ("fp32" | "bf16"; UsageError naming the bad value), its names and sizes
// are wallfacer::Dtype's (core/dtype.h).
using ::wallfacer::Dtype;
using ::wallfacer::dtype_bytes;
using ::wallfacer::dtype_name;
using ::wallfacer::parse_dtype;

// Where the rows of the sequence go among the ranks (docs/seqpar.md, "Layouts"):
//   Strategy  the strategy's own layout: contiguous (ring, Ulysses, WallFacer without a mask) or
//             zigzag (zigzag, causal WallFacer).
//   Balanced  balanced_doc_layout (seqpar/doc_layout.h) of the documents: seq/P rows per rank in
//             up to 8 runs, chosen so that every rank has the same document-masked work. Needs seq
//             divisible by 8P (8 x the ring length P/ulysses for a hybrid's ring).
enum class Layout { Strategy, Balanced };
// "strategy" | "balanced"; throws UsageError naming the bad value.
Layout parse_layout(std::string_view name);
std::string_view layout_name(Layout l);

// One attention of one layer, the same on every rank of the group. validate() states what a
// group of P ranks accepts; in short: seq divisible by P (by 2P for the zigzag layout), heads a
// multiple of kv_heads, head_dim 1..256 (kernels::kMaxHeadDim).
struct AttnConfig {
  Strategy strategy = Strategy::Ring;
  int teams = 1;  // C, for WallFacer (1 for every other strategy)
  // W, the inner ring length of DoubleRing (consecutive ranks, typically those of one node; >= 1
  // and dividing P; 0 for every other strategy, which has no inner rings). Callers resolve a
  // default (the ranks per node) before building the config: the schedule needs the number.
  int inner = 0;
  int batch = 1;        // sequences, each split the same way
  int64_t seq = 0;      // tokens of one whole sequence (the global length, not a rank's share)
  int heads = 1;        // query heads H
  int kv_heads = 1;     // key/value heads; H / kv_heads query heads share one (grouped-query)
  int head_dim = 0;     // D; scores are scaled by 1 / sqrt(D)
  bool causal = false;  // token i attends to tokens j <= i (global positions)
  // > 1: a Ulysses hybrid (strategy ring, zigzag or wallfacer). Rank r = j*ulysses + a is member a
  // of Ulysses team j (ulysses consecutive ranks: Ulysses innermost); Ulysses all-to-alls run
  // inside the team and the strategy (ring, zigzag ring, WallFacer-C) over the P/ulysses ranks with
  // the same member index a (ring ranks j) computes on the gathered heads.
  int ulysses = 1;
  // WallFacer-C (C > 1): the forward keeps the placed team K,V block until its backward, which then
  // needs neither the team all-gather of K,V nor the placement hop (dK,dV still go back). Costs
  // one team K,V block, (B, C*seq/P, 2, kv_heads, D), per forward not yet followed by its backward
  // (per layer in training; a Ulysses hybrid's block has C*ulysses*seq/P rows of kv_heads/ulysses
  // heads, as many elements): the executor keeps them last in, first out.
  bool keep_kv = false;
  // Element type of the tensors and of their messages (see Dtype).
  Dtype dtype = Dtype::fp32;
  // Packed documents (docs/documents.md): the lengths of the documents of each sequence, in order,
  // positive and summing to seq; a token attends only to tokens of its own document (and, causal,
  // to those at positions <= its own). Empty: one document. fp32 and bf16 alike. Every
  // rank of the group gives the same lengths.
  std::vector<int64_t> doc_lengths;
  Layout layout = Layout::Strategy;
  // Sliding window (docs/documents.md, "Sliding windows"): W > 0 lets token i attend to tokens j
  // with i - W < j <= i only (and only in its own document); needs causal. 0: no window. A window
  // of at least seq is the causal mask.
  int64_t window = 0;
  // The sliding window the balanced layout counts (Layout::Balanced; docs/documents.md, "Sliding
  // windows"): -1 (the default) the window above. A model whose layers use several windows gives
  // the attentions of all its layers the same one, so that they lay the rows out alike; the
  // attention's own mask is `window` whatever this says. Otherwise as `window` (0: none).
  int64_t layout_window = -1;
};
// The strategy options of a group as they are given: attn's flags, a training config's parallel.*
// keys, Python's keywords. validate_parallel checks them alone, where they are parsed; what they
// need of the ranks and the shapes (C^2 and W dividing P, the heads divisible by the Ulysses
// degree, ...) validate(AttnConfig, P) checks.
struct ParallelSpec {
  Strategy strategy = Strategy::Ring;
  int teams = 1;         // C: 1 unless the strategy has teams (StrategyTraits::has_teams)
  int inner = 0;         // W: 0 unless it has inner rings; 0 there too before a default is resolved
  int ulysses = 1;       // > 1 only for a strategy that may be a hybrid's ring
  bool keep_kv = false;  // only with teams > 1
};

// What the messages of validate_parallel call the options: attn's flags by default ("--teams 2
// applies only to --strategy wallfacer, not ring"); with toml, a config's keys, values as TOML
// writes them ("parallel.teams = 2 applies only to parallel.strategy = 'wallfacer', not 'ring'").
struct ParallelNames {
  std::string_view strategy = "--strategy", teams = "--teams", inner = "--inner",
                   ulysses = "--ulysses", keep_kv = "keep_kv";
  bool toml = false;
};

// Throws UsageError with a one-line message naming the option when the options of `spec`
// contradict each other or are out of range: teams, ulysses >= 1, inner >= 0, teams and inner
// only for the strategies that have them, ulysses > 1 only with a hybrid ring, keep_kv only with
// teams > 1. The rules are the strategy table's (seqpar/strategy.h).
void validate_parallel(const ParallelSpec& spec, const ParallelNames& names = {});

// The strategy options of cfg, and cfg with those of spec.
ParallelSpec parallel_spec(const AttnConfig& cfg);
void set_parallel(AttnConfig& cfg, const ParallelSpec& spec);

// The default inner ring length of a double ring of P consecutive ranks on nodes of
// ranks_per_node ranks: their greatest common divisor (the ranks a node holds of each group of
// consecutive ranks; P when the group fits in a node, which makes the double ring a ring).
int default_inner(int ranks_per_node, int P);

// The inner ring length a run on P ranks uses: `inner` as given, or, for a strategy with inner
// rings (traits(strategy).has_inner) whose inner is 0, default_inner(ranks_per_node, P). The one
// place the default is resolved: attn, generate and training take the world's topology
// (resolved_inner_in_world), `attn --count` its --node-size.
int resolved_inner(Strategy strategy, int inner, int P, int ranks_per_node);
// The same, the ranks per node from the world's topology (comm::discover_topology: a collective
// over the world when the default is needed, so every rank calls it with the same arguments).
int resolved_inner_in_world(Strategy strategy, int inner, int P);

// The config's WallFacer team size C: team_size(strategy, teams).
inline int team_size(const AttnConfig& cfg) { return team_size(cfg.strategy, cfg.teams); }

// The documents of cfg as cumulative lengths (kernels/doc_mask.h): one document when
// cfg.doc_lengths is empty; UsageError when the lengths are not positive or do not sum to seq.
kernels::DocBounds doc_bounds(const AttnConfig& cfg);

// The two configs a Ulysses hybrid is made of (its layout and its closed-form volumes are theirs;
// its schedule is one, make_schedule): `inner`, the ring (zigzag ring, WallFacer-C with cfg's
// teams) over the P/u ranks with the same member index (heads/u and kv_heads/u, strategy of cfg),
// and `outer`, Ulysses on the u ranks of a team (on seq/(P/u) tokens: the team's rows). Rank
// j*u + a holds rows [a*n, (a+1)*n) (n = seq/P) of the rows that rank j of `inner` holds. Both
// have ulysses = 1.
struct HybridConfigs {
  AttnConfig outer, inner;
  int u = 1, rings = 1;  // team size (Ulysses degree) and ring length P/u
};
HybridConfigs hybrid_configs(const AttnConfig& cfg, int P);

// Throws UsageError with a one-line message when cfg cannot run on P ranks.
void validate(const AttnConfig& cfg, int P);

// The window's part of validate: >= 0, and > 0 only with causal (UsageError); layout_window
// -1 or as the window.
void validate_window(const AttnConfig& cfg);

// The window the balanced layout of cfg counts: layout_window, or window when it is -1.
int64_t counted_layout_window(const AttnConfig& cfg);

// Global token positions (0 .. seq-1) of the rows rank `rank` (0 .. P-1, its rank in the group
// the DistAttention runs on) holds, in local row order: seq / P of them. Row i of the rank's
// (B, seq/P, H, D) tensors is token local_positions(...)[i] of each sequence. The layouts:
//   contiguous (ring, ulysses, wallfacer without a mask): tokens [rank*n, (rank+1)*n), n = seq/P;
//   zigzag (zigzag, causal wallfacer, causal double-ring): half-chunks rank and 2P-1-rank of
//   2P chunks of seq/(2P);
//   Ulysses hybrid: rows [a*n, (a+1)*n) of the rows that ring rank j holds (in the layout of the
//   ring, zigzag ring or WallFacer-C over P/ulysses ranks), for rank j*ulysses + a.
//   Layout::Balanced: the runs of balanced_doc_layout refined for the steps of the strategy's
//   ring (refine_doc_layout: the busiest rank of each step, forward and backward), ascending
//   positions, for every strategy.
// The rows of the whole sequence are the union over ranks, each token once.
std::vector<int64_t> local_positions(const AttnConfig& cfg, int P, int rank);

// Global token positions as runs: rank `rank` holds, in local row order, `rows` tokens starting at
// global position `pos0` for each run (1 run for contiguous layouts, 2 for the zigzag layout, up to
// 8 for the balanced layout).
struct PositionRun {
  int64_t row0 = 0;  // first local row
  int64_t rows = 0;
  int64_t pos0 = 0;  // global position of the first row
};
std::vector<PositionRun> local_runs(const AttnConfig& cfg, int P, int rank);
// The same for a Ulysses hybrid of configs h (hybrid_configs), made once for many ranks.
std::vector<PositionRun> local_runs(const HybridConfigs& h, int rank);

// True when the strategy uses the 2P half-chunk zigzag layout (rank r holds half-chunks r and
// 2P-1-r): zigzag always, wallfacer and double-ring with a causal mask; never with
// Layout::Balanced.
bool uses_zigzag_layout(const AttnConfig& cfg);

}  // namespace wallfacer::seqpar
