#include "wallfacer/comm/communicator.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "wallfacer/comm/mpi_comm.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"

namespace wallfacer::comm {
namespace {

// Largest element count passed to one MPI call (MPI counts are int).
constexpr int64_t kMaxCount = int64_t(1) << 30;

// The MPI type of an element type (bf16 travels as its 16 bits).
template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<bf16>() {
  return MPI_UINT16_T;
}

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

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
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

// ---------------------------------------------------------------------------------------------
// Process-wide fault state: the watchdog and the communicator errors are agreed on.

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// $WALLFACER_WAIT_POLL_US > 0: a rank waiting for transfers tests them every that many
// microseconds and sleeps in between instead of spinning in MPI_Waitall (and the collectives run
// as their nonblocking forms, waited on the same way: `collective` below), so that a waiting rank
// leaves its CPU share unused, as a device waiting for its network would (scripts/cpu-per-rank
// sets it for ranks capped at a fraction of a core: a spinning rank spends its share and is
// throttled when its message arrives). 0 or unset: MPI_Waitall.
int64_t wait_poll_us() {
  static const int64_t us = [] {
    const char* v = std::getenv("WALLFACER_WAIT_POLL_US");
    if (!v || !*v) return int64_t(0);
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    return end && *end == 0 && x > 0 ? int64_t(std::min<long long>(x, 1000000)) : int64_t(0);
  }();
  return us;
}

// MPI_Waitall, or the polling wait of wait_poll_us(); the MPI return code.
int wait_all(std::vector<MPI_Request>& reqs) {
  const int64_t us = wait_poll_us();
  if (us == 0) return MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
}

// A collective over `ranks` ranks: blocking (`blocking`), or with wait_poll_us() > 0 and more than
// one rank its nonblocking form (`start`, which posts it into a request) completed by the polling
// wait, so that a rank waiting in a collective sleeps as it does waiting for its transfers (one
// rank waits for no one). The MPI return code.
template <class Blocking, class Start>
int collective(int ranks, Blocking blocking, Start start) {
  if (wait_poll_us() == 0 || ranks == 1) return blocking();
  std::vector<MPI_Request> req(1);
  const int rc = start(&req[0]);
  return rc != MPI_SUCCESS ? rc : wait_all(req);
}

struct Faults {
  std::atomic<double> timeout_s{600.0};
  // The wait in progress: its start (0: none), what it is, the peer's world rank and its own
  // limit (0: timeout_s).
  std::atomic<int64_t> since_ns{0};
  std::atomic<const char*> op{""};
  std::atomic<int> peer{kNoPeer};
  std::atomic<const std::string*> group{nullptr};  // the collective's ranks, when not a peer
  std::atomic<double> limit_s{0.0};
  std::mutex mu;  // guards phase, stop
  std::condition_variable cv;
  std::string phase;
  bool stop = false;
  std::thread watchdog;
  MPI_Comm err_comm = MPI_COMM_NULL;  // a duplicate of the world for agreeing on errors

