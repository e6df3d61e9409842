#pragma once
// The element type of tensors and of the messages that carry them, and its one parser: every
// reader of "fp32" / "bf16" (the attention config, the training config, the cluster file, the
// kernel benchmark) turns the name into a Dtype here.

#include <cstdint>
#include <string_view>

namespace wallfacer {

// fp32: float. bf16: wallfacer::bf16 (core/bf16.h), stored in 2 bytes and computed in fp32.
enum class Dtype { fp32, bf16 };

// "fp32" | "bf16"; throws UsageError "unknown dtype 'NAME': use fp32 or bf16".
Dtype parse_dtype(std::string_view name);
// "fp32" | "bf16": what parse_dtype reads back.
std::string_view dtype_name(Dtype d);
// Bytes of one element: 4 or 2.
int64_t dtype_bytes(Dtype d);

}  // namespace wallfacer
