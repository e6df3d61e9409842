#include "wallfacer/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "wallfacer/comm/trace_merge.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/dist_model.h"
#include "wallfacer/train/metrics.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/progress.h"
#include "wallfacer/train/run_folder.h"
#include "wallfacer/train/startup_checks.h"
#include "wallfacer/train/task.h"

namespace wallfacer::train {

namespace {

AdamWConfig adamw_config(const TrainConfig& cfg) {
  AdamWConfig oc;
  oc.beta1 = float(cfg.beta1);
  oc.beta2 = float(cfg.beta2);
  oc.weight_decay = float(cfg.weight_decay);
  return oc;
}

// What one optimizer step gives the metrics.
struct StepStats {
  double lr = 0, loss = 0, norm = 0;
  double imbalance = NAN;  // packed documents: max / mean of the ranks' attention work
  double seconds = 0;
};

// One training run on this rank, in the order it happens: the constructor sets up (config as run,
// groups, attention, task, optimizer, --out), then resume_or_init, open_metrics, start_trace,
// announce, train_steps (each step, then its evaluation, metrics and checkpoint) and finish. Every
// step is collective over `world`.
class Training {
 public:
  Training(comm::Communicator& world, const TrainOptions& opt)
      : world_(world),
        opt_(opt),
        cfg_(config_as_run(world, opt.cfg)),
        P_(world.size()),
        rank_(world.rank()),
        sp_(cfg_.sp),
        dp_(cfg_.dp(P_)),
        sp_rank_(rank_ % sp_),
        dp_rank_(rank_ / sp_),
        group_(world.split(dp_rank_, sp_rank_)),
        acfg_(cfg_.attn_config(P_)),
        positions_(seqpar::local_positions(acfg_, sp_, sp_rank_)),
        Bl_(cfg_.batch / dp_),
        T_(int64_t(positions_.size())),
        packing_(cfg_.packs()),
        window_layers_(layer_windows(cfg_)),
        attn_(acfg_, group_, T_, packing_, windows_of(window_layers_)),
        task_(agreed_task()),
        n_(task_->num_params()),
        optim_(task_->tensors(), n_, adamw_config(cfg_)),
        rng_(uint64_t(cfg_.seed)),
        ckpt_dir_(opt.out_dir + "/ckpt"),
        metrics_path_(opt.out_dir + "/metrics.jsonl") {
    open_out();
  }

  // From the newest checkpoint that verifies (--resume), or fresh parameters.
  void resume_or_init() {
    if (opt_.resume) {
      resume();
    } else {
      task_->init_params(uint64_t(cfg_.seed));
    }
  }

  // metrics.jsonl on rank 0, cut after the first step of this run and opened for appending.
  void open_metrics() {
    std::string note;
    world_.agree([&] {
      if (rank_ != 0) return;
      note = metrics_.open(metrics_path_, start_);
    });
    if (!note.empty()) progress_.message("warning: " + note);
  }

  // Tracing: steps [trace_first_, trace_last_] (1-based), to --trace or OUT/trace.json.
  void start_trace() {
    const bool range = cfg_.trace_steps[0] > 0;
    trace_path_ = !opt_.trace.empty() ? opt_.trace : range ? opt_.out_dir + "/trace.json" : "";
    trace_first_ = range ? cfg_.trace_steps[0] : 1;
    trace_last_ = range ? std::min(cfg_.trace_steps[1], cfg_.steps) : cfg_.steps;
    if (trace_path_.empty()) return;
    comm::check_trace_path(world_, trace_path_);
    clocks_ = comm::sync_clocks(world_);
    // Room for every span of the traced steps: per layer and pass, the attention schedule's ops
    // (fewer than 96 per rank of the group) and the dense parts.
    const int64_t steps =
        std::max<int64_t>(0, trace_last_ - std::max(trace_first_, start_ + 1) + 1);
    trace::start(size_t(std::min<int64_t>(int64_t(1) << 18,
                                          256 + steps * (32 + cfg_.model.layers * 2 * 96 * sp_))));
    trace::set_active(false);
  }