  ~Faults() { stop_watchdog(); }
  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  }
};

Faults& faults() {
  static Faults f;
  return f;
}

// Marks a blocking MPI call for the watchdog while it runs.
class Watch {
 public:
  Watch(const char* op, int peer, double limit_s = 0, const std::string* group = nullptr) {
    Faults& f = faults();
    f.op = op;
    f.peer = peer;
    f.group = group;
    f.limit_s = limit_s;
    f.since_ns = now_ns();
  }
  ~Watch() { faults().since_ns = 0; }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
};

// Checks the wait in progress a few times a second; aborts the job when it is overdue.
void watchdog_loop() {
  Faults& f = faults();
  std::unique_lock<std::mutex> lk(f.mu);
  int64_t last = now_ns(), awake_since = last;
  while (!f.stop) {
    f.cv.wait_for(lk, std::chrono::milliseconds(200));
    if (f.stop) break;
    // A gap of seconds between checks: this process itself was stopped (SIGSTOP, a suspended
    // machine); its waits count from now, not from before.
    const int64_t now = now_ns();
    if (now - last > int64_t(2e9)) awake_since = now;
    last = now;
    const int64_t since = std::max<int64_t>(f.since_ns, awake_since);
    const double limit = f.limit_s > 0 ? f.limit_s.load() : f.timeout_s.load();
    if (f.since_ns == 0 || limit <= 0) continue;
    const double waited = double(now - since) * 1e-9;
    if (waited < limit) continue;
    const int peer = f.peer;
    const std::string* group = f.group;
    std::string with, who = "another rank";
    if (peer != kNoPeer) {
      with = fmt::format(" with rank {}", peer);
      who = fmt::format("rank {}", peer);
    } else if (group) {
      with = fmt::format(" among ranks {}", *group);
      who = "one of them";
    }
    const std::string during = f.phase.empty() ? "" : fmt::format(" during {}", f.phase);
    std::fprintf(
        stderr,
        "wallfacer: error: rank %d: %s%s made no progress for %.0f s%s: %s is stuck or "
        "gone (raise --timeout, train.timeout or comm::set_timeout if the work is only slow)\n",
        world_rank(), f.op.load(), with.c_str(), waited, during.c_str(), who.c_str());
    std::fflush(stderr);
    // MPI_Abort from this thread ends every rank; the main thread is inside MPI and cannot.
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }
}

}  // namespace

std::string mark_launched() {
  const char* dir = std::getenv("WALLFACER_LAUNCH_MARKERS");
  if (dir == nullptr || *dir == '\0') return "";
  const std::string path = fmt::format("{}/{}", dir, getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fmt::format(
        "cannot create '{}' ({}): WALLFACER_LAUNCH_MARKERS must name a writable "
        "folder, or be unset",
        path, std::strerror(errno));
  }
  ::close(fd);
  return "";
}

namespace {

// Starts the watchdog thread unless it runs.
void start_watchdog() {
  Faults& f = faults();
  std::lock_guard<std::mutex> lk(f.mu);
  if (f.watchdog.joinable()) return;
  f.stop = false;
  f.watchdog = std::thread(watchdog_loop);
}

// MPI_Init_thread, errors returned instead of fatal, the error communicator and the watchdog.
void start_mpi(int* argc, char*** argv) {
  // More ranks on this machine than cores (mpirun --oversubscribe): a rank that waits for a message
  // gives its core away instead of spinning on it, so that the rank it waits for can run. OpenMPI
  // reads the setting in MPI_Init; one given by the user is kept.
  if (local_ranks() > int(std::thread::hardware_concurrency()))
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  // The machine's cores shared by its ranks: OpenMP and OpenBLAS threads per rank (unless set).
  apply_thread_defaults();
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) fail(rc, "MPI_Init_thread", -1, kNoPeer);
  const std::string marker_error = mark_launched();
  WF_CHECK(marker_error.empty(), "{}", marker_error);
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
        world_rank());
  Faults& f = faults();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &f.err_comm), "MPI_Comm_dup", world_rank());
  check(MPI_Comm_set_errhandler(f.err_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
        world_rank());
  start_watchdog();
}

// MPI_Finalize under the watchdog (it waits for every rank), then the watchdog stops.
void finish_mpi() {
  {
    Watch w("MPI_Finalize", kNoPeer, 60);
    Faults& f = faults();
    if (f.err_comm != MPI_COMM_NULL) MPI_Comm_free(&f.err_comm);
    MPI_Finalize();
  }
  faults().stop_watchdog();
}

}  // namespace

void set_timeout(double seconds) { faults().timeout_s = std::max(0.0, seconds); }
double timeout() { return faults().timeout_s; }

void set_phase(const std::string& phase) {
  Faults& f = faults();
  std::lock_guard<std::mutex> lk(f.mu);
  f.phase = phase;
}

int launched_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  }
  return 1;
}

