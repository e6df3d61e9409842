#pragma once
// metrics.jsonl, read back on --resume: one JSON object per line, each with an integer "step"
// (>= 1) and a number "loss" (and "val_loss" on evaluation steps); written line by line as a run
// goes (MetricsWriter).

#include <cstdint>
#include <fstream>
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

// A run's metrics file, appended to a line at a time; the file always ends with a complete line.
class MetricsWriter {
 public:
  // Opens `path` for appending after trim_metrics(path, last_step); returns its note.
  std::string open(const std::string& path, int64_t last_step);
  // Appends `line` (ending in a newline) of step `step`. A line that cannot be written is cut
  // off again and throws Error.
  void append(int64_t step, const std::string& line);
  void close() { out_.close(); }

 private:
  std::string path_;
  std::ofstream out_;
  uintmax_t bytes_ = 0;  // complete lines in the file
};

}  // namespace wallfacer::train
