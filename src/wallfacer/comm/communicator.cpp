#include "wallfacer/comm/communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"

namespace wallfacer::comm {
namespace {

// Largest element count passed to one MPI call (MPI counts are int).
constexpr int64_t kMaxCount = int64_t(1) << 30;

constexpr int kNoPeer = -1;

[[noreturn]] void fail(int rc, const char* call, int rank, int peer) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    std::snprintf(text, sizeof text, "code %d", rc);
  std::string where =
      peer == kNoPeer ? fmt::format("rank {}", rank) : fmt::format("rank {}, peer {}", rank, peer);
  throw Error(fmt::format("{} failed on {}: {}", call, where, text));
}

void check(int rc, const char* call, int rank, int peer = kNoPeer) {
  if (rc != MPI_SUCCESS) fail(rc, call, rank, peer);
}

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Request

struct Request::Impl {
  std::vector<MPI_Request> reqs;
  int rank = -1;
  int peer = kNoPeer;
};

Request::Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (...) {
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Request::~Request() {
  try {
    wait();
  } catch (...) {
    // A destructor must not throw; the failure was already visible to the caller of test/wait.
  }
}

bool Request::test() {
  if (!impl_ || impl_->reqs.empty()) return true;
  int done = 0;
  check(MPI_Testall(int(impl_->reqs.size()), impl_->reqs.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall", impl_->rank, impl_->peer);
  if (done) impl_->reqs.clear();
  return done != 0;
}

void Request::wait() {
  if (!impl_ || impl_->reqs.empty()) return;
  auto reqs = std::move(impl_->reqs);
  impl_->reqs.clear();
  check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall", impl_->rank,
        impl_->peer);
}

// ---------------------------------------------------------------------------------------------
// Communicator

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
  int rank = 0;
  int size = 1;
  int wrank = 0;  // rank in MPI_COMM_WORLD, for messages
  ByteCounters counters;

  ~Impl() {
    if (owned && comm != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm);
  }

  // Pairwise exchange: block j of `send` goes to rank j, block i of `recv` comes from rank i
  // (blocks of `count` elements); chunked so that any count works. Used for large counts.
  void exchange(const float* send, float* recv, int64_t count, const char* what) {
    std::vector<MPI_Request> reqs;
    for (int step = 0; step < size; ++step) {
      const int to = (rank + step) % size, from = (rank - step + size) % size;
      for (int64_t off = 0; off < count; off += kMaxCount) {
        const int c = int(std::min(kMaxCount, count - off));
        reqs.emplace_back();
        check(MPI_Irecv(recv + int64_t(from) * count + off, c, MPI_FLOAT, from, 0x7e11, comm,
                        &reqs.back()),
              "MPI_Irecv", wrank, from);
        reqs.emplace_back();
        check(MPI_Isend(send + int64_t(to) * count + off, c, MPI_FLOAT, to, 0x7e11, comm,
                        &reqs.back()),
              "MPI_Isend", wrank, to);
      }
    }
    check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), what, wrank);
  }

  void all_to_all(const float* send, float* recv, int64_t count) {
    if (count <= INT_MAX) {
      check(MPI_Alltoall(send, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, comm),
            "MPI_Alltoall", wrank);
    } else {
      exchange(send, recv, count, "MPI_Waitall (all-to-all)");
    }
  }
};