int end_job_with_error(const std::string& prefix, const std::string& message, int code) {
  mark_launched();  // this rank got going: its error is the job's outcome, not a failed launch
  auto print = [&](const std::string& who) {
    std::fprintf(stderr, "%s: error: %s%s\n", prefix.c_str(), who.c_str(), message.c_str());
    std::fflush(stderr);
  };
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin || (!init && launched_size() <= 1)) {
    print("");
    return code;
  }
  if (!init) {
    try {
      start_mpi(nullptr, nullptr);
    } catch (const std::exception& e) {
      print(fmt::format("(and {}) ", e.what()));
      return code;
    }
  }
  Faults& f = faults();
  const int rank = world_rank();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {
    print("");
    finish_mpi();
    return code;
  }
  // Did every rank fail, alike? The others either join within a few seconds or are elsewhere
  // (waiting for this rank in a collective, or still working).
  auto wait_for = [](MPI_Request& rq, double seconds) {
    const int64_t end = now_ns() + int64_t(seconds * 1e9);
    int done = 0;
    while (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done && now_ns() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done != 0;
  };
  const uint64_t h = fnv1a(message) ^ uint64_t(code);
  uint64_t mine[2] = {h, ~h}, most[2] = {0, 0};
  MPI_Request rq = MPI_REQUEST_NULL;
  if (f.err_comm != MPI_COMM_NULL &&
      MPI_Iallreduce(mine, most, 2, MPI_UINT64_T, MPI_MAX, f.err_comm, &rq) == MPI_SUCCESS &&
      wait_for(rq, 3.0)) {
    const bool alike = most[0] == h && most[1] == ~h;
    if (!alike) {
      print(fmt::format("rank {}: ", rank));
    } else if (rank == 0) {
      print("");
    }
    // Nobody leaves before the message is out: mpirun ends the job when the first rank exits.
    if (MPI_Ibarrier(f.err_comm, &rq) == MPI_SUCCESS && wait_for(rq, 10.0)) {
      finish_mpi();
      return code;
    }
  } else {
    print(fmt::format("rank {}: ", rank));
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// ---------------------------------------------------------------------------------------------
// Request

struct Request::Impl {
  std::vector<MPI_Request> reqs;
  int rank = -1;
  int peer = kNoPeer;  // in the world
  const char* op = "MPI_Waitall";
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
  // While an exception unwinds, the transfer is left pending: its peer may never match it, and the
  // job ends (end_job_with_error) without waiting for it.
  if (std::uncaught_exceptions() > 0) return;
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
  Watch w(impl_->op, impl_->peer);
  check(wait_all(reqs), "MPI_Waitall", impl_->rank, impl_->peer);
}

// ---------------------------------------------------------------------------------------------
// Communicator

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
  int rank = 0;
  int size = 1;
  int wrank = 0;              // rank in MPI_COMM_WORLD, for messages
  std::vector<int> world_of;  // world rank of each rank of this group
  ByteCounters counters;

  std::string members;  // the world ranks of this group, for the watchdog's message

  int to_world(int r) const { return world_of.empty() ? r : world_of[size_t(r)]; }
  void describe_members() {
    if (world_of.empty()) {
      members = fmt::format("0..{}", size - 1);
      return;
    }
    for (size_t i = 0; i < world_of.size() && i < 16; ++i)
      members += fmt::format("{}{}", i ? ", " : "", world_of[i]);
    if (world_of.size() > 16) members += fmt::format(", ... ({} ranks)", world_of.size());
  }
  // A watch on a collective of this group.
  const std::string* group() const { return &members; }

  ~Impl() {
    if (owned && comm != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm);
  }

  // Takes `own` (a communicator this object frees): errors returned, rank, size and the world
  // rank of each member. `wrank`: this process's rank in MPI_COMM_WORLD.
  void adopt(MPI_Comm own, int world_rank_of_self) {
    comm = own;
    owned = true;
    wrank = world_rank_of_self;
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", wrank);
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", wrank);
    check(MPI_Comm_size(comm, &size), "MPI_Comm_size", wrank);
    MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm, &group), "MPI_Comm_group", wrank);
    check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group", wrank);
    std::vector<int> mine(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) mine[size_t(r)] = r;
    world_of.resize(mine.size());
    check(MPI_Group_translate_ranks(group, size, mine.data(), world_group, world_of.data()),
          "MPI_Group_translate_ranks", wrank);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    describe_members();
  }

  static Communicator make(std::shared_ptr<Impl> impl) {
    Communicator c;
    c.impl_ = std::move(impl);
    return c;
  }

  // Pairwise exchange: block j of `send` goes to rank j, block i of `recv` comes from rank i
  // (blocks of `count` elements); chunked so that any count works. Used for large counts.
  template <class T>
  void exchange(const T* send, T* recv, int64_t count, const char* what) {
    std::vector<MPI_Request> reqs;
    for (int step = 0; step < size; ++step) {
      const int to = (rank + step) % size, from = (rank - step + size) % size;
      for (int64_t off = 0; off < count; off += kMaxCount) {
        const int c = int(std::min(kMaxCount, count - off));
        reqs.emplace_back();
        check(MPI_Irecv(recv + int64_t(from) * count + off, c, mpi_type<T>(), from, 0x7e11, comm,
                        &reqs.back()),
              "MPI_Irecv", wrank, from);
        reqs.emplace_back();
        check(MPI_Isend(send + int64_t(to) * count + off, c, mpi_type<T>(), to, 0x7e11, comm,
                        &reqs.back()),
              "MPI_Isend", wrank, to);
        if (to != rank) counters.coll_bytes += int64_t(c) * int64_t(sizeof(T));
      }
    }
    Watch w(what, kNoPeer, 0, group());
    check(wait_all(reqs), what, wrank);
  }

  template <class T>
  void all_to_all(const T* send, T* recv, int64_t count) {
    if (count <= INT_MAX) {
      Watch w("MPI_Alltoall", kNoPeer, 0, group());
      const int n = int(count);
      check(collective(
                size,
                [&] { return MPI_Alltoall(send, n, mpi_type<T>(), recv, n, mpi_type<T>(), comm); },
                [&](MPI_Request* r) {
                  return MPI_Ialltoall(send, n, mpi_type<T>(), recv, n, mpi_type<T>(), comm, r);
                }),
            "MPI_Alltoall", wrank);
      counters.coll_bytes += int64_t(size - 1) * count * int64_t(sizeof(T));  // a block
    } else {
      exchange(send, recv, count, "MPI_Waitall (all-to-all)");
    }
  }

  template <class T>
  Request isend(const T* buf, int64_t count, int dest, int tag) {
    WF_CHECK(count >= 0 && dest >= 0 && dest < size, "isend: bad count {} or destination {}", count,
             dest);
    Request r;
    r.impl_ = std::make_unique<Request::Impl>();
    r.impl_->rank = wrank;
    r.impl_->peer = to_world(dest);
    r.impl_->op = "MPI_Waitall on a send";
    for (int64_t off = 0; off < count || off == 0; off += kMaxCount) {
      const int c = int(std::min(kMaxCount, count - off));
      r.impl_->reqs.emplace_back();
      check(MPI_Isend(buf + off, c, mpi_type<T>(), dest, tag, comm, &r.impl_->reqs.back()),
            "MPI_Isend", wrank, dest);
      if (count == 0) break;
    }
    counters.p2p_bytes += count * int64_t(sizeof(T));
    counters.p2p_sends += 1;
    return r;
  }

  template <class T>
  Request irecv(T* buf, int64_t count, int src, int tag) {
    WF_CHECK(count >= 0 && src >= 0 && src < size, "irecv: bad count {} or source {}", count, src);
    Request r;
    r.impl_ = std::make_unique<Request::Impl>();
    r.impl_->rank = wrank;
    r.impl_->peer = to_world(src);
    r.impl_->op = "MPI_Waitall on a receive";
    for (int64_t off = 0; off < count || off == 0; off += kMaxCount) {
      const int c = int(std::min(kMaxCount, count - off));
      r.impl_->reqs.emplace_back();
      check(MPI_Irecv(buf + off, c, mpi_type<T>(), src, tag, comm, &r.impl_->reqs.back()),
            "MPI_Irecv", wrank, src);
      if (count == 0) break;
    }
    return r;
  }

  template <class T>
  void all_gather(const T* send, int64_t count, T* recv) {
    T* own = recv + int64_t(rank) * count;
    if (count <= INT_MAX) {
      const void* src = send == own ? MPI_IN_PLACE : static_cast<const void*>(send);
      Watch w("MPI_Allgather", kNoPeer, 0, group());
      const int n = int(count);
      check(collective(
                size,
                [&] { return MPI_Allgather(src, n, mpi_type<T>(), recv, n, mpi_type<T>(), comm); },
                [&](MPI_Request* r) {
                  return MPI_Iallgather(src, n, mpi_type<T>(), recv, n, mpi_type<T>(), comm, r);
                }),
            "MPI_Allgather", wrank);
      counters.coll_bytes += int64_t(size - 1) * count * int64_t(sizeof(T));  // its block
    } else {
      // Every rank sends its block to every rank: an exchange with the block replicated.
      std::vector<T> rep(size_t(size) * size_t(count));
      for (int j = 0; j < size; ++j)
        std::memcpy(rep.data() + int64_t(j) * count, send, size_t(count) * sizeof(T));
      exchange(rep.data(), recv, count, "MPI_Waitall (all-gather)");
    }
    counters.coll_formula_bytes += int64_t(size - 1) * count * int64_t(sizeof(T));
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
  c.impl_->describe_members();
  return c;
}

