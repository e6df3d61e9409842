#!/usr/bin/env python3
"""Point-to-point elements per rank of WallFacer-C, counted by moving blocks rank by rank.

The reference that tests/unit/test_seqpar_schedule.cpp holds the schedule counter to. It follows
the rules of docs/algorithm.md, and nothing else: the layout (teams of C ranks, zigzag half-chunks
under a causal mask), the placement rule, the C^2 sub-rings of G = P/C^2 ranks, and the backward in
which the query packages travel while K,V stay where the forward placed them. It moves every block
through every rank, checks what the algorithm promises (the placement is a permutation, each team
meets every key block exactly once in the forward and in the backward, every package comes home,
the causal work is balanced up to the diagonal), counts the elements each rank sends, compares the
count with the closed form of docs/algorithm.md, and writes one row per configuration:
{P, C, causal, S, D, p2p elements}: the largest count over the ranks, forward + backward, one head,
batch 1.

Counting convention (docs/algorithm.md, "A count to test against"): a K,V block is 2*m*D elements
(m = C*S/P team rows), a query-package hop 3*m*D (q, dO and the dQ accumulator; the two per-row
statistics, m elements each, are left out), and a hop is counted even when the sub-ring has a
single rank (G = 1) and it goes from a rank to itself.

Python 3 standard library only. Usage:
  python3 tests/golden/wallfacer_counts.py > tests/unit/wallfacer_counts.inc
The ctest golden_wallfacer_counts regenerates the file into the build tree and compares.
"""
import bisect
import sys

OUTPUT = "tests/unit/wallfacer_counts.inc"
S, D = 256, 8
GRID = [(1, 1), (4, 1), (4, 2), (8, 1), (8, 2), (16, 1), (16, 2), (16, 4), (32, 2)]


def rank_positions(P, S, r, causal):
    """Global token positions of rank r: the zigzag half-chunks r and 2P-1-r, or chunk r."""
    if causal:
        h = S // (2 * P)
        return list(range(r * h, (r + 1) * h)) + list(range((2 * P - 1 - r) * h, (2 * P - r) * h))
    n = S // P
    return list(range(r * n, (r + 1) * n))


def kept_pairs(queries, keys_sorted, causal):
    """(query, key) pairs the mask keeps."""
    if not causal:
        return len(queries) * len(keys_sorted)
    return sum(bisect.bisect_right(keys_sorted, q) for q in queries)


class Layout:
    """Rank r = t*C + a: team t, member a. T = P/C teams, G = P/C^2 teams per team group."""

    def __init__(self, P, C):
        assert C >= 1 and P % (C * C) == 0, (P, C)
        self.P, self.C, self.T, self.G = P, C, P // C, P // (C * C)

    def rank(self, team, member):
        return team * self.C + member

    def placement(self, r):
        """Where rank (t, a) sends its copy of team t's K,V block: member t mod C of team
        a*G + floor(t/C)."""
        t, a = divmod(r, self.C)
        return self.rank(a * self.G + t // self.C, t % self.C)

    def sub_ring(self, r):
        """The G ranks of r's sub-ring in ring order: same team group, same member."""
        group, member = r // self.C // self.G, r % self.C
        return [self.rank(group * self.G + j, member) for j in range(self.G)]

    def next(self, r):
        ring = self.sub_ring(r)
        return ring[(ring.index(r) + 1) % len(ring)]


def count(P, C, causal):
    """Elements each rank sends, forward + backward; checks the algorithm's promises on the way."""
    L = Layout(P, C)
    n, m = S // P, C * S // P
    kv_block, package, grad_return = 2 * m * D, 3 * m * D, 2 * m * D
    team_pos = [sum((rank_positions(P, S, L.rank(t, a), causal) for a in range(C)), [])
                for t in range(L.T)]
    team_keys = [sorted(p) for p in team_pos]
    sent = [0] * P

    # Forward. The team all-gather of Q, K, V is a collective: not counted here.
    dst = [L.placement(r) for r in range(P)]
    assert sorted(dst) == list(range(P)), "the placement is a permutation"
    holds = [None] * P  # team whose K,V block a rank holds
    for r in range(P):
        holds[dst[r]] = r // C
        if dst[r] != r:
            sent[r] += kv_block
    placed = list(holds)  # where the backward finds K,V
    met = {}  # (query team, key team) -> times computed
    work = [0] * P
    for step in range(L.G):
        for r in range(P):
            pair = (r // C, holds[r])
            met[pair] = met.get(pair, 0) + 1
            work[r] += kept_pairs(team_pos[pair[0]], team_keys[pair[1]], causal)
        if step < L.G - 1:  # hand the block on to the next rank of the sub-ring
            moved = [None] * P
            for r in range(P):
                moved[L.next(r)] = holds[r]
                sent[r] += kv_block
            holds = moved
    assert met == {(q, k): 1 for q in range(L.T) for k in range(L.T)}, "forward coverage"
    # Zigzag: every (query rank, key rank) pair costs 2h^2 kept pairs (h = n/2), except a rank
    # against itself, which costs h more. One member of each team meets its own team's keys.
    extra = C * (n // 2) if causal else 0
    assert max(work) - min(work) <= extra, ("balance", work)
    # The reduce-scatter of (O, LSE) in the team is a collective: not counted here.

    # Backward. K,V stay where the placement put them; the package of team t starts on each member
    # of team t and makes G hops around the sub-ring, the last one home.
    carries = [r // C for r in range(P)]  # query team of the package a rank holds
    met = {}
    for step in range(L.G):
        for r in range(P):
            pair = (carries[r], placed[r])
            met[pair] = met.get(pair, 0) + 1
        moved = [None] * P
        for r in range(P):
            moved[L.next(r)] = carries[r]
            sent[r] += package
        carries = moved
    assert carries == [r // C for r in range(P)], "every package is home"
    assert met == {(q, k): 1 for q in range(L.T) for k in range(L.T)}, "backward coverage"
    # dK,dV go back along the inverse of the placement (then a team reduce-scatter, not counted).
    for r in range(P):
        src = dst.index(r)
        if src != r:
            sent[r] += grad_return

    # The closed form of docs/algorithm.md.
    for r in range(P):
        out, back = int(dst[r] != r), int(dst.index(r) != r)
        assert sent[r] == (out + L.G - 1) * kv_block + L.G * package + back * grad_return, r
    return max(sent)


def main():
    if len(sys.argv) > 1:
        sys.exit(__doc__)
    print(f"// Generated by `python3 tests/golden/wallfacer_counts.py > {OUTPUT}`: "
          "{P, C, causal, S, D, p2p elements}")
    for P, C in GRID:
        for causal in (False, True):
            print(f"{{{P}, {C}, {str(causal).lower()}, {S}, {D}, {count(P, C, causal)}}},")


if __name__ == "__main__":
    main()
