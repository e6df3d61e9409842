#include "wallfacer/seqpar/config.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <numeric>

#include "wallfacer/comm/topology.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {

int default_inner(int ranks_per_node, int P) {
  return std::gcd(std::max(ranks_per_node, 1), std::max(P, 1));
}

int resolved_inner(Strategy strategy, int inner, int P, int ranks_per_node) {
  if (!traits(strategy).has_inner || inner != 0) return inner;
  return default_inner(ranks_per_node, P);
}

int resolved_inner_in_world(Strategy strategy, int inner, int P) {
  if (!traits(strategy).has_inner || inner != 0) return inner;
  return default_inner(comm::discover_topology().max_ranks_per_node(), P);
}

Layout parse_layout(std::string_view name) {
  if (name == "strategy") return Layout::Strategy;
  if (name == "balanced") return Layout::Balanced;
  throw UsageError(fmt::format(
      "unknown layout '{}': use strategy (the strategy's own) or balanced (balances the "
      "document-masked work)",
      name));
}

std::string_view layout_name(Layout l) { return l == Layout::Balanced ? "balanced" : "strategy"; }

kernels::DocBounds doc_bounds(const AttnConfig& cfg) {
  if (cfg.doc_lengths.empty()) return kernels::DocBounds{{0, cfg.seq}};
  return kernels::doc_bounds_from_lengths(cfg.doc_lengths, cfg.seq);
}

bool uses_zigzag_layout(const AttnConfig& cfg) {
  if (cfg.layout == Layout::Balanced) return false;
  const StrategyTraits& t = traits(cfg.strategy);
  return t.zigzag_layout || (t.zigzag_when_causal && cfg.causal);
}

