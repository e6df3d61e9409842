#pragma once
// Thread counts: OpenMP follows OMP_NUM_THREADS, else the cores available to this process shared
// by the job's ranks on this machine. OpenBLAS is kept single-threaded inside our own parallel
// regions.

namespace wallfacer {

// The ranks of this job on this machine, as the launcher says (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); 1 outside a launcher.
int local_ranks();

// Threads our kernels use: OMP_NUM_THREADS if set, else the CPUs in this process's affinity mask
// divided among local_ranks() (at least 1): 8 ranks on 2 cores run one thread each instead of
// 16 threads spinning at each other's barriers.
int num_threads();

// At start-up: when the environment names no thread count, OpenMP's parallel regions and
// OpenBLAS use num_threads() (without it both would take every core in each rank).
void apply_thread_defaults();

// Sets the threads OpenBLAS uses for calls made outside our parallel regions.
void set_blas_threads(int n);

// The OpenBLAS kernel in use (e.g. "Haswell"), as OpenBLAS reports it.
const char* blas_core_name();

// RAII: run OpenBLAS with one thread while our OpenMP threads call it concurrently.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};

}  // namespace wallfacer
