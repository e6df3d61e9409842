#include "wallfacer/train/run_folder.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "wallfacer/core/error.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/metrics.h"

namespace wallfacer::train {

namespace fs = std::filesystem;

namespace {

// What a training run writes into --out.
const char* const kRunFiles[] = {"metrics.jsonl", "loss.png", "loss_train.dat", "loss_val.dat",
                                 "loss.gp"};

// The lock a running job holds on its --out (host and pid inside; removed when the job ends).
const char* const kLockFile = "train.lock";

// Whether DIR holds metrics or checkpoints of a training run.
bool holds_run(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/metrics.jsonl", ec)) return true;
  const std::string ckpt = dir + "/ckpt";
  return fs::is_directory(ckpt, ec) && !fs::is_empty(ckpt, ec);
}

// Removes what a training run wrote into DIR (nothing else).
void remove_run(const std::string& dir) {
  std::error_code ec;
  for (const char* f : kRunFiles) fs::remove(fs::path(dir) / f, ec);
  fs::remove_all(fs::path(dir) / "ckpt", ec);
  WF_USAGE_CHECK(!ec, "--overwrite: cannot remove the earlier run in '{}': {}", dir, ec.message());
}

}  // namespace

FolderLock claim_run_folder(comm::Communicator& world, const std::string& dir,
                            const std::string& ckpt_dir, bool resume, bool overwrite) {
  FolderLock lock;
  const bool first = world.rank() == 0;
  world.agree([&] {
    WF_USAGE_CHECK(!(resume && overwrite),
                   "--resume continues the run in --out and --overwrite removes it: give one");
    if (first) {
      make_directories(dir, "--out");
      lock = FolderLock(dir, kLockFile, "--out");
    }
    if (!resume && holds_run(dir)) {
      WF_USAGE_CHECK(overwrite,
                     "'{}' already holds a training run (metrics.jsonl or checkpoints): continue "
                     "it with --resume, start over with --overwrite (removes them), or choose "
                     "another --out",
                     dir);
      if (first) remove_run(dir);
    }
    if (first) make_directories(ckpt_dir, "--out");
  });
  return lock;
}

std::string check_resume_config(const std::string& dir, const TrainConfig& now) {
  TrainConfig before;
  try {
    before = TrainConfig::from_record(checkpoint_config(dir), dir + "/manifest.json");
  } catch (const UsageError& e) {
    throw Error(fmt::format("the config in the manifest is unreadable: {}", e.what()));
  }
  std::string shape, other;
  for (const auto& c : now.changes_from(before)) {
    const std::string item = fmt::format("{} {} -> {}", c.key, c.before, c.after);
    std::string& list = TrainConfig::is_shape_key(c.key) ? shape : other;
    list += (list.empty() ? "" : ", ") + item;
  }
  WF_USAGE_CHECK(shape.empty(),
                 "--resume: checkpoint '{}' has another model shape ({}); the model's shape "
                 "cannot change on resume (training settings, steps, the learning-rate schedule "
                 "and the parallel layout can): use the checkpoint's values, or start a new run "
                 "in another --out or with --overwrite",
                 dir, shape);
  return other;
}

bool plot_losses(const std::string& dir, std::string& why) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  std::string train_dat, val_dat;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const MetricsLine m = parse_metrics_line(path, number, line);
    train_dat += fmt::format("{} {}\n", m.step, m.loss);
    if (m.has_val) val_dat += fmt::format("{} {}\n", m.step, m.val_loss);
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    why = "gnuplot is not installed (install gnuplot-nox)";
    return false;
  }
  write_file_atomic(dir + "/loss_train.dat", train_dat);
  write_file_atomic(dir + "/loss_val.dat", val_dat);
  const std::string png = dir + "/loss.png", script = dir + "/loss.gp";
  std::string gp = fmt::format(
      "set terminal png size 900,540\nset output '{}'\nset title 'wallfacer training'\n"
      "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n"
      "plot '{}/loss_train.dat' using 1:2 with lines lw 2 title 'train'",
      png, dir);
  if (!val_dat.empty())
    gp += fmt::format(", '{}/loss_val.dat' using 1:2 with linespoints lw 2 title 'val'", dir);
  write_file_atomic(script, gp + "\n");
  std::error_code ec;
  fs::remove(png, ec);
  const int rc = std::system(fmt::format("gnuplot '{}' >/dev/null 2>&1", script).c_str());
  WF_CHECK(rc == 0 && png_complete(png),
           "gnuplot could not write the loss plot '{}' (a full disk?); the metrics are intact",
           png);
  return true;
}

}  // namespace wallfacer::train