namespace {

bool hybrid_rings(const StrategyTraits& t) { return t.hybrid_ring; }
bool with_teams(const StrategyTraits& t) { return t.has_teams; }
bool with_inner(const StrategyTraits& t) { return t.has_inner; }
bool keeps_heads(const StrategyTraits& t) { return !t.splits_heads; }

// " (causal)" where cfg's causal mask chooses its layout (the zigzag layout of WallFacer).
std::string_view causal_note(const AttnConfig& cfg) {
  return cfg.causal && traits(cfg.strategy).zigzag_when_causal ? " (causal)" : "";
}

// The hybrid's own rules (validate() checks the rest: heads, teams, ...).
void validate_hybrid(const AttnConfig& cfg, int P) {
  const int u = cfg.ulysses;
  const auto name = strategy_name(cfg.strategy);
  WF_USAGE_CHECK(P % u == 0, "--ulysses {} must divide the {} ranks; choose a divisor of {}", u, P,
                 P);
  WF_USAGE_CHECK(cfg.heads % u == 0 && cfg.kv_heads % u == 0,
                 "--ulysses {} must divide --heads ({}) and --kv-heads ({}); choose a common "
                 "divisor",
                 u, cfg.heads, cfg.kv_heads);
  const int64_t rings = P / u;
  const int64_t parts = uses_zigzag_layout(cfg) ? std::lcm(int64_t(P), 2 * rings) : int64_t(P);
  WF_USAGE_CHECK(cfg.layout == Layout::Balanced || cfg.seq % parts == 0,
                 "--seq {} must be divisible by {} for ulysses {} x {}{} on {} ranks", cfg.seq,
                 parts, u, name, causal_note(cfg), P);
}

// The steps of cfg's ring on P ranks for refine_doc_layout: at forward step t rank x computes its
// team's rows against the keys of team kv_team(x, t); the backward the same when K,V travel, and
// otherwise the rows of team query_team(x, t) against its resident keys (team kv_team(x, 0)),
// with a backward pair costing 2.5 forward ones (5 products of a tile against 2). A double ring
// (C = 1, inner > 0) has P steps, at step t rank x's rows against the keys of origin(x, t), the
// backward too when its K,V travel, and otherwise the rows of origin(x, t) against x's keys.
std::vector<StepPattern> ring_steps(int P, int C, int inner, bool bwd_kv) {
  const WallFacerGeometry L(P, C);
  auto team = [&](int t) {
    std::vector<int> r;
    for (int a = 0; a < C; ++a) r.push_back(t * C + a);
    return r;
  };
  StepPattern fwd, bwd;
  bwd.weight = 2.5;
  if (inner > 0) {
    const DoubleRingGeometry D(P, inner);
    for (int t = 0; t < P; ++t) {
      fwd.queries.emplace_back(), fwd.keys.emplace_back();
      for (int x = 0; x < P; ++x) {
        fwd.queries.back().push_back({x});
        fwd.keys.back().push_back({D.origin(x, t)});
      }
    }
    if (bwd_kv) {
      bwd.queries = fwd.queries;
      bwd.keys = fwd.keys;
    } else {  // the query packages travel: rank x's keys against the rows of origin(x, t)
      bwd.queries = fwd.keys;
      bwd.keys = fwd.queries;
    }
    return {fwd, bwd};
  }
  for (int t = 0; t < L.G; ++t) {
    fwd.queries.emplace_back(), fwd.keys.emplace_back();
    bwd.queries.emplace_back(), bwd.keys.emplace_back();
    for (int x = 0; x < P; ++x) {
      fwd.queries.back().push_back(team(x / C));
      fwd.keys.back().push_back(team(L.kv_team(x, t)));
      bwd.queries.back().push_back(bwd_kv ? team(x / C) : team(L.query_team(x, t)));
      bwd.keys.back().push_back(team(L.kv_team(x, bwd_kv ? t : 0)));
    }
  }
  return {fwd, bwd};
}

// The balanced layout of cfg's documents on P ranks under its mask (the window it counts:
// counted_layout_window), refined for the steps of its ring (WallFacer-C: a team's rows against
// the teams of its sub-ring). A schedule asks for it once per rank and step, and a windowed one
// also for its config without documents (backward_moves_kv): the latest few are kept per thread.
const std::vector<std::vector<kernels::PosRun>>& balanced_runs(const AttnConfig& cfg, int P) {
  struct Key {
    std::vector<int64_t> lengths;
    int64_t seq = -1, window = 0;
    int P = 0, teams = 0, inner = 0;
    bool causal = false, bwd_kv = false;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    DocLayout layout;
  };
  thread_local std::deque<Entry> recent;  // newest first
  const int C = cfg.ulysses <= 1 ? team_size(cfg) : 1;
  // The window counted (none without a causal mask: it keeps every pair). Which side the
  // backward moves: a window leaves it to the schedule (counted as K,V); without one, and for the
  // double ring (which skips no hop) always, the closed forms choose (backward_moves_kv).
  const int64_t window = cfg.causal ? counted_layout_window(cfg) : 0;
  AttnConfig unwindowed = cfg;
  unwindowed.window = 0;
  unwindowed.layout_window = -1;
  const int inner = traits(cfg.strategy).has_inner ? cfg.inner : 0;
  const bool bwd_kv = (window > 0 && inner == 0) || backward_moves_kv(unwindowed, P);
  Key key{cfg.doc_lengths, cfg.seq, window, P, C, inner, cfg.causal, bwd_kv};
  for (const Entry& e : recent)
    if (e.key == key) return e.layout.runs;
  const kernels::DocBounds docs = doc_bounds(cfg);
  // Counted in the kernels' tiles: a tile the mask keeps a few pairs of costs a whole one.
  kernels::AttnDims dims;
  dims.seq_q = dims.seq_k = int(std::min<int64_t>(cfg.seq / P, INT_MAX));
  dims.heads = cfg.heads;
  dims.kv_heads = cfg.kv_heads;
  dims.head_dim = cfg.head_dim;
  const kernels::AttnTiling t = kernels::attn_fwd_tiling(dims);
  DocLayout layout =
      refine_doc_layout(balanced_doc_layout(docs, P, cfg.causal, kChunksPerRank, window), docs,
                        cfg.causal, ring_steps(P, C, inner, bwd_kv), {t.block_q, t.block_k},
                        kChunksPerRank, kMaxImbalance, window);
  if (recent.size() == 4) recent.pop_back();
  recent.push_front({std::move(key), std::move(layout)});
  return recent.front().layout.runs;
}

}  // namespace