  // The startup lines on rank 0: the model, the layout and the dtype.
  void announce() {
    if (rank_ != 0) return;
    progress_.message(fmt::format(
        "wallfacer train: {} {} params, {} ranks (dp {} x sp {}, {}{} C={} ulysses={}{}), seq {}, "
        "batch {}{}{}, checkpointing {}, {} threads/rank",
        cfg_.arch_name(), n_, P_, dp_, sp_, seqpar::strategy_name(cfg_.parallel.strategy),
        acfg_.inner > 0 ? fmt::format(" W={}", acfg_.inner) : "", cfg_.parallel.teams,
        cfg_.parallel.ulysses, cfg_.parallel.keep_kv ? " keep_kv" : "", cfg_.seq, cfg_.batch,
        packing_ ? fmt::format(", packing documents, {} layout", seqpar::layout_name(acfg_.layout))
                 : "",
        model_facts(cfg_).notes, model::checkpointing_name(cfg_.checkpointing), num_threads()));
    const bool avx512_bf16 = kernels::bf16_avx512_available();
    const std::string why = !opt_.cfg.dtype
                                ? fmt::format("train.dtype = 'auto': this CPU {} AVX512-BF16",
                                              avx512_bf16 ? "has" : "lacks")
                                : std::string("train.dtype");
    progress_.message(
        cfg_.run_dtype() == model::Dtype::bf16
            ? fmt::format("dtype bf16 ({}{}): matrix products and attention in bf16 with fp32 "
                          "accumulation; fp32 master weights, AdamW, norms' statistics, residual "
                          "stream and loss",
                          why, avx512_bf16 ? "" : "; portable bf16 path: products in fp32 by sgemm")
            : fmt::format("dtype fp32 ({}): every layer in fp32", why));
  }

  // The steps from the first of this run to train.steps: each trains, then evaluates, records and
  // checkpoints at their intervals.
  void train_steps() {
    res_.first_step = start_;
    const Timer run_timer;
    for (int64_t s = start_; s < cfg_.steps; ++s) {
      const StepStats st = step(s);
      record(s, st, run_timer);
      checkpoint(s, st.lr);
    }
  }

  // The trace file, the run's means, and on rank 0 the closing line and the loss plot.
  TrainResult finish() {
    comm::set_phase("");
    trace::stop();
    if (!trace_path_.empty()) {
      nlohmann::json meta{{"command", "train"},
                          {"config",
                           {{"strategy", seqpar::strategy_name(cfg_.parallel.strategy)},
                            {"C", cfg_.team_size()},
                            {"ulysses", cfg_.parallel.ulysses},
                            {"P", sp_},
                            {"seq", cfg_.seq},
                            {"causal", acfg_.causal},
                            {"layers", cfg_.model.layers},
                            {"world", P_},
                            {"dp", dp_},
                            {"checkpointing", model::checkpointing_name(cfg_.checkpointing)}}},
                          {"steps", {trace_first_, trace_last_}}};
      comm::write_trace(world_, trace_path_, clocks_, std::move(meta));
      progress_.message(fmt::format("trace: {}", trace_path_));
    }
    res_.tokens_per_s = timed_ ? global_tokens() * double(timed_) / time_sum_ : 0;
    res_.step_s = timed_ ? time_sum_ / double(timed_) : 0;

    res_.peak_rss_mib = double(peak_rss_bytes()) / (1024.0 * 1024.0);
    world_.all_reduce_max(&res_.peak_rss_mib, 1);
    if (rank_ == 0 && opt_.report) {
      metrics_.close();
      progress_.message(
          fmt::format("done: {} steps, mean {:.0f} tokens/s, peak memory per rank {:.1f} MiB",
                      cfg_.steps - start_, res_.tokens_per_s, res_.peak_rss_mib));
      std::string why;
      if (plot_losses(opt_.out_dir, why)) {
        progress_.message(fmt::format("loss plot: {}/loss.png", opt_.out_dir));
      } else {
        progress_.message(fmt::format("warning: no loss plot: {}", why));
      }
    }
    return res_;
  }

