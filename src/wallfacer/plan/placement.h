#pragma once
// Placements: which device runs each rank of a layout. A layout of P ranks made of teams of C
// consecutive ranks (WallFacer teams, or the all-to-all groups of a Ulysses x ring hybrid), grouped
// into team groups of G teams; the ranks of one team group with the same member index form a
// sub-ring of G ranks:   rank = g·(G·C) + j·C + a   (team group g, team j in the group, member a).
//
//   default     the layout's own order: device = rank
//   team-intra  teams on consecutive devices, so team collectives stay inside a node; with teams of
//               consecutive ranks this is the default order
//   ring-intra  sub-rings on consecutive devices, so ring hops stay inside a node:
//               device = g·(G·C) + a·G + j
//
// A Ulysses x WallFacer-C hybrid (plan::candidate_devices) keeps each Ulysses team of u consecutive
// ranks on consecutive devices and orders its P/u ring ranks as above for WallFacer-C's teams.
//
// A placement is applied by ordering the sequence-parallel communicator by layout rank
// (Communicator::split(0, layout_rank)): the strategies themselves never change.

#include <string>
#include <string_view>
#include <vector>

namespace wallfacer::plan {

enum class Placement { Default, TeamIntra, RingIntra };

Placement parse_placement(std::string_view name);  // UsageError naming the choices
std::string_view placement_name(Placement p);

struct TeamGroups {
  int ranks = 1;        // P
  int team = 1;         // C: consecutive ranks per team
  int group_teams = 1;  // G: teams per team group (= sub-ring length)
};

// device_of[layout rank]; a permutation of 0..P-1. Throws UsageError when the layout is invalid.
std::vector<int> device_order(const TeamGroups& groups, Placement p);

// The inverse: layout rank of each device.
std::vector<int> inverse_order(const std::vector<int>& device_of);

}  // namespace wallfacer::plan
