#pragma once
// The MPI engine. Everything above comm/ talks to MPI through these types only: no MPI type leaks.
// Every MPI call is checked; a failure raises wallfacer::Error naming the call, the rank and peer.
//
// Byte counters: each Communicator counts the bytes this rank sends, split into point-to-point and
// collective. Collectives count the bytes of the ring algorithm whatever MPI does underneath:
// all-gather and reduce-scatter (n-1)/n of the full buffer, all-to-all (n-1)/n of the local
// buffer, all-reduce 2(n-1)/n of the buffer.

#include <cstdint>
#include <memory>
#include <vector>

namespace wallfacer::comm {

struct ByteCounters {
  int64_t p2p_bytes = 0;   // bytes sent by isend
  int64_t p2p_sends = 0;   // isend calls
  int64_t coll_bytes = 0;  // ring-algorithm bytes of collectives
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
  // The world group. Requires an MpiSession to be alive.
  static Communicator world();

  int rank() const;
  int size() const;

  // Sub-group of the ranks with the same `color`, ordered by `key` (MPI_Comm_split).
  Communicator split(int color, int key) const;

  // Non-blocking point-to-point on float buffers (counts in elements).
  Request isend(const float* buf, int64_t count, int dest, int tag);
  Request irecv(float* buf, int64_t count, int src, int tag);

  // Collectives on float buffers (counts in elements per rank).
  void all_gather(const float* send, int64_t count, float* recv);          // recv: size() * count
  void reduce_scatter_sum(const float* send, float* recv, int64_t count);  // send: size() * count
  void all_reduce_sum(float* buf, int64_t count);
  void all_reduce_sum(double* buf, int64_t count);
  void all_to_all(const float* send, float* recv, int64_t count_per_rank);
  void barrier();

  // Reduce-scatter of partial attention results with the LSE combine (kernels::lse_merge_rows):
  // o_send holds size() blocks of (B, rows, H, D) and lse_send size() blocks of (B, H, rows), block
  // j for rank j; every rank receives its block merged over all ranks (in rank order) into o_recv
  // (B, rows, H, D) and lse_recv (B, H, rows). Counted as (n-1)/n of the full (O, LSE) buffer.
  void reduce_scatter_lse(const float* o_send, const float* lse_send, float* o_recv,
                          float* lse_recv, int batch, int64_t rows, int heads, int head_dim);

  ByteCounters& counters();
  const ByteCounters& counters() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// MPI_Init_thread / MPI_Finalize for the lifetime of the object (once per process).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace wallfacer::comm
