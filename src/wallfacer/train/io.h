#pragma once
// Durable file writes for the training files (the functions live in core/file.h).

#include "wallfacer/core/file.h"

namespace wallfacer::train {

using ::wallfacer::fsync_dir;
using ::wallfacer::make_directories;
using ::wallfacer::read_file;
using ::wallfacer::write_file_atomic;

}  // namespace wallfacer::train