Communicator Communicator::world() {
  WF_CHECK(mpi_alive(), "Communicator::world() needs MPI: create a comm::MpiSession first");
  Communicator c;
  c.impl_ = std::make_shared<Impl>();
  c.impl_->comm = MPI_COMM_WORLD;
  c.impl_->wrank = world_rank();
  check(MPI_Comm_rank(MPI_COMM_WORLD, &c.impl_->rank), "MPI_Comm_rank", c.impl_->wrank);
  check(MPI_Comm_size(MPI_COMM_WORLD, &c.impl_->size), "MPI_Comm_size", c.impl_->wrank);
  return c;
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
ByteCounters& Communicator::counters() { return impl_->counters; }
const ByteCounters& Communicator::counters() const { return impl_->counters; }

Communicator Communicator::split(int color, int key) const {
  Communicator c;
  c.impl_ = std::make_shared<Impl>();
  c.impl_->wrank = impl_->wrank;
  check(MPI_Comm_split(impl_->comm, color, key, &c.impl_->comm), "MPI_Comm_split", impl_->wrank);
  c.impl_->owned = true;
  check(MPI_Comm_set_errhandler(c.impl_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
        impl_->wrank);
  check(MPI_Comm_rank(c.impl_->comm, &c.impl_->rank), "MPI_Comm_rank", impl_->wrank);
  check(MPI_Comm_size(c.impl_->comm, &c.impl_->size), "MPI_Comm_size", impl_->wrank);
  return c;
}

Request Communicator::isend(const float* buf, int64_t count, int dest, int tag) {
  WF_CHECK(count >= 0 && dest >= 0 && dest < size(), "isend: bad count {} or destination {}", count,
           dest);
  Request r;
  r.impl_ = std::make_unique<Request::Impl>();
  r.impl_->rank = impl_->wrank;
  r.impl_->peer = dest;
  for (int64_t off = 0; off < count || off == 0; off += kMaxCount) {
    const int c = int(std::min(kMaxCount, count - off));
    r.impl_->reqs.emplace_back();
    check(MPI_Isend(buf + off, c, MPI_FLOAT, dest, tag, impl_->comm, &r.impl_->reqs.back()),
          "MPI_Isend", impl_->wrank, dest);
    if (count == 0) break;
  }
  impl_->counters.p2p_bytes += count * int64_t(sizeof(float));
  impl_->counters.p2p_sends += 1;
  return r;
}

Request Communicator::irecv(float* buf, int64_t count, int src, int tag) {
  WF_CHECK(count >= 0 && src >= 0 && src < size(), "irecv: bad count {} or source {}", count, src);
  Request r;
  r.impl_ = std::make_unique<Request::Impl>();
  r.impl_->rank = impl_->wrank;
  r.impl_->peer = src;
  for (int64_t off = 0; off < count || off == 0; off += kMaxCount) {
    const int c = int(std::min(kMaxCount, count - off));
    r.impl_->reqs.emplace_back();
    check(MPI_Irecv(buf + off, c, MPI_FLOAT, src, tag, impl_->comm, &r.impl_->reqs.back()),
          "MPI_Irecv", impl_->wrank, src);
    if (count == 0) break;
  }
  return r;
}

void Communicator::all_gather(const float* send, int64_t count, float* recv) {
  const int n = size();
  float* own = recv + int64_t(rank()) * count;
  if (count <= INT_MAX) {
    const void* src = send == own ? MPI_IN_PLACE : static_cast<const void*>(send);
    check(MPI_Allgather(src, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, impl_->comm),
          "MPI_Allgather", impl_->wrank);
  } else {
    // Every rank sends its block to every rank: an exchange with the block replicated.
    std::vector<float> rep(size_t(n) * size_t(count));
    for (int j = 0; j < n; ++j) std::memcpy(rep.data() + int64_t(j) * count, send, count * 4);
    impl_->exchange(rep.data(), recv, count, "MPI_Waitall (all-gather)");
  }
  impl_->counters.coll_bytes += int64_t(n - 1) * count * int64_t(sizeof(float));
}

void Communicator::reduce_scatter_sum(const float* send, float* recv, int64_t count) {
  const int n = size();
  // A pairwise exchange, not MPI_Reduce_scatter_block: every rank sends each peer its block once,
  // (n-1)/n of the buffer, the volume counted here (Open MPI may pick a reduce then a scatter,
  // which sends more), and the sum runs in rank order on every rank.
  std::vector<float> got(size_t(n) * size_t(count));
  impl_->exchange(send, got.data(), count, "MPI_Waitall (reduce-scatter)");
  std::memcpy(recv, got.data(), count * sizeof(float));
  for (int j = 1; j < n; ++j) {
    const float* b = got.data() + int64_t(j) * count;
    for (int64_t i = 0; i < count; ++i) recv[i] += b[i];
  }
  impl_->counters.coll_bytes += int64_t(n - 1) * count * int64_t(sizeof(float));
}

namespace {
template <class T>
void all_reduce_chunked(T* buf, int64_t count, MPI_Datatype type, MPI_Comm comm, int wrank) {
  for (int64_t off = 0; off < count; off += kMaxCount) {
    const int c = int(std::min(kMaxCount, count - off));
    check(MPI_Allreduce(MPI_IN_PLACE, buf + off, c, type, MPI_SUM, comm), "MPI_Allreduce", wrank);
  }
}
}  // namespace

void Communicator::all_reduce_sum(float* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_FLOAT, impl_->comm, impl_->wrank);
  const int64_t n = size();
  impl_->counters.coll_bytes += 2 * (n - 1) * count * int64_t(sizeof(float)) / n;
}

void Communicator::all_reduce_sum(double* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_DOUBLE, impl_->comm, impl_->wrank);
  const int64_t n = size();
  impl_->counters.coll_bytes += 2 * (n - 1) * count * int64_t(sizeof(double)) / n;
}