HybridConfigs hybrid_configs(const AttnConfig& cfg, int P) {
  WF_CHECK(cfg.ulysses >= 1 && P % cfg.ulysses == 0, "ulysses degree {} on {} ranks", cfg.ulysses,
           P);
  HybridConfigs h;
  h.u = cfg.ulysses;
  h.rings = P / h.u;
  h.outer = cfg;
  h.outer.strategy = Strategy::Ulysses;
  h.outer.teams = 1;
  h.outer.ulysses = 1;
  h.outer.seq = cfg.seq / h.rings;
  // The Ulysses schedule's computes are done by the ring (with the documents and the layout).
  h.outer.doc_lengths.clear();
  h.outer.layout = Layout::Strategy;
  h.outer.keep_kv = false;  // what the hybrid keeps is the inner WallFacer's
  h.inner = cfg;
  h.inner.ulysses = 1;
  h.inner.heads = cfg.heads / h.u;
  h.inner.kv_heads = cfg.kv_heads / h.u;
  return h;
}

void validate_parallel(const ParallelSpec& spec, const ParallelNames& names) {
  const StrategyTraits& st = traits(spec.strategy);
  // A flag and its value ("--teams 2"), or a config's key and value ("parallel.teams = 2", a
  // strategy quoted as TOML writes it).
  auto text = [&](std::string_view v) {
    return names.toml ? fmt::format("'{}'", v) : std::string(v);
  };
  auto option = [&](std::string_view key, const std::string& value) {
    return names.toml ? fmt::format("{} = {}", key, value) : fmt::format("{} {}", key, value);
  };
  auto among = [&](bool (*pred)(const StrategyTraits&)) {
    return names.toml ? text(strategy_names("', '", "' or '", pred))
                      : strategy_names(", ", " or ", pred);
  };
  const std::string name = text(st.name);
  WF_USAGE_CHECK(spec.teams >= 1, "{} is {}; it must be at least 1", names.teams, spec.teams);
  WF_USAGE_CHECK(spec.ulysses >= 1, "{} is {}; it must be at least 1", names.ulysses, spec.ulysses);
  WF_USAGE_CHECK(spec.inner >= 0,
                 "{} is {}; give the inner ring length W >= 1 (or 0: the ranks per node)",
                 names.inner, spec.inner);
  WF_USAGE_CHECK(st.has_teams || spec.teams == 1, "{} applies only to {}, not {}",
                 option(names.teams, std::to_string(spec.teams)),
                 option(names.strategy, among(with_teams)), name);
  WF_USAGE_CHECK(st.has_inner || spec.inner == 0, "{} applies only to {}, not {}",
                 option(names.inner, std::to_string(spec.inner)),
                 option(names.strategy, among(with_inner)), name);
  WF_USAGE_CHECK(spec.ulysses == 1 || st.hybrid_ring,
                 "{} needs {} (the ring over the Ulysses teams), not {}; use {} for {}",
                 option(names.ulysses, std::to_string(spec.ulysses)),
                 option(names.strategy, among(hybrid_rings)), name, option(names.ulysses, "1"),
                 name);
  WF_USAGE_CHECK(!spec.keep_kv || (st.has_teams && spec.teams > 1),
                 "{} keeps the placed K,V of {} with teams > 1; {}{} places none (drop {})",
                 names.keep_kv, among(with_teams), name,
                 st.has_teams ? fmt::format(" with {}", option(names.teams, "1")) : "",
                 names.keep_kv);
}

ParallelSpec parallel_spec(const AttnConfig& cfg) {
  return {cfg.strategy, cfg.teams, cfg.inner, cfg.ulysses, cfg.keep_kv};
}

