#pragma once
// The training loop: mesh world = dp x sp (sp groups of consecutive ranks), the model of the
// config as a Task (train/task.h) with attention through seqpar::DistAttention, AdamW with warm-up
// and cosine decay, clipping by global norm, evaluation, metrics, checkpoints and resume. The
// startup checks, the run folder and the progress output live beside it (startup_checks.h,
// run_folder.h, progress.h).

#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

struct TrainOptions {
  TrainConfig cfg;
  std::string out_dir = "runs/gpt";
  bool resume = false;
  bool overwrite = false;         // a fresh run into an --out that holds one removes it first
  std::string progress = "auto";  // auto | bar | plain | none
  // false: rank 0 prints no messages and draws no loss plot (callers that only time steps).
  bool report = true;
  // A Chrome trace of the steps cfg.trace_steps (all steps when [0, 0]) to this file
  // (docs/trace.md); empty: OUT/trace.json when cfg.trace_steps is set, else no trace.
  std::string trace;
};

struct TrainResult {
  std::vector<double> losses;  // of the steps this run executed
  double tokens_per_s = 0;     // mean over the steps this run executed (without the first)
  double step_s = 0;           // mean seconds per step over the same steps
  double peak_rss_mib = 0;     // largest over the ranks
  int64_t first_step = 0;      // 0-based step this run started from
};

// Collective over `world`; rank 0 writes the logs, metrics and plot.
TrainResult run_training(comm::Communicator& world, const TrainOptions& opt);

}  // namespace wallfacer::train
