#pragma once
// Training checkpoints. DIR/ckpt/step-N/ holds manifest.json and the shard files. The directory is
// written as step-N.tmp and renamed when every shard and the manifest are on disk, so a step-N
// directory is complete.
//
// Format 2 (written today). The training state (parameters, AdamW m and v, step, RNG state) is
// replicated: every rank of the run holds the same. It is one replica group, so one rank writes one
// shard, state.bin, after the ranks have checked that their states agree (an all-reduce of the
// minimum and maximum of each rank's state checksum). manifest.json:
//   format "wallfacer-checkpoint", version 2, step, world (the writer's number of ranks), layout
//   (the writer's world, sp, dp, strategy, teams, ulysses, ...), config (the TOML), and shards: one
//   entry per shard, in order, each with file, ranks (the writer's ranks whose state it holds),
//   first_param and num_params (its slice of the flat state vector), bytes and fnv1a64 (the shard's
//   checksum, as in its header).
// A sharded state would list several shards (state-00000.bin, ...), each holding a slice of the
// state for its replica group; the slices follow each other from parameter 0 to the model's count.
// A reader reads only the shards whose slices it needs (today: the one shard), so a checkpoint
// loads on any number of ranks and any parallel layout of the same model.
//
// Shard file, format 2 (little-endian, 96-byte header):
// clang-format off
//   offset  0  magic "WFCKPT01" (8 bytes; the same in every version)
//           8  u32 version (2)
//          12  u32 header bytes (96)
//          16  u32 shard index in the manifest's list
//          20  u32 number of shards
//          24  u32 world (the writer's number of ranks)
//          28  u32 ranks holding this shard (its replica group's size)
//          32  u64 step
//          40  u64 number of parameters of the model
//          48  u64 first parameter of this shard's slice
//          56  u64 parameters in this shard's slice
//          64  u64 RNG state
//          72  u64 checksum: FNV-1a 64 of the 96 header bytes with this field zeroed, then of the
//                  payload
//          80  16 reserved zero bytes
//          96  payload: the slice of params, then of m, then of v (float32 each)
// clang-format on
// The checksum covers every header field, so a damaged step, count, RNG state or world is found.
//
// Format 1 (read only): one shard per rank, rank-RRRRR.bin, each with a 64-byte header ("WFCKPT01",
// u32 version 1, u32 header bytes 64, u32 rank, u32 world, u64 step, u64 number of parameters,
// u64 RNG state, u64 FNV-1a 64 of the payload, 8 reserved bytes) and the whole params, m, v; the
// manifest lists every shard (file, bytes, fnv1a64 of the whole file). Every shard holds the same
// state, so on the writer's number of ranks each rank reads its own shard, and on another number
// of ranks every rank reads shard 0.

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

// Who wrote a checkpoint: its format version and the writer's number of ranks and layout (sp and
// dp are 0 when the manifest's layout does not give them).
struct CheckpointOrigin {
  int version = 0;
  int world = 0;
  int sp = 0;
  int dp = 0;
};

// Collective over `world`. Checks that every rank holds the same state (an Error, and nothing
// written, when they differ), writes DIR/step-<state.step>/ (ckpt_dir = DIR), then keeps the newest
// `keep` checkpoints (0: all) and removes leftover step-N.tmp folders of interrupted saves.
void save_checkpoint(comm::Communicator& world, const std::string& ckpt_dir,
                     const CheckpointState& state, const std::string& config_toml,
                     const std::string& layout_json, int keep = 0);

// The complete checkpoint directories under ckpt_dir, newest first (empty when there is none).
std::vector<std::string> list_checkpoints(const std::string& ckpt_dir);
// The newest complete checkpoint directory under ckpt_dir ("" when there is none).
std::string latest_checkpoint(const std::string& ckpt_dir);

// Reads the manifest and the shards this rank needs, verifies them (names, sizes, headers, step,
// checksums) and returns the state; throws Error naming the bad file and key otherwise. The caller
// runs it under Communicator::agree, so that no rank goes on with a checkpoint another could not
// read. `rank` of `world_size` ranks loads it (world_size <= 0: a tool that reads the state alone);
// the number of ranks may differ from the writer's. `origin`, when given, receives who wrote it.
CheckpointState load_checkpoint(const std::string& dir, int rank, int world_size,
                                int64_t num_params, CheckpointOrigin* origin = nullptr);

// The checkpoint DIR names: DIR itself when it holds manifest.json (a step-N folder), else the
// newest complete checkpoint of DIR/ckpt (a run folder) or of DIR (a ckpt folder); UsageError
// when there is none.
std::string resolve_checkpoint(const std::string& dir);

// The manifest's config TOML (for `sample`).
std::string checkpoint_config(const std::string& dir);

}  // namespace wallfacer::train
