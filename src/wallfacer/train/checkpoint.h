#pragma once
// Training checkpoints: DIR/ckpt/step-N/ holds one shard per rank (rank-R.bin: parameters, AdamW
// moments, step, data position and RNG state) and manifest.json (format, step, world, layout,
// config, and every shard's size and checksum). The directory is written as step-N.tmp and renamed
// when every shard and the manifest are on disk, so a step-N directory is complete.
//
// Shard file (little-endian): "WFCKPT01" magic, u32 version, u32 header bytes (64), u32 rank,
// u32 world, u64 step, u64 number of parameters, u64 rng state, u64 FNV-1a 64 of the payload,
// 8 reserved bytes; then params, m, v (float32 each).

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"

namespace wallfacer::train {

struct CheckpointState {
  int64_t step = 0;        // completed optimizer steps (= the data position of a stateless loader)
  uint64_t rng_state = 0;  // state of the trainer's RNG
  std::vector<float> params, m, v;
};

// Collective over `world`. Writes DIR/step-<state.step>/ (ckpt_dir = DIR), then keeps the newest
// `keep` checkpoints (0: all) and removes leftover step-N.tmp folders of interrupted saves.
void save_checkpoint(comm::Communicator& world, const std::string& ckpt_dir,
                     const CheckpointState& state, const std::string& config_toml,
                     const std::string& layout_json, int keep = 0);

// The complete checkpoint directories under ckpt_dir, newest first (empty when there is none).
std::vector<std::string> list_checkpoints(const std::string& ckpt_dir);
// The newest complete checkpoint directory under ckpt_dir ("" when there is none).
std::string latest_checkpoint(const std::string& ckpt_dir);

// Reads the manifest and this rank's shard, verifies them (names, sizes, header, step, checksums)
// and returns the state; throws Error naming the bad file and key otherwise. Ranks that load
// together agree on the outcome (Communicator::agree), so no rank goes on with a checkpoint another
// could not read. world_size must match the manifest (<= 0: any, for tools that read one shard).
CheckpointState load_checkpoint(const std::string& dir, int rank, int world_size,
                                int64_t num_params);

// The manifest's config TOML (for `sample`).
std::string checkpoint_config(const std::string& dir);

}  // namespace wallfacer::train
