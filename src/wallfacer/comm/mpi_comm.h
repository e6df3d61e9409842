#pragma once
// A Communicator over a communicator of the host program, for programs that start MPI themselves
// (MPI_Init or MPI_Init_thread in their own main, MPI_Finalize at their end) and need no
// comm::MpiSession. The one public header that includes <mpi.h>.

#include <mpi.h>

#include "wallfacer/comm/communicator.h"

namespace wallfacer::comm {

// A Communicator over the ranks of `comm`, with the same ranks and size.
//
// Collective over `comm`: every rank of `comm` calls it, in the same order relative to the other
// collectives on `comm`. wallfacer works on its own duplicate (MPI_Comm_dup), so that its messages
// never match the host's and the host's error handler on `comm` stays as it is (the duplicate
// returns errors, which wallfacer raises as wallfacer::Error naming the call and the ranks).
//
// Lifetime: `comm` stays the caller's. wallfacer never frees it, and the caller may free it as
// soon as this returns. The duplicate belongs to the returned Communicator and its copies (the
// sub-groups made with split() and every DistAttention built on them hold their own): it is
// freed when the last of them is destroyed. Destroy them on every rank before MPI_Finalize;
// destroyed after it, they free nothing.
//
// Needs MPI running (UsageError otherwise); any thread level works, as long as wallfacer is
// called from one thread at a time, the thread the MPI library allows to call it. An
// intercommunicator or MPI_COMM_NULL is a UsageError.
//
// The watchdog (comm::set_timeout, default 600 s) starts with the first such Communicator: a wait
// of wallfacer's that makes no progress for that long prints the operation and the peer and ends
// the job with MPI_Abort(MPI_COMM_WORLD, 1). comm::set_timeout(0) turns it off.
//
// What MpiSession does that a host does itself: MPI_Init_thread (wallfacer asks for
// MPI_THREAD_FUNNELED), and, with more ranks on a machine than cores, Open MPI's
// mpi_yield_when_idle (OMPI_MCA_mpi_yield_when_idle=1 in the environment before MPI_Init, or
// `mpirun --mca mpi_yield_when_idle 1`), so that a waiting rank gives its core to the rank it
// waits for. comm::end_job_with_error is for programs whose main is wallfacer's; a host handles
// wallfacer's exceptions as it handles its own.
Communicator from_mpi_comm(MPI_Comm comm);

}  // namespace wallfacer::comm
