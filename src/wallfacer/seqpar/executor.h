#pragma once
// Runs a Schedule with real MPI (comm::Communicator) and the flash-attention kernels. Scratch
// buffers are allocated once; transfers are posted before the compute that hides them, and the
// executor drives MPI progress between kernel sub-blocks so that they move while the kernel runs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {

// The caller's tensors, indexed by UserBuffer (inputs are never written), each of the element type
// its BufferSpec gives (float or bf16).
using UserTensors = std::array<void*, kNumUserBuffers>;

// n elements from src (of type `from`) to dst (of type `to`): copied, or converted (fp32 -> bf16
// rounds to nearest even, bf16 -> fp32 is exact).
void copy_elements(const void* src, Dtype from, void* dst, Dtype to, int64_t n);

// The Dtype of element type T (float or bf16).
template <class T>
constexpr Dtype dtype_of() {
  return std::is_same_v<T, bf16> ? Dtype::bf16 : Dtype::fp32;
}

struct PhaseStats {
  // coll_bytes, coll_formula_bytes: comm::ByteCounters' two counts of the collectives.
  int64_t p2p_bytes = 0, p2p_sends = 0, p2p_steps = 0, coll_bytes = 0, coll_formula_bytes = 0;
  double ms = 0;          // wall time of the phase
  double exposed_ms = 0;  // time blocked on transfers and collectives
  double flops = 0;       // attention FLOPs run
};

class Executor {
 public:
  // `group`: the schedule's World group. Collective over `group`: splits it into the schedule's
  // Team group and, for a Ulysses x WallFacer hybrid, its InnerTeam group (group_ranks).
  Executor(Schedule schedule, comm::Communicator group);

  // `ops` is the schedule's fwd or bwd. Buffers marked `kept` get a fresh copy at each forward;
  // each backward reads the newest copy not yet used and frees it (last in, first out).
  PhaseStats run(const std::vector<Op>& ops, const UserTensors& user);

  // Forwards whose kept buffers wait for their backward.
  int pending_backwards() const { return int(kept_.size()); }

  const Schedule& schedule() const { return s_; }

  // The bytes an executor of `s` gives buffer `buf` of its own: whole floats of the buffer's size;
  // 0 for the caller's tensors and an alias. A kept buffer gets them once per forward awaiting its
  // backward, the others once, when the executor is built.
  static int64_t own_bytes(const Schedule& s, int buf);
  // The bytes of the scratch buffers this executor allocated when built (not the kept copies).
  int64_t scratch_bytes() const;

  // Runs `s` from now on: the same config but for its documents, so the same buffers (Error
  // otherwise, and while a forward awaits its backward).
  void replace_schedule(Schedule s);

  // Rows per kernel call while transfers are pending (more calls = more MPI progress); 0: whole
  // blocks. The default is two of the kernels' 128-row query tiles: smaller calls cut the tiles and
  // slow the backward kernel (about 1.3x at 64 rows).
  void set_progress_rows(int64_t rows) { progress_rows_ = rows; }

 private:
  // Block `block` of buffer `buf`; f32 / b16 check the buffer's element type.
  std::byte* ptr(int buf, int block = 0);
  float* f32(int buf, int block = 0);
  bf16* b16(int buf, int block = 0);
  int64_t buffer_bytes(int buf) const;
  void local(const Op& op);
  void compute(const Op& op, std::vector<comm::Request>& reqs);
  void collective(const Op& op);
  // Tests every request (MPI progress); true while any is pending.
  bool poll(std::vector<comm::Request>& reqs);
  // Tracing (core/trace.h), active only while trace::on() at the start of run().
  void begin_trace(const std::vector<Op>& ops);
  void trace_op(int i, int64_t start_ns);
  void note_done(size_t i);
  void end_trace();

  comm::Communicator& comm_of(Group g);

  Schedule s_;
  comm::Communicator group_, team_, inner_;  // inner_: only with Schedule::inner_team_ranks > 1
  std::vector<std::vector<float>> scratch_;            // sized in bytes, rounded up to whole floats
  std::vector<int> kept_ids_;                          // buffers marked kept
  std::vector<std::vector<std::vector<float>>> kept_;  // per pending forward: one per kept id
  std::vector<std::vector<std::vector<float>>> spare_;  // freed copies, reused
  UserTensors user_{};
  int64_t progress_rows_ = 256;
  const std::vector<Op>* traced_ops_ = nullptr;
  std::vector<int64_t> posted_ns_;  // per op: when its transfer was posted (-1: none pending)
  const char* phase_name_ = "forward";
  std::vector<int> world_rank_;  // of each rank of group_ (trace spans name peers by world rank)
  std::vector<int32_t> doc_of_pos_;  // the kernels' document of each position; empty: none
};

}  // namespace wallfacer::seqpar