 private:
  std::unique_ptr<Task> agreed_task() {
    std::unique_ptr<Task> task;
    world_.agree([&] { task = make_task(cfg_, int64_t(dp_rank_) * Bl_, Bl_, positions_, attn_); });
    return task;
  }

  // --out: held by this job alone, not silently mixed with an earlier run.
  void open_out() {
    out_lock_ = claim_run_folder(world_, opt_.out_dir, ckpt_dir_, opt_.resume, opt_.overwrite);
    if (!out_lock_.taken_over().empty())
      progress_.message(fmt::format("warning: took over {} from a job that is gone ({})",
                                    out_lock_.path(), out_lock_.taken_over()));
  }

  // The newest checkpoint that verifies; a damaged newer one is skipped and named.
  void resume() {
    std::vector<std::string> dirs;
    world_.agree([&] {
      dirs = list_checkpoints(ckpt_dir_);
      WF_USAGE_CHECK(!dirs.empty(), "--resume: no complete checkpoint under '{}'", ckpt_dir_);
    });
    std::string dir, skipped, changed;
    CheckpointOrigin origin;
    for (const auto& d : dirs) {
      try {
        world_.agree([&] {
          changed = check_resume_config(d, cfg_);
          CheckpointState st = load_checkpoint(d, rank_, P_, n_, &origin);
          std::copy(st.params.begin(), st.params.end(), task_->params());
          optim_.m() = std::move(st.m);
          optim_.v() = std::move(st.v);
          optim_.set_step(st.step);
          rng_.set_state(st.rng_state);
          start_ = st.step;
        });
        dir = d;
        break;
      } catch (const UsageError&) {
        throw;
      } catch (const Error& e) {
        progress_.message(fmt::format("warning: skipping checkpoint {}: {}", d, e.what()));
        skipped += (skipped.empty() ? " " : "; ") + d + ": " + e.what();
      }
    }
    WF_CHECK(!dir.empty(), "--resume: no checkpoint under '{}' verifies:{}", ckpt_dir_, skipped);
    if (!changed.empty())
      progress_.message(fmt::format("resuming with changed settings: {}", changed));
    if (origin.world != P_ || origin.sp != sp_) {
      auto ranks = [](int k) { return fmt::format("{} rank{}", k, k == 1 ? "" : "s"); };
      const std::string before = origin.sp > 0 && origin.dp > 0
                                     ? fmt::format(" (dp {} x sp {})", origin.dp, origin.sp)
                                     : "";
      progress_.message(fmt::format("resuming step {} written by {}{} on {} (dp {} x sp {})",
                                    start_, ranks(origin.world), before, ranks(P_), dp_, sp_));
    }
    WF_USAGE_CHECK(cfg_.steps >= start_,
                   "--resume: the checkpoint {} is of step {}, past train.steps = {}: give "
                   "--steps {} or more (equal: nothing left to train)",
                   dir, start_, cfg_.steps, start_);
    progress_.message(fmt::format("resumed from {} (step {})", dir, start_));
  }

  double global_tokens() const { return double(cfg_.batch) * double(cfg_.seq); }

