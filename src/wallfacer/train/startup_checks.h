#pragma once
// The checks of a training job before it allocates: every rank was given the same config, and
// the model, its optimizer state, activations and attentions fit in memory.

#include "wallfacer/comm/communicator.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

// The config a run trains (collective): validated on P ranks, with train.dtype = "auto" decided
// here, once (the ranks compare, and the checkpoints record, the dtype the run uses), the same on
// every rank, and a model that fits in memory.
TrainConfig config_as_run(comm::Communicator& world, const TrainConfig& given);

}  // namespace wallfacer::train
