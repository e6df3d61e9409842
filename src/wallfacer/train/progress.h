#pragma once
// Training progress on rank 0: a redrawn bar on a terminal, plain step lines otherwise (or
// nothing), and the run's messages between them.

#include <cstdint>
#include <string>

namespace wallfacer::train {

class Progress {
 public:
  // mode: "auto" (a bar on a terminal, else plain lines), "bar", "plain" or "none"; total: the
  // last step; messages: whether message() prints.
  Progress(std::string mode, int64_t total, bool messages);
  // Step `step` of total done (val_loss NaN: no evaluation at this step).
  void update(int64_t step, double loss, double tok_s, double eta_s, double val_loss);
  // One line of text, below the bar.
  void message(const std::string& s);

 private:
  std::string mode_;
  int64_t total_;
  bool messages_;
};

}  // namespace wallfacer::train