Communicator from_mpi_comm(MPI_Comm comm) {
  WF_USAGE_CHECK(mpi_alive(),
                 "comm::from_mpi_comm: MPI is not running; call MPI_Init (or MPI_Init_thread) "
                 "first, and MPI_Finalize only after every wallfacer object is destroyed");
  WF_USAGE_CHECK(comm != MPI_COMM_NULL,
                 "comm::from_mpi_comm: the communicator is MPI_COMM_NULL; pass one this rank "
                 "belongs to (e.g. MPI_COMM_WORLD or a duplicate of it)");
  const int wrank = world_rank();
  int inter = 0;
  check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter", wrank);
  WF_USAGE_CHECK(!inter,
                 "comm::from_mpi_comm: an intercommunicator has two groups; pass an "
                 "intracommunicator (e.g. from MPI_Intercomm_merge)");
  MPI_Comm own = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm, &own), "MPI_Comm_dup", wrank);
  auto impl = std::make_shared<Communicator::Impl>();
  impl->adopt(own, wrank);
  start_watchdog();
  mark_launched();  // the host's MPI started this rank (tests/mpirun.sh)
  return Communicator::Impl::make(std::move(impl));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
ByteCounters& Communicator::counters() { return impl_->counters; }
const ByteCounters& Communicator::counters() const { return impl_->counters; }

