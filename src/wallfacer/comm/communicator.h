#pragma once
// The MPI engine. Everything above comm/ talks to MPI through these types only: no MPI type leaks.
// Every MPI call is checked; a failure raises wallfacer::Error naming the call, the rank and peer.
//
// Where a Communicator comes from: Communicator::world() in a program whose main creates an
// MpiSession (the wallfacer CLI), comm::from_mpi_comm (comm/mpi_comm.h) in a host program that
// runs MPI itself, and split() of either.
//
// Collective calls (split, the collectives, barrier, agree, and building a DistAttention on a
// group) must be made by every rank of the group, in the same order. Thread-safety: one thread
// at a time calls into a group and the groups split from it (the MPI library's thread level
// decides which thread); two Communicators over different ranks need no coordination.
// Copies of a Communicator share one MPI communicator and one ByteCounters.
//
// Byte counters: each Communicator counts the bytes this rank hands to MPI for other ranks, split
// into point-to-point and collective. Point-to-point: the size of each isend. Collectives: the
// bytes the call addresses from this rank to the other n-1 ranks, from the sizes passed to MPI,
// whatever algorithm MPI runs underneath: all-gather the send block times n-1, all-to-all and the
// reduce-scatters the n-1 blocks for other ranks, all-reduce the buffer times n-1 (every other
// rank's result needs all of it). Barrier, agree and split move no data and are not counted.
// Beside it, coll_formula_bytes adds the ring algorithm's volume for each call: the same except
// for all-reduce, 2(n-1)/n of the buffer.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/bf16.h"

namespace wallfacer::comm {

struct ByteCounters {
  int64_t p2p_bytes = 0;           // bytes sent by isend
  int64_t p2p_sends = 0;           // isend calls
  int64_t coll_bytes = 0;          // bytes of collectives addressed to other ranks
  int64_t coll_formula_bytes = 0;  // the ring algorithm's volume of the same collectives
  void reset() { *this = {}; }
};

// A pending non-blocking transfer.
class Request {
 public:
  Request();
  ~Request();  // waits if still pending
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  bool test();  // true when complete (and drives MPI progress)
  void wait();
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend class Communicator;
};

class Communicator {
 public:
  // The world group (MPI_COMM_WORLD itself). Requires MPI to be running: an MpiSession, or MPI
  // started by the host (which should rather use from_mpi_comm, to keep its messages apart).
  static Communicator world();

  int rank() const;
  int size() const;

  // Sub-group of the ranks with the same `color`, ordered by `key` (MPI_Comm_split). Collective.
  // The sub-group owns its MPI communicator, freed when its last copy is destroyed.
  Communicator split(int color, int key) const;

  // Non-blocking point-to-point on float or bf16 buffers (counts in elements; bytes counted as
  // elements times 4 or 2).
  Request isend(const float* buf, int64_t count, int dest, int tag);
  Request irecv(float* buf, int64_t count, int src, int tag);
  Request isend(const bf16* buf, int64_t count, int dest, int tag);
  Request irecv(bf16* buf, int64_t count, int src, int tag);

  // Collectives on float buffers (counts in elements per rank); all-gather and all-to-all also on
  // bf16 buffers (they only move data).
  void all_gather(const float* send, int64_t count, float* recv);  // recv: size() * count
  void all_gather(const bf16* send, int64_t count, bf16* recv);
  void reduce_scatter_sum(const float* send, float* recv, int64_t count);  // send: size() * count
  void all_reduce_sum(float* buf, int64_t count);
  void all_reduce_sum(double* buf, int64_t count);
  void all_reduce_max(uint64_t* buf, int64_t count);  // elementwise maximum
  void all_reduce_max(double* buf, int64_t count);    // elementwise maximum
  void all_to_all(const float* send, float* recv, int64_t count_per_rank);
  void all_to_all(const bf16* send, bf16* recv, int64_t count_per_rank);
  void barrier();

