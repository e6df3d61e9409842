// The MPI profiling-interface layer of mpi_bytes.h: each MPI function below tallies its buffers and
// calls its PMPI_ twin.

#include "mpi_bytes.h"

#include <mpi.h>

namespace mpi_bytes {
namespace {

Tally& mutable_tally() {
  static Tally t;
  return t;
}

int64_t type_bytes(MPI_Datatype type, int64_t count) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return count * size;
}

int group_size(MPI_Comm comm) {
  int n = 1;
  PMPI_Comm_size(comm, &n);
  return n;
}

int group_rank(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}

// World rank of rank `r` of `comm` (-1 for MPI_ANY_SOURCE).
int world_rank(MPI_Comm comm, int r) {
  if (r < 0) return -1;
  if (comm == MPI_COMM_WORLD) return r;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  PMPI_Comm_group(comm, &group);
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  int w = -1;
  PMPI_Group_translate_ranks(group, 1, &r, world, &w);
  PMPI_Group_free(&group);
  PMPI_Group_free(&world);
  return w;
}

void add(const Key& key, int64_t bytes) {
  Count& c = mutable_tally()[key];
  c.calls += 1;
  c.bytes += bytes;
}

void point_to_point(Kind kind, MPI_Datatype type, int count, int peer, int tag, MPI_Comm comm) {
  if (peer == MPI_PROC_NULL) return;
  add({kind, group_size(comm), world_rank(comm, peer), tag}, type_bytes(type, count));
}

void collective(Kind kind, MPI_Comm comm, int64_t bytes, int root = -1) {
  add({kind, group_size(comm), root < 0 ? -1 : world_rank(comm, root), 0}, bytes);
}

int64_t total(const int counts[], int n) {
  int64_t s = 0;
  for (int i = 0; i < n; ++i) s += counts[i];
  return s;
}

}  // namespace

const Tally& tally() { return mutable_tally(); }

Tally since(const Tally& before) {
  Tally out;
  for (const auto& [k, v] : tally()) {
    Count c = v;
    if (auto it = before.find(k); it != before.end()) {
      c.calls -= it->second.calls;
      c.bytes -= it->second.bytes;
    }
    if (c.calls != 0 || c.bytes != 0) out[k] = c;
  }
  return out;
}

}  // namespace mpi_bytes

using mpi_bytes::Kind;

extern "C" {

// ---- point-to-point

// The sends: blocking (MPI_Send, MPI_Ssend, MPI_Rsend, MPI_Bsend) and non-blocking (MPI_Isend,
// MPI_Issend), each counted and passed on to its PMPI_ twin.
#define MPI_BYTES_SEND(NAME)                                                       \
  int MPI_##NAME(const void* buf, int count, MPI_Datatype type, int dest, int tag, \
                 MPI_Comm comm) {                                                  \
    mpi_bytes::point_to_point(Kind::Send, type, count, dest, tag, comm);           \
    return PMPI_##NAME(buf, count, type, dest, tag, comm);                         \
  }
#define MPI_BYTES_ISEND(NAME)                                                                     \
  int MPI_##NAME(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, \
                 MPI_Request* request) {                                                          \
    mpi_bytes::point_to_point(Kind::Send, type, count, dest, tag, comm);                          \
    return PMPI_##NAME(buf, count, type, dest, tag, comm, request);                               \
  }
MPI_BYTES_SEND(Send)
MPI_BYTES_SEND(Ssend)
MPI_BYTES_SEND(Rsend)
MPI_BYTES_SEND(Bsend)
MPI_BYTES_ISEND(Isend)
MPI_BYTES_ISEND(Issend)
#undef MPI_BYTES_SEND
#undef MPI_BYTES_ISEND

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  mpi_bytes::point_to_point(Kind::Recv, type, count, source, tag, comm);
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  mpi_bytes::point_to_point(Kind::Recv, type, count, source, tag, comm);
  return PMPI_Irecv(buf, count, type, source, tag, comm, request);
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  mpi_bytes::point_to_point(Kind::Send, sendtype, sendcount, dest, sendtag, comm);
  mpi_bytes::point_to_point(Kind::Recv, recvtype, recvcount, source, recvtag, comm);
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                       source, recvtag, comm, status);
}

// ---- collectives

namespace {
// The bytes an all-gather (all-to-all) hands MPI, blocking or not.
int64_t all_gather_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                         MPI_Datatype recvtype) {
  return sendbuf == MPI_IN_PLACE ? mpi_bytes::type_bytes(recvtype, recvcount)
                                 : mpi_bytes::type_bytes(sendtype, sendcount);
}
int64_t all_to_all_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm) {
  const int64_t n = mpi_bytes::group_size(comm);
  return sendbuf == MPI_IN_PLACE ? mpi_bytes::type_bytes(recvtype, n * recvcount)
                                 : mpi_bytes::type_bytes(sendtype, n * sendcount);
}
}  // namespace

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  mpi_bytes::collective(Kind::AllGather, comm,
                        all_gather_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype));
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  mpi_bytes::collective(Kind::AllGather, comm,
                        all_gather_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype));
  return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  const int me = mpi_bytes::group_rank(comm);
  mpi_bytes::collective(Kind::AllGather, comm,
                        sendbuf == MPI_IN_PLACE ? mpi_bytes::type_bytes(recvtype, recvcounts[me])
                                                : mpi_bytes::type_bytes(sendtype, sendcount));
  return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  mpi_bytes::collective(Kind::AllToAll, comm,
                        all_to_all_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype, comm));
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  mpi_bytes::collective(Kind::AllToAll, comm,
                        all_to_all_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype, comm));
  return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = mpi_bytes::group_size(comm);
  mpi_bytes::collective(Kind::AllToAll, comm,
                        sendbuf == MPI_IN_PLACE
                            ? mpi_bytes::type_bytes(recvtype, mpi_bytes::total(recvcounts, n))
                            : mpi_bytes::type_bytes(sendtype, mpi_bytes::total(sendcounts, n)));
  return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm);
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  mpi_bytes::collective(Kind::AllReduce, comm, mpi_bytes::type_bytes(type, count));
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  mpi_bytes::collective(Kind::AllReduce, comm, mpi_bytes::type_bytes(type, count));
  return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                       MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const int n = mpi_bytes::group_size(comm);
  mpi_bytes::collective(Kind::ReduceScatter, comm,
                        mpi_bytes::type_bytes(type, mpi_bytes::total(recvcounts, n)));
  return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                             MPI_Op op, MPI_Comm comm) {
  const int64_t n = mpi_bytes::group_size(comm);
  mpi_bytes::collective(Kind::ReduceScatter, comm, mpi_bytes::type_bytes(type, n * recvcount));
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const bool is_root = mpi_bytes::group_rank(comm) == root;
  mpi_bytes::collective(Kind::Bcast, comm, is_root ? mpi_bytes::type_bytes(type, count) : 0, root);
  return PMPI_Bcast(buffer, count, type, root, comm);
}

int MPI_Barrier(MPI_Comm comm) {
  mpi_bytes::collective(Kind::Barrier, comm, 0);
  return PMPI_Barrier(comm);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  mpi_bytes::collective(Kind::Barrier, comm, 0);
  return PMPI_Ibarrier(comm, request);
}

}  // extern "C"