  // One optimizer step s (0-based): forward, backward, the gradient all-reduce, clipping and
  // AdamW; traced when s + 1 is in the traced range.
  StepStats step(int64_t s) {
    Timer t;
    StepStats st;
    const double loss_terms = task_->loss_terms();
    comm::set_phase(fmt::format("step {}", s + 1));
    trace::set_active(!trace_path_.empty() && s + 1 >= trace_first_ && s + 1 <= trace_last_);
    std::optional<trace::Span> step_span(std::in_place, "step", trace::Cat::Phase,
                                         std::initializer_list<trace::Arg>{{"step", s + 1}});
    st.lr = lr_schedule(s, cfg_.steps, cfg_.warmup, cfg_.lr, cfg_.min_lr);
    double loss = 0;
    {
      trace::Span span("forward", trace::Cat::Phase);
      loss = task_->train_forward(s);
    }
    // Packed documents: the attention work of this step's forward, the busiest rank's over the
    // mean, summed over the layers (each layer waits for its busiest rank): sum over the layers of
    // max over ranks / sum over the layers of the mean over ranks.
    if (packing_) {
      const std::vector<double> work = attn_.work();
      std::vector<double> most = work, total = work;
      world_.all_reduce_max(most.data(), int64_t(most.size()));
      world_.all_reduce_sum(total.data(), int64_t(total.size()));
      double num = 0, den = 0;
      for (size_t i = 0; i < work.size(); ++i) {
        // One set: its max / mean, as the layers' sums would give it but without their rounding.
        const double layers = work.size() == 1 ? 1.0 : double(window_layers_[i].second);
        num += layers * most[i];
        den += layers * (total[i] / double(P_));
      }
      st.imbalance = den > 0 ? num / den : 1.0;
    }
    {
      trace::Span span("backward", trace::Cat::Phase);
      task_->zero_grads();
      task_->backward(float(1.0 / loss_terms));
    }
    {
      // Sum over sp and dp of gradients already scaled by 1 / (loss terms of the global batch):
      // the gradient of the mean loss of the global batch.
      trace::Span span("all_reduce", trace::Cat::Comm,
                       {{"phase", 0, "gradient all-reduce"},
                        {"group", 0, "world"},
                        {"group_size", P_},
                        {"bytes", n_ * int64_t(sizeof(float))}});
      world_.all_reduce_sum(task_->grads(), n_);
      world_.all_reduce_sum(&loss, 1);
    }
    loss /= loss_terms;
    double norm = 0;
    {
      trace::Span span("optimizer", trace::Cat::Compute, {{"phase", 0, "optimizer"}});
      norm = std::sqrt(kernels::sum_squares(task_->grads(), n_));
      // Every rank holds the same reduced loss and gradients: the same verdict everywhere, before
      // the parameters, the metrics or a checkpoint change.
      WF_CHECK(std::isfinite(loss) && std::isfinite(norm),
               "step {}: the loss is {} and the gradient norm {}: training diverged (train.lr = {} "
               "at this step); nothing of this step was kept. Lower train.lr or set "
               "train.grad_clip, and continue from the last checkpoint with --resume",
               s + 1, loss, norm, st.lr);
      if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) {
        kernels::scale(task_->grads(), n_, float(cfg_.grad_clip / norm));
      }
      optim_.update(task_->params(), task_->grads(), float(st.lr));
    }
    rng_.next_u64();  // one draw per step keeps the stream position tied to the step
    step_span.reset();
    trace::set_active(false);
    st.loss = loss;
    st.norm = norm;
    st.seconds = t.seconds();
    if (s > start_ || cfg_.steps - start_ == 1) {
      time_sum_ += st.seconds;
      ++timed_;
    }
    res_.losses.push_back(loss);
    return st;
  }

  // After step s: the evaluation at its interval, and on rank 0 the metrics line and the
  // progress.
  void record(int64_t s, const StepStats& st, const Timer& run_timer) {
    const double tok_s = global_tokens() / st.seconds;
    double val_loss = NAN;
    if (cfg_.eval_every > 0 && ((s + 1) % cfg_.eval_every == 0 || s + 1 == cfg_.steps))
      val_loss = evaluate();
    if (rank_ != 0) return;
    nlohmann::json j{{"step", s + 1},
                     {"loss", st.loss},
                     {"lr", st.lr},
                     {"grad_norm", st.norm},
                     {"tokens_per_s", tok_s},
                     {"step_s", st.seconds},
                     {"elapsed_s", run_timer.seconds()}};
    if (!std::isnan(val_loss)) j["val_loss"] = val_loss;
    if (packing_) j["work_imbalance"] = st.imbalance;
    metrics_.append(s + 1, j.dump() + "\n");
    const double mean_dt = timed_ ? time_sum_ / double(timed_) : st.seconds;
    progress_.update(s + 1, st.loss, tok_s, mean_dt * double(cfg_.steps - s - 1), val_loss);
  }

