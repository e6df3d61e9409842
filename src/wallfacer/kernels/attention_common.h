#pragma once
// What the fp32 and bf16 flash-attention kernels share: argument checks, causal visibility and
// the backward's work split. Internal to the kernels.

#include <cstdint>
#include <vector>

#include "wallfacer/kernels/attention.h"

namespace wallfacer::kernels::detail {

// Number of leading keys of a tile of nk keys starting at global position k_pos_first that a query
// at global position q_pos may see under a causal mask.
int visible_keys(int64_t q_pos, int64_t k_pos_first, int nk);

void check_dims(const AttnDims& d);
void check_strides(const char* name, const Strides3& s, int seq, int heads, int head_dim);

// Zeroes rows [0, rows) of one head of a (B, S, H, D) tensor.
void zero_rows(float* base, int64_t row_stride, int rows, int head_dim);

// Backward work splitting. The main decomposition is one task per (batch, kv head): it owns dK, dV
// of its kv head and dQ of the query heads of its group, so nothing is shared. When there are fewer
// such tasks than threads (e.g. MQA with batch 1), each task's keys are also split into `parts`
// ranges of whole key tiles (block_k rows); part 0 adds into dq directly, the others into private
// dQ buffers that are added to dq afterwards in part order, so results do not depend on scheduling.
int bwd_key_parts(const AttnDims& d, int threads, int block_k);

// Floats of private dQ the split needs.
int64_t bwd_extra_dq_floats(const AttnDims& d, int parts);

// Key-row boundaries (parts + 1 of them) splitting [0, seq_k) into ranges of whole tiles with about
// equal work; under a causal mask a key tile's work is the number of query rows that see it.
std::vector<int> split_keys(const AttnDims& d, bool causal, int64_t q_pos0, int64_t k_pos0,
                            int block_k, int parts);

}  // namespace wallfacer::kernels::detail