void Communicator::all_to_all(const float* send, float* recv, int64_t count_per_rank) {
  impl_->all_to_all(send, recv, count_per_rank);
  impl_->counters.coll_bytes += int64_t(size() - 1) * count_per_rank * int64_t(sizeof(float));
}

void Communicator::barrier() { check(MPI_Barrier(impl_->comm), "MPI_Barrier", impl_->wrank); }

void Communicator::reduce_scatter_lse(const float* o_send, const float* lse_send, float* o_recv,
                                      float* lse_recv, int batch, int64_t rows, int heads,
                                      int head_dim) {
  const int n = size();
  const int64_t o_block = int64_t(batch) * rows * heads * head_dim;
  const int64_t l_block = int64_t(batch) * heads * rows;
  // Gather every rank's partial of my block, then merge them in rank order.
  std::vector<float> o_got(size_t(n) * o_block), l_got(size_t(n) * l_block);
  impl_->all_to_all(o_send, o_got.data(), o_block);
  impl_->all_to_all(lse_send, l_got.data(), l_block);
  std::memcpy(o_recv, o_got.data(), o_block * sizeof(float));
  std::memcpy(lse_recv, l_got.data(), l_block * sizeof(float));
  const int64_t o_row = int64_t(heads) * head_dim;
  for (int j = 1; j < n; ++j) {
    const float* o2 = o_got.data() + int64_t(j) * o_block;
    const float* l2 = l_got.data() + int64_t(j) * l_block;
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        const int64_t oo = int64_t(b) * rows * o_row + int64_t(h) * head_dim;
        const int64_t lo = (int64_t(b) * heads + h) * rows;
        kernels::lse_merge_rows(int(rows), head_dim, o_recv + oo, o_row, lse_recv + lo, 1, o2 + oo,
                                o_row, l2 + lo, 1);
      }
    }
  }
  impl_->counters.coll_bytes += int64_t(n - 1) * (o_block + l_block) * int64_t(sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// MpiSession

MpiSession::MpiSession(int* argc, char*** argv) {
  int init = 0;
  MPI_Initialized(&init);
  WF_CHECK(!init, "MPI is already initialised: create one comm::MpiSession per process");
  // More ranks on this machine than cores (mpirun --oversubscribe): a rank that waits for a message
  // gives its core away instead of spinning on it, so that the rank it waits for can run. OpenMPI
  // reads the setting in MPI_Init; one given by the user is kept.
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local_size && std::atol(local_size) > long(std::thread::hardware_concurrency()))
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) fail(rc, "MPI_Init_thread", -1, kNoPeer);
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
        world_rank());
}

MpiSession::~MpiSession() {
  if (mpi_alive()) MPI_Finalize();
}

}  // namespace wallfacer::comm