  // The mean loss of the evaluation batches (collective).
  double evaluate() {
    double sum = 0;
    for (int e = 0; e < cfg_.eval_batches; ++e) sum += task_->eval_forward(e);
    world_.all_reduce_sum(&sum, 1);
    return sum / (double(cfg_.eval_batches) * task_->loss_terms());
  }

  // After step s, at train.ckpt_every and at the last step: the checkpoint of the state.
  void checkpoint(int64_t s, double lr) {
    if (!(cfg_.ckpt_every > 0 && ((s + 1) % cfg_.ckpt_every == 0 || s + 1 == cfg_.steps))) return;
    // What a checkpoint holds is finite: a later --resume never starts from a broken state.
    WF_CHECK(kernels::sum_squares(task_->params(), n_) < INFINITY,
             "step {}: the parameters are no longer finite (train.lr = {}): training diverged; "
             "no checkpoint of this step was written. Lower train.lr or set train.grad_clip, and "
             "continue from the last checkpoint with --resume",
             s + 1, lr);
    CheckpointState st;
    st.step = s + 1;
    st.rng_state = rng_.state();
    st.params.assign(task_->params(), task_->params() + n_);
    st.m = optim_.m();
    st.v = optim_.v();
    save_checkpoint(world_, ckpt_dir_, st, cfg_.to_toml(), layout_json(), cfg_.keep_checkpoints);
  }

  // The manifest's layout: the writer's world and parallel layout.
  std::string layout_json() const {
    return nlohmann::json{{"world", P_},
                          {"sp", sp_},
                          {"dp", dp_},
                          {"sp_groups", "consecutive ranks"},
                          {"strategy", seqpar::strategy_name(cfg_.parallel.strategy)},
                          {"teams", cfg_.parallel.teams},
                          {"ulysses", cfg_.parallel.ulysses},
                          {"keep_kv", cfg_.parallel.keep_kv},
                          {"local_tokens", T_},
                          {"local_batch", Bl_}}
        .dump();
  }

  // Setup, in the order it runs (the constructor's).
  comm::Communicator& world_;
  const TrainOptions& opt_;
  const TrainConfig cfg_;  // as run: validated, train.dtype decided
  const int P_, rank_, sp_, dp_, sp_rank_, dp_rank_;
  comm::Communicator group_;  // this rank's sp group
  const seqpar::AttnConfig acfg_;
  const std::vector<int64_t> positions_;  // of this rank's rows in a sequence
  const int Bl_;                          // sequences per data-parallel group
  const int64_t T_;                       // rows of a sequence on this rank
  const bool packing_;                    // train.packing = "documents"
  // The distinct windows of the layers, ascending, with their number of layers.
  const std::vector<std::pair<int64_t, int>> window_layers_;
  DistAttentionOp attn_;
  std::unique_ptr<Task> task_;
  const int64_t n_;  // parameters
  AdamW optim_;
  Rng rng_;
  const std::string ckpt_dir_, metrics_path_;
  FolderLock out_lock_;
  Progress progress_{rank_ == 0 ? opt_.progress : "none", cfg_.steps, rank_ == 0 && opt_.report};
  // The run.
  int64_t start_ = 0;      // the first step (0-based): 0, or the step of the checkpoint resumed
  MetricsWriter metrics_;  // rank 0
  std::string trace_path_;
  int64_t trace_first_ = 1, trace_last_ = 0;
  comm::ClockSync clocks_;
  TrainResult res_;
  double time_sum_ = 0;  // seconds of the timed steps
  int64_t timed_ = 0;    // steps timed (all but the first, unless there is only one)
};

}  // namespace

TrainResult run_training(comm::Communicator& world, const TrainOptions& opt) {
  Training run(world, opt);
  run.resume_or_init();
  run.open_metrics();
  run.start_trace();
  run.announce();
  run.train_steps();
  return run.finish();
}

}  // namespace wallfacer::train
