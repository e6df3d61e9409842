// MPI_Alltoall in groups of 4 consecutive ranks (on the emulated cluster of nodes of 2 ranks: 2
// nodes per group), 256 KB and 1 MB per peer, 3 rounds each after a warm-up: one JSON line per
// round with the time in units of one message alone on a card (`--card-mb-per-s`, default 6.04).
//
//   mpicc -O2 -o build/alltoall_groups bench/alltoall_groups.c
//   scripts/emulate-cluster --nodes 4 --ranks-per-node 2 --cards-per-node 2 --rate 50mbit
//     -- build/alltoall_groups
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  double card = 6.04e6;
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--card-mb-per-s")) card = atof(argv[i + 1]) * 1e6;
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm group;
  MPI_Comm_split(MPI_COMM_WORLD, rank / 4, rank, &group);
  MPI_Comm_size(group, &size);
  for (int block = 1 << 18; block <= 1 << 20; block <<= 2) {
    char* send = calloc((size_t)block * size, 1);
    char* recv = malloc((size_t)block * size);
    MPI_Alltoall(send, block, MPI_CHAR, recv, block, MPI_CHAR, group);
    for (int round = 0; round < 3; ++round) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Alltoall(send, block, MPI_CHAR, recv, block, MPI_CHAR, group);
      double dt = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0)
        printf(
            "{\"pattern\": \"alltoall, groups of %d\", \"bytes_per_peer\": %d, \"round\": %d, "
            "\"ms\": %.1f, \"messages_alone\": %.2f}\n",
            size, block, round, slowest * 1e3, slowest / (block / card));
      fflush(stdout);
    }
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}