Communicator Communicator::split(int color, int key) const {
  MPI_Comm comm = MPI_COMM_NULL;
  {
    Watch w("MPI_Comm_split", kNoPeer, 0, impl_->group());
    check(MPI_Comm_split(impl_->comm, color, key, &comm), "MPI_Comm_split", impl_->wrank);
  }
  auto impl = std::make_shared<Impl>();
  impl->adopt(comm, impl_->wrank);
  return Impl::make(std::move(impl));
}

Request Communicator::isend(const float* buf, int64_t count, int dest, int tag) {
  return impl_->isend(buf, count, dest, tag);
}

Request Communicator::irecv(float* buf, int64_t count, int src, int tag) {
  return impl_->irecv(buf, count, src, tag);
}

Request Communicator::isend(const bf16* buf, int64_t count, int dest, int tag) {
  return impl_->isend(buf, count, dest, tag);
}

Request Communicator::irecv(bf16* buf, int64_t count, int src, int tag) {
  return impl_->irecv(buf, count, src, tag);
}

void Communicator::all_gather(const float* send, int64_t count, float* recv) {
  impl_->all_gather(send, count, recv);
}

void Communicator::all_gather(const bf16* send, int64_t count, bf16* recv) {
  impl_->all_gather(send, count, recv);
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
  impl_->counters.coll_formula_bytes += int64_t(n - 1) * count * int64_t(sizeof(float));
}

