// Two ranks of different nodes sending to each other, against one direction alone and against a
// card that sends to one rank while it receives from another: one JSON line per pattern and
// round, 4 MB per message. For the emulated cluster of 3 nodes or more x 2 ranks with a card per
// rank (ranks 0, 2 and 4 on cards 0 of nodes 0, 1 and 2):
//
//   mpicc -O2 -o build/both_ways bench/both_ways.c
//   scripts/emulate-cluster --nodes 4 --ranks-per-node 2 --cards-per-node 2 --rate 50mbit
//     -- build/both_ways
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { kBytes = 4 << 20, kMaxPairs = 4 };

static int rank;
static char *out, *in[kMaxPairs];

// Every (source, destination) of `pairs` sends kBytes at once; the slowest rank's seconds.
static double timed(int n, const int (*pairs)[2]) {
  MPI_Request reqs[2 * kMaxPairs];
  int k = 0, got = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < n; ++i) {
    if (pairs[i][1] == rank)
      MPI_Irecv(in[got++], kBytes, MPI_CHAR, pairs[i][0], 7, MPI_COMM_WORLD, &reqs[k++]);
    if (pairs[i][0] == rank)
      MPI_Isend(out, kBytes, MPI_CHAR, pairs[i][1], 7, MPI_COMM_WORLD, &reqs[k++]);
  }
  MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
  double dt = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

static void report(const char* name, int round, int n, const int (*pairs)[2]) {
  const double s = timed(n, pairs);
  if (rank == 0)
    printf(
        "{\"pattern\": \"%s\", \"round\": %d, \"bytes\": %d, \"ms\": %.1f, "
        "\"mb_per_s_per_message\": %.2f}\n",
        name, round, kBytes, s * 1e3, kBytes / s / 1e6);
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  out = calloc(kBytes, 1);
  for (int i = 0; i < kMaxPairs; ++i) in[i] = malloc(kBytes);
  const int alone[][2] = {{0, 2}}, both[][2] = {{0, 2}, {2, 0}}, out_in[][2] = {{0, 2}, {4, 0}},
            out_twice[][2] = {{0, 2}, {0, 4}}, two_pairs[][2] = {{0, 2}, {2, 0}, {1, 3}, {3, 1}};
  for (int round = 0; round < 3; ++round) {
    report("0->2 alone", round, 1, alone);
    report("0<->2 both ways", round, 2, both);
    report("0->2 and 4->0 (card 0 of node 0 out and in, two peers)", round, 2, out_in);
    report("0->2 and 0->4 (card 0 of node 0 out twice)", round, 2, out_twice);
    report("0<->2 and 1<->3 both ways", round, 4, two_pairs);
  }
  MPI_Finalize();
  return 0;
}
