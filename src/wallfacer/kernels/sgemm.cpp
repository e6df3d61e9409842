#include "wallfacer/kernels/sgemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                      lda, b, ldb, beta, c, ldc);
  WF_CHECK(st == dnnl_success,
           "sgemm {}{} of ({} x {})({} x {}) with lda {}, ldb {}, ldc {}: oneDNN status {}",
           trans_a ? "T" : "N", trans_b ? "T" : "N", m, k, k, n, lda, ldb, ldc, int(st));
}

const char* sgemm_backend() {
  static const std::string name = [] {
    const dnnl_version_t* v = dnnl_version();
    const char* isa = "?";
    switch (dnnl_get_effective_cpu_isa()) {
      case dnnl_cpu_isa_sse41:
        isa = "sse41";
        break;
      case dnnl_cpu_isa_avx:
        isa = "avx";
        break;
      case dnnl_cpu_isa_avx2:
        isa = "avx2";
        break;
      case dnnl_cpu_isa_avx512_core:
        isa = "avx512_core";
        break;
      case dnnl_cpu_isa_avx512_core_vnni:
        isa = "avx512_core_vnni";
        break;
      case dnnl_cpu_isa_avx512_core_bf16:
        isa = "avx512_core_bf16";
        break;
      case dnnl_cpu_isa_avx512_core_amx:
        isa = "avx512_core_amx";
        break;
      default:
        break;
    }
    return fmt::format("oneDNN {}.{}.{} {}", v->major, v->minor, v->patch, isa);
  }();
  return name.c_str();
}

}  // namespace wallfacer::kernels