namespace {
// Counts the buffer once for every other rank (each result needs all of it); the ring formula
// 2(n-1)/n of it.
template <class T>
void all_reduce_chunked(T* buf, int64_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                        int wrank, const std::string* group, int n, ByteCounters& counters) {
  for (int64_t off = 0; off < count; off += kMaxCount) {
    const int c = int(std::min(kMaxCount, count - off));
    Watch w("MPI_Allreduce", kNoPeer, 0, group);
    check(collective(
              n, [&] { return MPI_Allreduce(MPI_IN_PLACE, buf + off, c, type, op, comm); },
              [&](MPI_Request* r) {
                return MPI_Iallreduce(MPI_IN_PLACE, buf + off, c, type, op, comm, r);
              }),
          "MPI_Allreduce", wrank);
    counters.coll_bytes += int64_t(n - 1) * c * int64_t(sizeof(T));
  }
  counters.coll_formula_bytes += 2 * int64_t(n - 1) * count * int64_t(sizeof(T)) / n;
}
}  // namespace

void Communicator::all_reduce_sum(float* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_FLOAT, MPI_SUM, impl_->comm, impl_->wrank, impl_->group(),
                     size(), impl_->counters);
}

void Communicator::all_reduce_sum(double* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_DOUBLE, MPI_SUM, impl_->comm, impl_->wrank, impl_->group(),
                     size(), impl_->counters);
}

void Communicator::all_reduce_max(uint64_t* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_UINT64_T, MPI_MAX, impl_->comm, impl_->wrank, impl_->group(),
                     size(), impl_->counters);
}

void Communicator::all_reduce_max(double* buf, int64_t count) {
  all_reduce_chunked(buf, count, MPI_DOUBLE, MPI_MAX, impl_->comm, impl_->wrank, impl_->group(),
                     size(), impl_->counters);
}

void Communicator::all_to_all(const float* send, float* recv, int64_t count_per_rank) {
  impl_->all_to_all(send, recv, count_per_rank);
  impl_->counters.coll_formula_bytes +=
      int64_t(size() - 1) * count_per_rank * int64_t(sizeof(float));
}

void Communicator::all_to_all(const bf16* send, bf16* recv, int64_t count_per_rank) {
  impl_->all_to_all(send, recv, count_per_rank);
  impl_->counters.coll_formula_bytes +=
      int64_t(size() - 1) * count_per_rank * int64_t(sizeof(bf16));
}

void Communicator::agree(const std::function<void()>& f) {
  std::string message;
  int code = 0;  // 0: fine, 1: Error, 2: UsageError
  try {
    f();
  } catch (const UsageError& e) {
    message = e.what(), code = 2;
  } catch (const std::exception& e) {
    message = e.what(), code = 1;
  }
  // {lowest failing rank, ranks failed, -(ranks failed alike with the lowest)}: two reductions.
  const int me = rank(), n = size();
  int lowest = code ? me : n;
  {
    Watch w("MPI_Allreduce", kNoPeer, 0, impl_->group());
    check(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, impl_->comm), "MPI_Allreduce",
          impl_->wrank);
  }
  if (lowest == n) return;
  int64_t len = int64_t(message.size()) * 4 + code;
  {
    Watch w("MPI_Bcast", impl_->to_world(lowest));
    check(MPI_Bcast(&len, 1, MPI_INT64_T, lowest, impl_->comm), "MPI_Bcast", impl_->wrank,
          impl_->to_world(lowest));
  }
  const int first_code = int(len % 4);
  std::string first = message;
  first.resize(size_t(len / 4));
  {
    Watch w("MPI_Bcast", impl_->to_world(lowest));
    check(MPI_Bcast(first.data(), int(first.size()), MPI_CHAR, lowest, impl_->comm), "MPI_Bcast",
          impl_->wrank, impl_->to_world(lowest));
  }
  int alike = code == first_code && message == first ? 1 : 0;
  {
    Watch w("MPI_Allreduce", kNoPeer, 0, impl_->group());
    check(MPI_Allreduce(MPI_IN_PLACE, &alike, 1, MPI_INT, MPI_MIN, impl_->comm), "MPI_Allreduce",
          impl_->wrank);
  }
  const std::string text =
      alike ? first : fmt::format("rank {}: {}", impl_->to_world(lowest), first);
  if (first_code == 2) throw UsageError(text);
  throw Error(text);
}

void Communicator::barrier() {
  Watch w("MPI_Barrier", kNoPeer, 0, impl_->group());
  MPI_Comm comm = impl_->comm;
  check(collective(
            size(), [&] { return MPI_Barrier(comm); },
            [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); }),
        "MPI_Barrier", impl_->wrank);
}

