#include "wallfacer/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "wallfacer/comm/trace_merge.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/task.h"

namespace wallfacer::train {

namespace fs = std::filesystem;

namespace {

// The model's attention: the sequence-parallel DistAttention of this rank's sp group.
class DistAttentionOp : public model::AttentionOp {
 public:
  DistAttentionOp(const seqpar::AttnConfig& cfg, comm::Communicator& group) : attn_(cfg, group) {}
  void forward(const float* q, const float* k, const float* v, float* o, float* lse) override {
    attn_.forward(q, k, v, o, lse);
  }
  void backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                const float* dout, float* dq, float* dk, float* dv) override {
    attn_.backward(q, k, v, o, lse, dout, dq, dk, dv);
  }

 private:
  seqpar::DistAttention attn_;
};

std::string format_duration(double s) {
  const auto t = int64_t(std::max(0.0, s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// Progress on rank 0: a redrawn bar on a terminal, plain lines otherwise.
class Progress {
 public:
  Progress(std::string mode, int64_t total, bool messages) : total_(total), messages_(messages) {
    if (mode == "auto") {
      // Under mpirun a rank's stdout may be a pseudo-terminal even when mpirun's is not:
      // scripts/wallfacer-mpirun says what mpirun's own stdout is in WALLFACER_TTY.
      const char* tty = std::getenv("WALLFACER_TTY");
      const bool terminal = tty ? std::string(tty) == "1" : bool(isatty(STDOUT_FILENO));
      mode = terminal ? "bar" : "plain";
    }
    mode_ = mode;
  }
  void update(int64_t step, double loss, double tok_s, double eta_s, double val_loss) {
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
  void message(const std::string& s) {
    if (!messages_) return;
    if (mode_ == "bar") std::printf("\r\033[K");
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }

 private:
  std::string mode_;
  int64_t total_;
  bool messages_;
};

// Keeps the metrics lines of steps <= last_step (after a resume), or none.
void trim_metrics(const std::string& path, int64_t last_step) {
  std::string kept;
  if (last_step > 0 && fs::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      try {
        if (nlohmann::json::parse(line).at("step").get<int64_t>() <= last_step) kept += line + "\n";
      } catch (const std::exception&) {
      }
    }
  }
  std::ofstream(path, std::ios::trunc) << kept;
}

// DIR/loss.png from DIR/metrics.jsonl with gnuplot; returns false (and says why) if it cannot.
bool plot_losses(const std::string& dir, std::string& why) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::ofstream tr(dir + "/loss_train.dat"), va(dir + "/loss_val.dat");
  std::string line;
  bool any_val = false;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      tr << j["step"].get<int64_t>() << " " << j["loss"].get<double>() << "\n";
      if (j.contains("val_loss")) {
        va << j["step"].get<int64_t>() << " " << j["val_loss"].get<double>() << "\n";
        any_val = true;
      }
    } catch (const std::exception&) {
    }
  }
  tr.close();
  va.close();
  const std::string script = dir + "/loss.gp";
  std::ofstream gp(script);
  gp << "set terminal png size 900,540\n"
     << "set output '" << dir << "/loss.png'\n"
     << "set title 'wallfacer training'\nset xlabel 'step'\nset ylabel 'loss'\n"
     << "set grid\nset key top right\n"
     << "plot '" << dir << "/loss_train.dat' using 1:2 with lines lw 2 title 'train'";
  if (any_val) gp << ", '" << dir << "/loss_val.dat' using 1:2 with linespoints lw 2 title 'val'";
  gp << "\n";
  gp.close();
  const int rc = std::system(fmt::format("gnuplot '{}' >/dev/null 2>&1", script).c_str());
  if (rc != 0) {
    why = "gnuplot is not available or failed (install gnuplot-nox)";
    return false;
  }
  return true;
}

}  // namespace

