#include "wallfacer/core/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <cstdlib>

namespace wallfacer {

int num_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) {
    return std::atoi(env);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return omp_get_num_procs();
}

void set_blas_threads(int n) { openblas_set_num_threads(n); }

const char* blas_core_name() { return openblas_get_corename(); }

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() { openblas_set_num_threads(saved_); }

}  // namespace wallfacer