namespace {

// Merges n partial (O, LSE) blocks, block j at o_got + j * o_block and l_got + j * l_block, in
// block order into o (B, rows, H, D) and lse (B, H, rows), which start as block 0.
void merge_partials(int n, const float* o_got, const float* l_got, float* o, float* lse, int batch,
                    int64_t rows, int heads, int head_dim, Communicator::LseMergeRows merge) {
  WF_CHECK(merge != nullptr, "reduce_scatter_lse needs an LSE combine");
  const int64_t o_block = int64_t(batch) * rows * heads * head_dim;
  const int64_t l_block = int64_t(batch) * heads * rows;
  std::memcpy(o, o_got, o_block * sizeof(float));
  std::memcpy(lse, l_got, l_block * sizeof(float));
  const int64_t o_row = int64_t(heads) * head_dim;
  for (int j = 1; j < n; ++j) {
    const float* o2 = o_got + int64_t(j) * o_block;
    const float* l2 = l_got + int64_t(j) * l_block;
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        const int64_t oo = int64_t(b) * rows * o_row + int64_t(h) * head_dim;
        const int64_t lo = (int64_t(b) * heads + h) * rows;
        merge(int(rows), head_dim, o + oo, o_row, lse + lo, 1, o2 + oo, o_row, l2 + lo, 1);
      }
    }
  }
}

}  // namespace

void Communicator::reduce_scatter_lse(const float* o_send, const float* lse_send, float* o_recv,
                                      float* lse_recv, int batch, int64_t rows, int heads,
                                      int head_dim, LseMergeRows merge) {
  const int n = size();
  const int64_t o_block = int64_t(batch) * rows * heads * head_dim;
  const int64_t l_block = int64_t(batch) * heads * rows;
  // Gather every rank's partial of my block, then merge them in rank order.
  std::vector<float> o_got(size_t(n) * o_block), l_got(size_t(n) * l_block);
  impl_->all_to_all(o_send, o_got.data(), o_block);
  impl_->all_to_all(lse_send, l_got.data(), l_block);
  merge_partials(n, o_got.data(), l_got.data(), o_recv, lse_recv, batch, rows, heads, head_dim,
                 merge);
  impl_->counters.coll_formula_bytes +=
      int64_t(n - 1) * (o_block + l_block) * int64_t(sizeof(float));
}

void Communicator::reduce_scatter_lse(const bf16* o_send, const float* lse_send, bf16* o_recv,
                                      float* lse_recv, int batch, int64_t rows, int heads,
                                      int head_dim, LseMergeRows merge) {
  const int n = size();
  const int64_t o_block = int64_t(batch) * rows * heads * head_dim;
  const int64_t l_block = int64_t(batch) * heads * rows;
  std::vector<bf16> o_wire(size_t(n) * o_block);
  std::vector<float> o_got(o_wire.size()), l_got(size_t(n) * l_block),
      o(static_cast<size_t>(o_block));
  impl_->all_to_all(o_send, o_wire.data(), o_block);
  impl_->all_to_all(lse_send, l_got.data(), l_block);
  bf16_to_fp32(o_wire.data(), o_got.data(), int64_t(o_wire.size()));
  merge_partials(n, o_got.data(), l_got.data(), o.data(), lse_recv, batch, rows, heads, head_dim,
                 merge);
  fp32_to_bf16(o.data(), o_recv, o_block);
  impl_->counters.coll_formula_bytes +=
      int64_t(n - 1) * (o_block * int64_t(sizeof(bf16)) + l_block * int64_t(sizeof(float)));
}

// ---------------------------------------------------------------------------------------------
// MpiSession

MpiSession::MpiSession(int* argc, char*** argv) {
  int init = 0;
  MPI_Initialized(&init);
  WF_CHECK(!init, "MPI is already initialised: create one comm::MpiSession per process");
  start_mpi(argc, argv);
}

MpiSession::~MpiSession() {
  if (std::uncaught_exceptions() > 0) return;  // end_job_with_error takes over
  if (mpi_alive()) finish_mpi();
}

}  // namespace wallfacer::comm