TrainResult run_training(comm::Communicator& world, const TrainOptions& opt) {
  const TrainConfig& cfg = opt.cfg;
  const int P = world.size(), rank = world.rank();
  cfg.validate(P);
  const int sp = cfg.sp, dp = cfg.dp(P), sp_rank = rank % sp, dp_rank = rank / sp;
  comm::Communicator group = world.split(dp_rank, sp_rank);
  const seqpar::AttnConfig acfg = cfg.attn_config(P);
  const std::vector<int64_t> positions = seqpar::local_positions(acfg, sp, sp_rank);
  const int Bl = cfg.batch / dp;
  const int64_t T = int64_t(positions.size());

  DistAttentionOp attn(acfg, group);
  std::unique_ptr<Task> task = make_task(cfg, int64_t(dp_rank) * Bl, Bl, positions, attn);
  const int64_t n = task->num_params();
  AdamWConfig oc;
  oc.beta1 = float(cfg.beta1);
  oc.beta2 = float(cfg.beta2);
  oc.weight_decay = float(cfg.weight_decay);
  AdamW optim(task->tensors(), n, oc);
  Rng rng(uint64_t(cfg.seed));

  const std::string ckpt_dir = opt.out_dir + "/ckpt";
  const std::string metrics_path = opt.out_dir + "/metrics.jsonl";
  if (rank == 0) fs::create_directories(ckpt_dir);
  Progress progress(rank == 0 ? opt.progress : "none", cfg.steps, rank == 0 && opt.report);

  int64_t start = 0;
  if (opt.resume) {
    const std::string dir = latest_checkpoint(ckpt_dir);
    WF_USAGE_CHECK(!dir.empty(), "--resume: no complete checkpoint under '{}'", ckpt_dir);
    CheckpointState st = load_checkpoint(dir, rank, P, n);
    std::copy(st.params.begin(), st.params.end(), task->params());
    optim.m() = std::move(st.m);
    optim.v() = std::move(st.v);
    optim.set_step(st.step);
    rng.set_state(st.rng_state);
    start = st.step;
    progress.message(fmt::format("resumed from {} (step {})", dir, start));
  } else {
    task->init_params(uint64_t(cfg.seed));
  }
  if (rank == 0) trim_metrics(metrics_path, start);
  world.barrier();

  // Tracing: steps [trace_first, trace_last] (1-based).
  const bool range = cfg.trace_steps[0] > 0;
  const std::string trace_path = !opt.trace.empty() ? opt.trace
                                 : range            ? opt.out_dir + "/trace.json"
                                                    : "";
  const int64_t trace_first = range ? cfg.trace_steps[0] : 1,
                trace_last = range ? std::min(cfg.trace_steps[1], cfg.steps) : cfg.steps;
  comm::ClockSync clocks;
  if (!trace_path.empty()) {
    comm::check_trace_path(world, trace_path);
    clocks = comm::sync_clocks(world);
    // Room for every span of the traced steps: per layer and pass, the attention schedule's ops
    // (fewer than 96 per rank of the group) and the dense parts.
    const int64_t steps = std::max<int64_t>(0, trace_last - std::max(trace_first, start + 1) + 1);
    trace::start(size_t(
        std::min<int64_t>(int64_t(1) << 18, 256 + steps * (32 + cfg.model.layers * 2 * 96 * sp))));
    trace::set_active(false);
  }

  const std::string layout = nlohmann::json{
      {"world", P},
      {"sp", sp},
      {"dp", dp},
      {"sp_groups", "consecutive ranks"},
      {"strategy", cfg.strategy},
      {"teams", cfg.teams},
      {"ulysses", cfg.ulysses},
      {"keep_kv", cfg.keep_kv},
      {"local_tokens", T},
      {"local_batch", Bl}}.dump();
  if (rank == 0) {
    progress.message(fmt::format(
        "wallfacer train: {} {} params, {} ranks (dp {} x sp {}, {} C={} ulysses={}{}), seq {}, "
        "batch {}, checkpointing {}, {} threads/rank",
        cfg.kind, n, P, dp, sp, cfg.strategy, cfg.teams, cfg.ulysses, cfg.keep_kv ? " keep_kv" : "",
        cfg.seq, cfg.batch, cfg.checkpointing, num_threads()));
  }

  const double global_tokens = double(cfg.batch) * double(cfg.seq);
  const double loss_terms = task->loss_terms();
  auto evaluate = [&]() {
    double sum = 0;
    for (int e = 0; e < cfg.eval_batches; ++e) sum += task->eval_forward(e);
    world.all_reduce_sum(&sum, 1);
    return sum / (double(cfg.eval_batches) * loss_terms);
  };

  TrainResult res;
  res.first_step = start;
  std::ofstream metrics;
  if (rank == 0) metrics.open(metrics_path, std::ios::app);
  double time_sum = 0;
  int64_t timed = 0;
  Timer run_timer;
  for (int64_t s = start; s < cfg.steps; ++s) {
    Timer t;
    trace::set_active(!trace_path.empty() && s + 1 >= trace_first && s + 1 <= trace_last);
    std::optional<trace::Span> step_span(std::in_place, "step", trace::Cat::Phase,
                                         std::initializer_list<trace::Arg>{{"step", s + 1}});
    const double lr = lr_schedule(s, cfg.steps, cfg.warmup, cfg.lr, cfg.min_lr);
    double loss = 0;
    {
      trace::Span span("forward", trace::Cat::Phase);
      loss = task->train_forward(s);
    }
    {
      trace::Span span("backward", trace::Cat::Phase);
      task->zero_grads();
      task->backward(float(1.0 / loss_terms));
    }
    {
      // Sum over sp and dp of gradients already scaled by 1 / (loss terms of the global batch):
      // the gradient of the mean loss of the global batch.
      trace::Span span("all_reduce", trace::Cat::Comm,
                       {{"phase", 0, "gradient all-reduce"},
                        {"group", 0, "world"},
                        {"group_size", P},
                        {"bytes", n * int64_t(sizeof(float))}});
      world.all_reduce_sum(task->grads(), n);
      world.all_reduce_sum(&loss, 1);
    }
    loss /= loss_terms;
    double norm = 0;
    {
      trace::Span span("optimizer", trace::Cat::Compute, {{"phase", 0, "optimizer"}});
      norm = std::sqrt(kernels::sum_squares(task->grads(), n));
      if (cfg.grad_clip > 0 && norm > cfg.grad_clip) {
        kernels::scale(task->grads(), n, float(cfg.grad_clip / norm));
      }
      optim.update(task->params(), task->grads(), float(lr));
    }
    rng.next_u64();  // one draw per step keeps the stream position tied to the step
    step_span.reset();
    trace::set_active(false);
    const double dt = t.seconds();
    const double tok_s = global_tokens / dt;
    if (s > start || cfg.steps - start == 1) {
      time_sum += dt;
      ++timed;
    }
    res.losses.push_back(loss);

    double val_loss = NAN;
    const bool last = s + 1 == cfg.steps;
    if (cfg.eval_every > 0 && ((s + 1) % cfg.eval_every == 0 || last)) val_loss = evaluate();
    if (rank == 0) {
      nlohmann::json j{{"step", s + 1},
                       {"loss", loss},
                       {"lr", lr},
                       {"grad_norm", norm},
                       {"tokens_per_s", tok_s},
                       {"step_s", dt},
                       {"elapsed_s", run_timer.seconds()}};
      if (!std::isnan(val_loss)) j["val_loss"] = val_loss;
      metrics << j.dump() << "\n";
      metrics.flush();
      const double mean_dt = timed ? time_sum / double(timed) : dt;
      progress.update(s + 1, loss, tok_s, mean_dt * double(cfg.steps - s - 1), val_loss);
    }
    if (cfg.ckpt_every > 0 && ((s + 1) % cfg.ckpt_every == 0 || last)) {
      CheckpointState st;
      st.step = s + 1;
      st.rng_state = rng.state();
      st.params.assign(task->params(), task->params() + n);
      st.m = optim.m();
      st.v = optim.v();
      save_checkpoint(world, ckpt_dir, st, cfg.to_toml(), layout);
    }
  }
  trace::stop();
  if (!trace_path.empty()) {
    nlohmann::json meta{{"command", "train"},
                        {"config",
                         {{"strategy", cfg.strategy},
                          {"C", cfg.strategy == "wallfacer" ? cfg.teams : 1},
                          {"ulysses", cfg.ulysses},
                          {"P", sp},
                          {"seq", cfg.seq},
                          {"causal", acfg.causal},
                          {"layers", cfg.model.layers},
                          {"world", P},
                          {"dp", dp},
                          {"checkpointing", cfg.checkpointing}}},
                        {"steps", {trace_first, trace_last}}};
    comm::write_trace(world, trace_path, clocks, std::move(meta));
    progress.message(fmt::format("trace: {}", trace_path));
  }
  res.tokens_per_s = timed ? global_tokens * double(timed) / time_sum : 0;
  res.step_s = timed ? time_sum / double(timed) : 0;

  std::vector<double> rss(size_t(P), 0.0);
  rss[size_t(rank)] = double(peak_rss_bytes()) / (1024.0 * 1024.0);
  world.all_reduce_sum(rss.data(), P);
  res.peak_rss_mib = *std::max_element(rss.begin(), rss.end());
  if (rank == 0 && opt.report) {
    metrics.close();
    progress.message(
        fmt::format("done: {} steps, mean {:.0f} tokens/s, peak memory per rank {:.1f} MiB",
                    cfg.steps - start, res.tokens_per_s, res.peak_rss_mib));
    std::string why;
    if (plot_losses(opt.out_dir, why)) {
      progress.message(fmt::format("loss plot: {}/loss.png", opt.out_dir));
    } else {
      progress.message(fmt::format("warning: no loss plot: {}", why));
    }
  }
  return res;
}

}  // namespace wallfacer::train
