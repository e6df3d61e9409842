#pragma once
// Thread counts: OpenMP follows OMP_NUM_THREADS, else the cores available to this process.
// OpenBLAS is kept single-threaded inside our own parallel regions.

namespace wallfacer {

// Threads our kernels use: OMP_NUM_THREADS if set, else the CPUs in this process's affinity mask.
int num_threads();

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
