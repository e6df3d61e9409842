#pragma once
// metrics.jsonl, read back on --resume: one JSON object per line, each with an integer "step"
// (>= 1) and a number "loss" (and "val_loss" on evaluation steps).

#include <cstdint>
#include <string>

namespace wallfacer::train {

struct MetricsLine {
  int64_t step = 0;
  double loss = 0;
  bool has_val = false;
  double val_loss = 0;
};

// Line `number` (1-based) of metrics file `path`. A line that is not a JSON object with an integer
// "step" >= 1 and a numeric "loss" throws Error naming the file, the line and the fix.
MetricsLine parse_metrics_line(const std::string& path, int64_t number, const std::string& line);

// Keeps the lines of steps <= last_step of `path` (none when last_step is 0), after a resume. An
// incomplete last line (no newline at its end: a write that was cut off) is dropped; the returned
// text says so ("" otherwise). Any other damaged line throws Error (parse_metrics_line) and the
// file is left as it was.
std::string trim_metrics(const std::string& path, int64_t last_step);

}  // namespace wallfacer::train
