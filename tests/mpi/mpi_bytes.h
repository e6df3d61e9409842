#pragma once
// Bytes counted where they leave the program. Linking mpi_bytes.cpp into a test binary puts a layer
// of the MPI profiling interface between the program and MPI: it defines the MPI functions that
// comm::Communicator calls (sends, receives, collectives), tallies what each call hands to MPI and
// passes the call on to its PMPI_ twin. Nothing in the library sees the layer; the tally is what
// MPI was asked to move, whatever the library's own counters say.
//
// Bytes are count x type size of the buffers as given to MPI:
//   Send           each send (MPI_Isend, MPI_Send, MPI_Ssend, MPI_Issend, MPI_Rsend, MPI_Bsend, the
//                  send half of MPI_Sendrecv): its message
//   Recv           each receive posted (MPI_Irecv, MPI_Recv, the receive half of MPI_Sendrecv): its
//                  buffer
//   AllGather      MPI_Allgather(v): the rank's own block (what MPI copies to every other rank)
//   AllToAll       MPI_Alltoall(v): the whole send buffer, the block for the rank itself included
//   AllReduce      MPI_Allreduce, MPI_Iallreduce: the buffer
//   ReduceScatter  MPI_Reduce_scatter(_block): the whole send buffer
//   Bcast          MPI_Bcast: the buffer on the root, 0 on the others
//   Barrier        MPI_Barrier, MPI_Ibarrier: calls only
// Point-to-point records name the peer by its rank in MPI_COMM_WORLD and keep the tag.
//
// Only the thread that calls MPI may read the tally (the Communicator runs MPI_THREAD_FUNNELED).

#include <compare>
#include <cstdint>
#include <map>

namespace mpi_bytes {

enum class Kind { Send, Recv, AllGather, AllToAll, AllReduce, ReduceScatter, Bcast, Barrier };

struct Key {
  Kind kind = Kind::Send;
  int group_size = 1;  // ranks of the call's communicator
  int peer = -1;       // Send, Recv: the peer's world rank; Bcast: the root's; otherwise -1
  int tag = 0;         // Send, Recv: the tag; otherwise 0
  auto operator<=>(const Key&) const = default;
};

struct Count {
  int64_t calls = 0;
  int64_t bytes = 0;
  Count& operator+=(const Count& o) {
    calls += o.calls;
    bytes += o.bytes;
    return *this;
  }
  bool operator==(const Count&) const = default;
};

using Tally = std::map<Key, Count>;

// Everything this process handed to MPI since it started.
const Tally& tally();

// What was handed to MPI after `before` (a copy of tally() taken earlier); empty counts dropped.
Tally since(const Tally& before);

// Sums over the records of `t` that `pick` accepts.
template <class Pick>
Count sum(const Tally& t, Pick&& pick) {
  Count c;
  for (const auto& [k, v] : t)
    if (pick(k)) c += v;
  return c;
}

}  // namespace mpi_bytes