void set_parallel(AttnConfig& cfg, const ParallelSpec& spec) {
  cfg.strategy = spec.strategy;
  cfg.teams = spec.teams;
  cfg.inner = spec.inner;
  cfg.ulysses = spec.ulysses;
  cfg.keep_kv = spec.keep_kv;
}

void validate_window(const AttnConfig& cfg) {
  WF_USAGE_CHECK(cfg.window >= 0, "--window is {}; it must be >= 0 (0: no window)", cfg.window);
  WF_USAGE_CHECK(cfg.window == 0 || cfg.causal,
                 "--window {} needs --causal: a token attends to the {} tokens up to its own; add "
                 "--causal or drop --window",
                 cfg.window, cfg.window);
  WF_USAGE_CHECK(cfg.layout_window >= -1,
                 "the balanced layout's window is {}; it must be >= 0, or -1 for the attention's "
                 "window",
                 cfg.layout_window);
  WF_USAGE_CHECK(cfg.layout_window <= 0 || cfg.causal,
                 "the balanced layout's window {} needs a causal mask; give 0 or -1",
                 cfg.layout_window);
}

int64_t counted_layout_window(const AttnConfig& cfg) {
  return cfg.layout_window < 0 ? cfg.window : cfg.layout_window;
}

void validate(const AttnConfig& cfg, int P) {
  WF_USAGE_CHECK(P >= 1, "the group has {} ranks; it needs at least 1", P);
  WF_USAGE_CHECK(cfg.batch >= 1, "--batch is {}; it must be at least 1", cfg.batch);
  WF_USAGE_CHECK(cfg.seq >= 1, "--seq is {}; it must be at least 1", cfg.seq);
  WF_USAGE_CHECK(cfg.heads >= 1, "--heads is {}; it must be at least 1", cfg.heads);
  WF_USAGE_CHECK(cfg.kv_heads >= 1, "--kv-heads is {}; it must be at least 1", cfg.kv_heads);
  WF_USAGE_CHECK(cfg.head_dim >= 1, "--head-dim is {}; it must be at least 1", cfg.head_dim);
  WF_USAGE_CHECK(cfg.heads % cfg.kv_heads == 0,
                 "--heads {} must be a multiple of --kv-heads {} for grouped-query attention",
                 cfg.heads, cfg.kv_heads);
  validate_window(cfg);
  const auto name = strategy_name(cfg.strategy);
  if (!cfg.doc_lengths.empty()) doc_bounds(cfg);  // positive lengths summing to seq
  validate_parallel(parallel_spec(cfg));
  const StrategyTraits& st = traits(cfg.strategy);
  if (st.has_teams) {
    // A Ulysses x WallFacer hybrid runs WallFacer-C on the ring of P/ulysses ranks.
    const int C = cfg.teams, ring = cfg.ulysses > 1 && P % cfg.ulysses == 0 ? P / cfg.ulysses : P;
    WF_USAGE_CHECK(int64_t(C) * C <= ring && ring % (C * C) == 0,
                   "--teams {}: {} needs C^2 = {} to divide the {} ranks{}; choose --teams C "
                   "with C^2 dividing {}",
                   C, name, int64_t(C) * C, ring,
                   ring == P ? "" : " of the ring over the Ulysses teams (P / --ulysses)",
                   ring == P ? "P" : "P / --ulysses");
  }
  if (st.has_inner) {
    const int W = cfg.inner;
    WF_USAGE_CHECK(W >= 1 && P % W == 0,
                   "--inner {}: {} needs an inner ring length W >= 1 dividing the {} "
                   "ranks (W consecutive ranks per inner ring, e.g. the ranks of a node)",
                   W, name, P);
  }
  if (cfg.layout == Layout::Balanced) {
    const int64_t ring = P / std::max(cfg.ulysses, 1), parts = kChunksPerRank * ring;
    WF_USAGE_CHECK(cfg.seq % parts == 0 && cfg.seq % P == 0,
                   "--seq {} must be divisible by {} for the balanced layout on {} ranks (8 runs "
                   "per rank{}); pad the sequence or use --layout strategy",
                   cfg.seq, std::lcm(parts, int64_t(P)), P,
                   cfg.ulysses > 1 ? " of the ring over the Ulysses teams" : "");
  }
  if (cfg.ulysses > 1) {
    validate_hybrid(cfg, P);
    WF_USAGE_CHECK(cfg.seq / P * int64_t(cfg.ulysses) <= INT_MAX,
                   "--seq {} is too long: a ring block of {} rows exceeds the kernel's "
                   "limit of 2^31-1; use a shorter sequence or more ranks",
                   cfg.seq, cfg.seq / P * cfg.ulysses);
    return;
  }
  const int64_t parts = uses_zigzag_layout(cfg) ? 2 * int64_t(P) : P;
  WF_USAGE_CHECK(cfg.layout == Layout::Balanced || cfg.seq % parts == 0,
                 "--seq {} must be divisible by {} for {}{} on {} ranks{}", cfg.seq, parts, name,
                 causal_note(cfg), P, parts == P ? "" : " (2P half-chunks of the zigzag layout)");
  WF_USAGE_CHECK(cfg.seq / P * int64_t(cfg.teams) <= INT_MAX,
                 "--seq {} is too long: a rank's block of {} rows exceeds the kernel's "
                 "limit of 2^31-1; use a shorter sequence or more ranks",
                 cfg.seq, cfg.seq / P * cfg.teams);
  if (st.splits_heads) {
    WF_USAGE_CHECK(cfg.heads % P == 0 && cfg.kv_heads % P == 0,
                   "--strategy {} needs --heads ({}) and --kv-heads ({}) divisible by the {} "
                   "ranks; use {}, or another rank count",
                   name, cfg.heads, cfg.kv_heads, P, strategy_names(", ", " or ", keeps_heads));
  }
}

