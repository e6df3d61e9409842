// A stand-in for a module that calls seqpar: tests/layers/CMakeLists.txt links it as a module that
// may not use seqpar (the link must fail) and as one that may (it must link).
#include <cstdint>
#include <vector>

#include "wallfacer/seqpar/config.h"

std::vector<int64_t> layering_probe_positions(const wallfacer::seqpar::AttnConfig& cfg) {
  return wallfacer::seqpar::local_positions(cfg, 2, 1);
}
