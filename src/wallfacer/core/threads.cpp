#include "wallfacer/core/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>

namespace wallfacer {

namespace {
int positive_env(const char* name) {
  const char* env = std::getenv(name);
  return env && std::atoi(env) > 0 ? std::atoi(env) : 0;
}
}  // namespace

int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const int n = positive_env(name)) return n;
  return 1;
}

int num_threads() {
  if (const int n = positive_env("OMP_NUM_THREADS")) return n;
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = omp_get_num_procs();
  return std::max(1, cpus / local_ranks());
}

void apply_thread_defaults() {
  if (positive_env("OMP_NUM_THREADS")) return;  // OpenMP and OpenBLAS both read it
  omp_set_num_threads(num_threads());
  if (!positive_env("OPENBLAS_NUM_THREADS") && !positive_env("GOTO_NUM_THREADS"))
    set_blas_threads(num_threads());
}

void set_blas_threads(int n) { openblas_set_num_threads(n); }

const char* blas_core_name() { return openblas_get_corename(); }

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() { openblas_set_num_threads(saved_); }

}  // namespace wallfacer
