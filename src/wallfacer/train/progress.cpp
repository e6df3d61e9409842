#include "wallfacer/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "wallfacer/core/error.h"

namespace wallfacer::train {

namespace {

// Seconds as "42s", "3m05s" or "1h02m".
std::string format_duration(double s) {
  const auto t = int64_t(std::max(0.0, s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

Progress::Progress(std::string mode, int64_t total, bool messages)
    : total_(total), messages_(messages) {
  if (mode == "auto") {
    // Under mpirun a rank's stdout may be a pseudo-terminal even when mpirun's is not:
    // scripts/wallfacer-mpirun says what mpirun's own stdout is in WALLFACER_TTY.
    const char* tty = std::getenv("WALLFACER_TTY");
    const bool terminal = tty ? std::string(tty) == "1" : bool(isatty(STDOUT_FILENO));
    mode = terminal ? "bar" : "plain";
  }
  mode_ = mode;
}

void Progress::update(int64_t step, double loss, double tok_s, double eta_s, double val_loss) {
  if (mode_ == "none") return;
  const std::string val = std::isnan(val_loss) ? "" : fmt::format(" val {:.4f}", val_loss);
  if (mode_ == "bar") {
    constexpr int kWidth = 30;
    const int filled = int(kWidth * step / std::max<int64_t>(1, total_));
    std::printf("\r[%s%s] step %lld/%lld loss %.4f%s %.0f tok/s ETA %s\033[K",
                std::string(size_t(filled), '#').c_str(),
                std::string(size_t(kWidth - filled), '.').c_str(), (long long)step,
                (long long)total_, loss, val.c_str(), tok_s, format_duration(eta_s).c_str());
    if (step == total_) std::printf("\n");
  } else {
    std::printf("step %lld/%lld loss %.4f%s tokens/s %.0f ETA %s\n", (long long)step,
                (long long)total_, loss, val.c_str(), tok_s, format_duration(eta_s).c_str());
  }
  std::fflush(stdout);
}

void Progress::message(const std::string& s) {
  if (!messages_) return;
  if (mode_ == "bar") std::printf("\r\033[K");
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

}  // namespace wallfacer::train
