#include "wallfacer/plan/placement.h"

#include "wallfacer/core/error.h"

namespace wallfacer::plan {

Placement parse_placement(std::string_view name) {
  if (name == "default") return Placement::Default;
  if (name == "team-intra") return Placement::TeamIntra;
  if (name == "ring-intra") return Placement::RingIntra;
  throw UsageError(
      fmt::format("unknown placement '{}' (use default, team-intra or ring-intra)", name));
}

std::string_view placement_name(Placement p) {
  switch (p) {
    case Placement::Default:
      return "default";
    case Placement::TeamIntra:
      return "team-intra";
    case Placement::RingIntra:
      return "ring-intra";
  }
  return "?";
}

std::vector<int> device_order(const TeamGroups& l, Placement p) {
  WF_USAGE_CHECK(
      l.ranks >= 1 && l.team >= 1 && l.group_teams >= 1 && l.ranks % (l.team * l.group_teams) == 0,
      "a layout of {} ranks cannot be cut into team groups of {} teams of {}", l.ranks,
      l.group_teams, l.team);
  std::vector<int> dev(l.ranks);
  const int C = l.team, G = l.group_teams, span = C * G;
  for (int r = 0; r < l.ranks; ++r) {
    const int g = r / span, j = (r % span) / C, a = r % C;
    dev[r] = p == Placement::RingIntra ? g * span + a * G + j : r;
  }
  return dev;
}

std::vector<int> inverse_order(const std::vector<int>& device_of) {
  std::vector<int> inv(device_of.size(), -1);
  for (size_t r = 0; r < device_of.size(); ++r) {
    const int d = device_of[r];
    WF_CHECK(d >= 0 && size_t(d) < inv.size() && inv[d] < 0, "not a permutation at rank {}", r);
    inv[d] = static_cast<int>(r);
  }
  return inv;
}

}  // namespace wallfacer::plan
