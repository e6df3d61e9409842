#pragma once
// The strategies, one row each (docs/seqpar.md, "Adding a strategy"): the name the CLI, the TOML
// config and Python take, what the strategy needs of the ranks, heads and sequence, its layout,
// its schedule builder and its closed-form volumes. parse_strategy, strategy_name, the CLI's
// choices, the config's messages, the planner's labels and the tests read this table instead of
// listing the strategies again. Plain data, no MPI.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wallfacer::seqpar {

// How the P ranks of a group share the work (docs/seqpar.md; each row of kStrategies says more):
//   Ring       K,V blocks circulate around all P ranks (P-1 hops per phase).
//   Zigzag     ring over the 2P half-chunk zigzag layout, which balances a causal mask.
//   Ulysses    all-to-alls trade sequence rows for heads; needs heads and kv_heads divisible by P.
//   WallFacer  teams of C ranks gather Q,K,V, K,V circulate on C^2 sub-rings of P/C^2 ranks, and
//              an LSE reduce-scatter finishes; C = 1 is ring attention. Needs C^2 to divide P
//              (P/ulysses in a Ulysses hybrid).
//   DoubleRing K,V blocks circulate on inner rings of `inner` = W consecutive ranks, and an outer
//              ring over the P/W groups brings each group the next group's blocks (one outer hop
//              per phase from every rank at once); W = 1 or W = P is a ring. Needs W to divide P.
enum class Strategy { Ring, Zigzag, Ulysses, WallFacer, DoubleRing };

struct AttnConfig;
struct Schedule;
struct ScheduleTotals;

// Which side of the ring travels in the backward (backward_moves_kv, seqpar/schedule.h).
enum class BackwardTravel {
  None,     // no ring (Ulysses): nothing travels around one
  EveryHop,  // whichever sends fewer bytes by the closed forms: every hop is made (double ring)
  Counted,   // whichever sends fewer bytes, counted per configuration (K,V or the query packages)
};

// One strategy. Its rules (validate, seqpar/config.h) read these fields; what differs beyond them
// is its schedule builder and closed form.
struct StrategyTraits {
  Strategy id;
  std::string_view name;     // "ring": what --strategy, parallel.strategy and Python take
  std::string_view summary;  // one line for help texts
  // --teams C (parallel.teams): WallFacer's team size, C^2 dividing the ring's ranks; every
  // other strategy runs with teams = 1 (team_size 1) and refuses another.
  bool has_teams = false;
  // --inner W (parallel.inner): the inner ring length, W >= 1 dividing P (0 for the others,
  // which refuse another); callers resolve a default (resolved_inner) before building the config.
  bool has_inner = false;
  // Splits the heads among the ranks: heads and kv_heads divisible by P (Ulysses).
  bool splits_heads = false;
  // May be the ring over the teams of a Ulysses hybrid (--ulysses U > 1).
  bool hybrid_ring = false;
  // Rows in the 2P half-chunk zigzag layout: always, or with a causal mask (Layout::Strategy).
  bool zigzag_layout = false;
  bool zigzag_when_causal = false;
  BackwardTravel backward = BackwardTravel::Counted;
  // The rank's schedule (make_schedule fills its shapes and user buffers first) and its
  // closed-form volumes (formula_totals, for a config of this strategy without --ulysses).
  void (*build)(Schedule& s) = nullptr;
  ScheduleTotals (*totals)(const AttnConfig& cfg, int P, int rank) = nullptr;
};

// Every strategy, in the order of the enum (strategies()[int(s)].id == s) and of the CLI's
// choices.
const std::vector<StrategyTraits>& strategies();
const StrategyTraits& traits(Strategy s);

// The strategy named `name`; throws UsageError naming the bad value and the names of the table.
Strategy parse_strategy(std::string_view name);
std::string_view strategy_name(Strategy s);
// The names joined: "ring, zigzag, ulysses, wallfacer, double-ring" (sep ", "), or with
// " | " for a help text. With `last` (e.g. " or "), that before the last name; `pred`, when
// given, keeps only the strategies it accepts.
std::string strategy_names(std::string_view sep = ", ", std::string_view last = {},
                           bool (*pred)(const StrategyTraits&) = nullptr);

// C, the size of a WallFacer team: `teams` for a strategy with teams, 1 for every other strategy
// (which has no teams of its own; a hybrid's Ulysses teams are `ulysses`).
int team_size(Strategy strategy, int teams);

}  // namespace wallfacer::seqpar
