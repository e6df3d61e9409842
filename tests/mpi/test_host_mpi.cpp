// A program that runs MPI itself (no MpiSession) and hands wallfacer its own communicators
// (comm::from_mpi_comm, docs/library.md): ranks and order follow the host's communicator, also a
// sub-communicator of it; wallfacer's messages never match the host's receives on the same
// communicator; the host's communicator stays usable after wallfacer is done with it, and may be
// freed while wallfacer still works; MPI_COMM_NULL and an intercommunicator are refused.
// (examples/attention runs distributed attention on such a communicator: ctest package_example.)
// Usage: mpirun -np P test_host_mpi            (P >= 2)
//        mpirun -np 2 test_host_mpi watchdog   (rank 1 stalls: the watchdog must end the job)

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/mpi_comm.h"
#include "wallfacer/core/error.h"

using namespace wallfacer;
using testing::check;

namespace {

int host_rank(MPI_Comm c) {
  int r = -1;
  MPI_Comm_rank(c, &r);
  return r;
}

// Ranks, size, a collective and a ring of point-to-point messages on a Communicator over `host`.
void check_group(comm::Communicator& g, MPI_Comm host, const std::string& what) {
  int size = 0;
  MPI_Comm_size(host, &size);
  check(g.rank() == host_rank(host) && g.size() == size, what + ": rank or size differ from host");
  // Sum of (world rank + 1): the members are the host communicator's.
  double mine = 0;
  {
    int w = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &w);
    mine = w + 1;
  }
  double host_sum = 0, ours = mine;
  MPI_Allreduce(&mine, &host_sum, 1, MPI_DOUBLE, MPI_SUM, host);
  g.all_reduce_sum(&ours, 1);
  check(ours == host_sum, what + ": all_reduce_sum differs from MPI_Allreduce on the host's");
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  float out = float(g.rank()), in = -1;
  auto r = g.irecv(&in, 1, prev, 7);
  auto s = g.isend(&out, 1, next, 7);
  r.wait();
  s.wait();
  check(in == float(prev), what + ": ring message");
}

// The host posts a receive for anything on its communicator; wallfacer's messages on the same
// ranks must not match it, and the host's own message afterwards must.
void check_isolation(MPI_Comm host) {
  auto g = comm::from_mpi_comm(host);
  const int rank = g.rank(), size = g.size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  float got = -1;
  MPI_Request host_recv;
  MPI_Irecv(&got, 1, MPI_FLOAT, MPI_ANY_SOURCE, MPI_ANY_TAG, host, &host_recv);
  float out = 10.0f + float(rank), in = -1;
  auto r = g.irecv(&in, 1, prev, 0);
  auto s = g.isend(&out, 1, next, 0);
  r.wait();
  s.wait();
  g.barrier();
  int matched = 1;
  MPI_Test(&host_recv, &matched, MPI_STATUS_IGNORE);
  check(!matched, "a host receive matched wallfacer's message");
  MPI_Barrier(host);  // every rank has looked before any host message is sent
  check(in == 10.0f + float(prev), "wallfacer's message went astray");
  const float host_msg = 100.0f + float(rank);
  MPI_Send(&host_msg, 1, MPI_FLOAT, next, 3, host);
  MPI_Wait(&host_recv, MPI_STATUS_IGNORE);
  check(got == 100.0f + float(prev), "the host's own message");
}

template <class F>
void expect_usage_error(F&& f, const char* needle, const std::string& what) {
  try {
    f();
    check(false, what + ": accepted");
  } catch (const UsageError& e) {
    check(std::strstr(e.what(), needle) != nullptr, what + ": message '" + e.what() + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int rc = 0;
  {
    MPI_Comm host;
    MPI_Comm_dup(MPI_COMM_WORLD, &host);
    if (argc > 1 && std::string(argv[1]) == "watchdog") {
      // Rank 1 stalls for 30 s; rank 0's receive must be ended by the watchdog after 1 s.
      comm::set_timeout(1);
      auto g = comm::from_mpi_comm(host);
      float x = 0;
      if (g.rank() == 1) sleep(30);
      if (g.rank() == 0) g.irecv(&x, 1, 1, 0).wait();
      std::printf("the watchdog did not end the job\n");
      MPI_Finalize();
      return 1;
    }

    auto whole = comm::from_mpi_comm(host);
    check_group(whole, host, "whole");

    // A sub-communicator in reverse order: wallfacer's ranks follow the host's order.
    MPI_Comm half;
    MPI_Comm_split(host, world_rank % 2, world_size - world_rank, &half);
    {
      auto g = comm::from_mpi_comm(half);
      check_group(g, half, "reversed half");
      // The host may free its communicator at once: wallfacer has its own.
      MPI_Comm_free(&half);
      double one = 1;
      g.all_reduce_sum(&one, 1);
      check(one == double((world_size + 1 - world_rank % 2) / 2), "half after the host freed it");
    }

    check_isolation(host);

    // Freed by wallfacer? The host's communicator still works after every Communicator is gone.
    {
      auto g = comm::from_mpi_comm(host);
      g.barrier();
    }
    int sum = 0, one = 1;
    check(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, host) == MPI_SUCCESS && sum == world_size,
          "the host's communicator after wallfacer used it");

    expect_usage_error([] { comm::from_mpi_comm(MPI_COMM_NULL); }, "MPI_COMM_NULL",
                       "MPI_COMM_NULL");
    if (world_size >= 2) {
      MPI_Comm local, inter;
      const int color = world_rank % 2;
      MPI_Comm_split(host, color, world_rank, &local);
      MPI_Intercomm_create(local, 0, host, color == 0 ? 1 : 0, 9, &inter);
      expect_usage_error([&] { comm::from_mpi_comm(inter); }, "intercommunicator",
                         "an intercommunicator");
      MPI_Comm_free(&inter);
      MPI_Comm_free(&local);
    }
    rc = testing::finish(whole, "a host's communicators (from_mpi_comm) on " +
                                    std::to_string(world_size) + " ranks");
    MPI_Comm_free(&host);
  }
  MPI_Finalize();
  return rc;
}