std::vector<PositionRun> local_runs(const HybridConfigs& h, int rank) {
  WF_CHECK(rank >= 0 && rank < h.u * h.rings, "rank {} outside a group of {}", rank, h.u * h.rings);
  // Rows [a*n, (a+1)*n) of ring rank j's rows.
  const int64_t n = h.inner.seq / (int64_t(h.u) * h.rings);
  const int64_t lo = (rank % h.u) * n, hi = lo + n;
  std::vector<PositionRun> runs;
  for (const auto& run : local_runs(h.inner, h.rings, rank / h.u)) {
    const int64_t a = std::max(lo, run.row0), b = std::min(hi, run.row0 + run.rows);
    if (a < b) runs.push_back({a - lo, b - a, run.pos0 + (a - run.row0)});
  }
  return runs;
}

std::vector<PositionRun> local_runs(const AttnConfig& cfg, int P, int rank) {
  WF_CHECK(rank >= 0 && rank < P, "rank {} outside a group of {}", rank, P);
  const int64_t n = cfg.seq / P;
  if (cfg.ulysses > 1) return local_runs(hybrid_configs(cfg, P), rank);
  if (cfg.layout == Layout::Balanced) {
    std::vector<PositionRun> runs;
    int64_t row = 0;
    for (const auto& run : balanced_runs(cfg, P)[size_t(rank)]) {
      runs.push_back({row, run.size(), run.begin});
      row += run.size();
    }
    return runs;
  }
  if (uses_zigzag_layout(cfg)) {
    const int64_t h = n / 2;
    return {{0, h, rank * h}, {h, h, (2 * int64_t(P) - 1 - rank) * h}};
  }
  return {{0, n, rank * n}};
}

std::vector<int64_t> local_positions(const AttnConfig& cfg, int P, int rank) {
  std::vector<int64_t> pos;
  for (const auto& run : local_runs(cfg, P, rank))
    for (int64_t i = 0; i < run.rows; ++i) pos.push_back(run.pos0 + i);
  return pos;
}

}  // namespace wallfacer::seqpar
