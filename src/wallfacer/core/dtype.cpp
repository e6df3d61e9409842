#include "wallfacer/core/dtype.h"

#include "wallfacer/core/error.h"

namespace wallfacer {

Dtype parse_dtype(std::string_view name) {
  if (name == "fp32") return Dtype::fp32;
  if (name == "bf16") return Dtype::bf16;
  throw UsageError(fmt::format("unknown dtype '{}': use fp32 or bf16", name));
}

std::string_view dtype_name(Dtype d) { return d == Dtype::bf16 ? "bf16" : "fp32"; }

int64_t dtype_bytes(Dtype d) { return d == Dtype::bf16 ? 2 : 4; }

}  // namespace wallfacer
