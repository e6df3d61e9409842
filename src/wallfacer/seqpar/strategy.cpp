#include "wallfacer/seqpar/strategy.h"

#include <array>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

constexpr std::array<StrategyTraits, 5> kStrategies = {{
    {.id = Strategy::Ring,
     .name = "ring",
     .summary = "K,V blocks circulate around all P ranks",
     .hybrid_ring = true,
     .build = build_team_ring_schedule,
     .totals = team_ring_totals},
    {.id = Strategy::Zigzag,
     .name = "zigzag",
     .summary = "ring over the zigzag layout, which balances a causal mask",
     .hybrid_ring = true,
     .zigzag_layout = true,
     .build = build_team_ring_schedule,
     .totals = team_ring_totals},
    {.id = Strategy::Ulysses,
     .name = "ulysses",
     .summary = "all-to-alls trade sequence rows for heads (heads divisible by P)",
     .splits_heads = true,
     .backward = BackwardTravel::None,
     .build = build_ulysses_schedule,
     .totals = ulysses_totals},
    {.id = Strategy::WallFacer,
     .name = "wallfacer",
     .summary = "teams of C ranks, K,V on C^2 sub-rings (C^2 divides P)",
     .has_teams = true,
     .hybrid_ring = true,
     .zigzag_when_causal = true,
     .build = build_team_ring_schedule,
     .totals = team_ring_totals},
    {.id = Strategy::DoubleRing,
     .name = "double-ring",
     .summary = "inner rings of W consecutive ranks and an outer ring over them (W divides P)",
     .has_inner = true,
     .zigzag_when_causal = true,
     .backward = BackwardTravel::EveryHop,
     .build = build_double_ring_schedule,
     .totals = double_ring_totals},
}};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < kStrategies.size(); ++i)
    if (int(kStrategies[i].id) != int(i)) return false;
  return true;
}
static_assert(in_enum_order(), "kStrategies lists the strategies in the order of the enum");

}  // namespace

const std::vector<StrategyTraits>& strategies() {
  static const std::vector<StrategyTraits> all(kStrategies.begin(), kStrategies.end());
  return all;
}

const StrategyTraits& traits(Strategy s) {
  WF_CHECK(int(s) >= 0 && size_t(s) < kStrategies.size(), "strategy {} is not in the table",
           int(s));
  return strategies()[size_t(s)];
}

Strategy parse_strategy(std::string_view name) {
  for (const StrategyTraits& t : strategies())
    if (t.name == name) return t.id;
  throw UsageError(fmt::format("unknown strategy '{}': use one of {}", name, strategy_names()));
}

std::string_view strategy_name(Strategy s) { return traits(s).name; }

std::string strategy_names(std::string_view sep, std::string_view last,
                           bool (*pred)(const StrategyTraits&)) {
  std::vector<std::string_view> names;
  for (const StrategyTraits& t : strategies())
    if (!pred || pred(t)) names.push_back(t.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() && !last.empty() ? last : sep;
    out += names[i];
  }
  return out;
}

int team_size(Strategy strategy, int teams) { return traits(strategy).has_teams ? teams : 1; }

}  // namespace wallfacer::seqpar