  // The LSE combine of the reduce-scatter below, given by the caller (comm knows no kernels;
  // kernels::lse_merge_rows is one): merges `rows` rows of a partial attention result (o2, lse2)
  // into (o, lse), lse <- log(exp(lse) + exp(lse2)) and o <- exp(lse_old - lse) o +
  // exp(lse2 - lse) o2; o rows have head_dim contiguous floats, rows the given strides apart.
  using LseMergeRows = void (*)(int rows, int head_dim, float* o, int64_t o_row_stride, float* lse,
                                int64_t lse_row_stride, const float* o2, int64_t o2_row_stride,
                                const float* lse2, int64_t lse2_row_stride);

  // Reduce-scatter of partial attention results with the LSE combine `merge`: o_send holds size()
  // blocks of (B, rows, H, D) and lse_send size() blocks of (B, H, rows), block j for rank j;
  // every rank receives its block merged over all ranks (in rank order) into o_recv
  // (B, rows, H, D) and lse_recv (B, H, rows). Counted: the n-1 (O, LSE) blocks for other ranks.
  void reduce_scatter_lse(const float* o_send, const float* lse_send, float* o_recv,
                          float* lse_recv, int batch, int64_t rows, int heads, int head_dim,
                          LseMergeRows merge);
  // The same with bf16 partial O on the wire: the blocks are widened to fp32 and merged in fp32,
  // and the merged O is rounded to bf16 once; lse stays fp32.
  void reduce_scatter_lse(const bf16* o_send, const float* lse_send, bf16* o_recv, float* lse_recv,
                          int batch, int64_t rows, int heads, int head_dim, LseMergeRows merge);

  // Runs f on every rank and agrees on the outcome (collective): when f throws on any rank, every
  // rank throws the error of the lowest rank that failed (a UsageError stays one), its message
  // prefixed with "rank R: " unless every rank failed alike. For what only some ranks can see
  // (their files, their data) before the next collective.
  void agree(const std::function<void()>& f);

  ByteCounters& counters();
  const ByteCounters& counters() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// MPI_Init_thread / MPI_Finalize for the lifetime of the object (once per process). When the
// object is destroyed by an exception, MPI is left running: MPI_Finalize waits for every rank, and
// the others may be waiting in a collective for this one; end_job_with_error ends the job instead.
// Right after MPI_Init, when WALLFACER_LAUNCH_MARKERS names a folder, the rank creates a file there
// named after its process id: the proof for tests/mpirun.sh that the launch reached the program
// (end_job_with_error leaves one too).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();  // MPI_Finalize, unless an exception is unwinding the stack
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// ---------------------------------------------------------------------------------------------
// Faults: no rank's failure leaves the others waiting.

// The watchdog: a wait or collective of this process (Request::wait, the collectives, barrier)
// that has not completed after `seconds` aborts the whole job with a message naming the operation,
// the peer and the phase (set_phase). 0 turns it off. Default 600; takes effect from the next wait.
void set_timeout(double seconds);
double timeout();

// What this rank is doing, for the watchdog's message (e.g. "step 12"); "" for nothing.
void set_phase(const std::string& phase);

// Number of ranks the launcher started (mpirun, srun: read from its environment before MPI
// starts); 1 outside a launcher.
int launched_size();

// Under a launcher that retries a job none of whose ranks started (tests/mpirun.sh): leaves a file
// named after this process in the folder WALLFACER_LAUNCH_MARKERS names (nothing when it is unset),
// the proof that this rank reached the program. MpiSession, from_mpi_comm and end_job_with_error
// do it; a host whose ranks may stop before any of them (the Python module, at import) calls it.
// Returns "" or what went wrong.
std::string mark_launched();

// Ends this process after an error, so that no rank waits forever for it. Without MPI (or on one
// rank) it prints "PREFIX: error: MESSAGE" to stderr and returns `code` for main to return. Under
// a launcher it starts MPI if needed, then waits up to a few seconds for the other ranks: when
// every rank failed with the same message and code (bad input every rank sees), rank 0 prints it
// once, MPI is finalised and `code` is returned; otherwise this rank prints
// "PREFIX: error: rank R: MESSAGE", flushes and calls MPI_Abort with `code`, which ends every rank.
int end_job_with_error(const std::string& prefix, const std::string& message, int code);

}  // namespace wallfacer::comm
