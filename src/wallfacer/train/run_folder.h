#pragma once
// The run folder (--out) of a training job: claimed by one job at a time and not silently mixed
// with an earlier run, the checks of a checkpoint to resume, and the loss plot of the metrics.

#include <string>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/file.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

// --out created and held by this job alone (collective: rank 0 creates it, locks it until the
// returned lock ends, so that a second job on the same folder is refused before it reads or
// removes anything, and makes the checkpoint folder `ckpt_dir`). Without `resume`, an earlier run
// in it is refused, or removed with `overwrite`. Other ranks get an empty lock.
FolderLock claim_run_folder(comm::Communicator& world, const std::string& dir,
                            const std::string& ckpt_dir, bool resume, bool overwrite);

// Refuses to resume checkpoint DIR with a different model shape; returns the other keys that
// changed ("" for none).
std::string check_resume_config(const std::string& dir, const TrainConfig& now);

// DIR/loss.png from DIR/metrics.jsonl with gnuplot; returns false (and says why) when gnuplot is
// not installed. A file that cannot be written is an Error.
bool plot_losses(const std::string& dir, std::string& why);

}  // namespace wallfacer::train
