// wallfacer generate: text (token ids) from a GPT or Llama checkpoint with the prompt's prefill
// and its KV cache spread over the ranks by position (model/generate.h, docs/generate.md):
//   mpirun -np P wallfacer generate --ckpt DIR (--prompt TEXT | --prompt-tokens FILE.npy)
//       --max-new N [--tokenizer tokenizer.json] [--temperature T] [--top-k K] [--top-p P]
//       [--seed S] [--strategy S --teams C --inner W --ulysses U] [--json]
//       [--continue FILE.npy ... | --continue-text TEXT ...] [--continue-way auto|pass-kv|pass-q]
//       [--prefill-chunk N]
// With --tokenizer, --prompt is encoded and the new tokens are printed as text (hf_tokenizer.h),
// on rank 0.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "hf_tokenizer.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/topology.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/model/generate.h"
#include "wallfacer/model/sampler.h"
#include "wallfacer/seqpar/strategy.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/data.h"

namespace wallfacer::cli {
namespace {

struct GenerateArgs {
  std::string ckpt, prompt, prompt_tokens, tokenizer;
  bool has_prompt = false;
  bool has_max_new = false;
  int64_t max_new = 0;
  double temperature = 0.8;
  int top_k = 0;
  double top_p = 1.0;
  int64_t seed = 1;
  int64_t eos = -1;
  std::string strategy = "ring";
  int teams = 1, ulysses = 1;
  int inner = 0;               // double ring's W; 0: the ranks per node
  std::string dtype = "fp32";  // the prefill's
  bool json = false;
  std::string logits;
  std::vector<std::string> continues;       // further turns, in order: .npy files of ids
  std::vector<std::string> continue_texts;  // or as text, encoded as --prompt is
  std::string continue_way = "auto";
  int64_t prefill_chunk = 0;  // 0: from the memory limit
};

// One continuation's figures (rank 0 prints them).
struct Turn {
  std::vector<int32_t> tokens;
  model::ContinuePlan plan;
  double ttft_ms = 0, decode_ms = 0, sent_bytes = 0;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A 1-D .npy of token ids given to `flag`, each inside the vocabulary.
std::vector<int32_t> read_token_file(const char* flag, const std::string& path, int vocab) {
  std::vector<int64_t> shape;
  const std::vector<int64_t> ids = read_npy_ints(path, shape);
  WF_USAGE_CHECK(shape.size() == 1, "{} {}: a 1-D array of token ids is needed", flag, path);
  WF_USAGE_CHECK(!ids.empty(), "{} {} holds no token", flag, path);
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    WF_USAGE_CHECK(ids[i] >= 0 && ids[i] < vocab,
                   "{} {}: id {} at index {} is outside the vocabulary 0..{}", flag, path, ids[i],
                   i, vocab - 1);
    out.push_back(int32_t(ids[i]));
  }
  return out;
}

// The ids of `text` given to `flag` on every rank: encoded by --tokenizer (on rank 0, handed to
// the others) or as byte-level text (no end-of-text after it). Collective.
std::vector<int32_t> encode_text(const GenerateArgs& a, const char* flag, const std::string& text,
                                 int vocab, comm::Communicator& world) {
  std::vector<int32_t> ids;
  if (!a.tokenizer.empty()) {
    world.agree([&] {
      if (world.rank() == 0) ids = tokenizer_encode(a.tokenizer, text, vocab);
    });
    // Rank 0's ids to every rank (the others hold zeros): the length, then the ids.
    uint64_t n = ids.size();
    world.all_reduce_max(&n, 1);
    std::vector<uint64_t> all(size_t(n), 0);
    for (size_t i = 0; i < ids.size(); ++i) all[i] = uint64_t(ids[i]);
    world.all_reduce_max(all.data(), int64_t(n));
    ids.assign(all.begin(), all.end());
  } else {
    WF_USAGE_CHECK(vocab == train::kByteVocab,
                   "{} is byte-level text, but the checkpoint's vocabulary has {} ids (not {}): "
                   "give its tokenizer, --tokenizer tokenizer.json, or the ids as a .npy file "
                   "(scripts/tokenize makes it)",
                   flag, vocab, train::kByteVocab);
    for (uint16_t t : train::tokenize_bytes(text)) ids.push_back(t);
    ids.pop_back();  // no end-of-text after the text
  }
  WF_USAGE_CHECK(!ids.empty(), "{} must not be empty", flag);
  return ids;
}

// The prompt's ids on every rank: --prompt-tokens, or --prompt (encode_text).
std::vector<int32_t> read_prompt(const GenerateArgs& a, int vocab, comm::Communicator& world) {
  WF_USAGE_CHECK(a.has_prompt != !a.prompt_tokens.empty(),
                 "give the prompt as --prompt TEXT or --prompt-tokens FILE.npy (one of them)");
  if (a.has_prompt) return encode_text(a, "--prompt", a.prompt, vocab, world);
  return read_token_file("--prompt-tokens", a.prompt_tokens, vocab);
}

// The fewest ranks (more than P, up to 1024) on which the estimate with the ring layout fits the
// limit (it falls as ranks are added), the prompt prefilled whole or, when `chunks`, in chunks of
// one token per rank; 0 when 1024 do not.
int ranks_that_fit(const model::GptConfig& m, int P, int64_t prompt, int64_t max_new, bool chunks) {
  auto fits = [&](int q) {
    const int64_t padded = (prompt + q - 1) / q * q;
    const int64_t rows = (prompt + max_new + q - 1) / q + 1;
    // Ring attention's scratch is the same on every rank.
    const seqpar::AttnConfig ring;
    const double scratch = model::prefill_scratch_bytes(m, ring, q, padded, false);
    const double limit = memory_limit_bytes();
    return model::generate_memory_bytes(m, q, padded, rows, scratch) <= limit ||
           (chunks && q < prompt &&
            model::chunked_memory_bytes(m, ring, q, q, 0, rows, false) <= limit);
  };
  int lo = P, hi = 1024;  // fits(lo) is false; the answer is in (lo, hi] when fits(hi)
  if (!fits(hi)) return 0;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

int run_generate(const GenerateArgs& a) {
  int argc = 0;
  char** argv = nullptr;
  comm::MpiSession mpi(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  WF_USAGE_CHECK(!a.ckpt.empty(), "--ckpt DIR is required");
  WF_USAGE_CHECK(a.has_max_new, "--max-new N is required (the number of tokens to generate)");
  WF_USAGE_CHECK(a.max_new >= 1 && a.max_new <= (1 << 24), "--max-new is {}; give 1..{}", a.max_new,
                 1 << 24);
  WF_USAGE_CHECK(std::isfinite(a.temperature) && a.temperature >= 0,
                 "--temperature is {}; give a finite number >= 0 (0: greedy)", a.temperature);
  WF_USAGE_CHECK(a.top_k >= 0, "--top-k is {}; give 0 (all tokens) or more", a.top_k);
  WF_USAGE_CHECK(a.top_p > 0 && a.top_p <= 1, "--top-p is {}; give a number in (0, 1]", a.top_p);
  if (timeout_option()) comm::set_timeout(*timeout_option());
  const std::string dir = train::resolve_checkpoint(a.ckpt);
  const auto cfg = train::TrainConfig::from_record(train::checkpoint_config(dir), dir);
  WF_USAGE_CHECK(cfg.kind != train::ModelKind::Dit,
                 "'{}' is a DiT checkpoint; generate runs GPT and Llama checkpoints", dir);
  const model::GptConfig m = cfg.model;
  WF_USAGE_CHECK(a.eos >= -1 && a.eos < m.vocab,
                 "--eos {} must be a token id in 0..{} (the checkpoint's vocabulary)", a.eos,
                 m.vocab - 1);
  const std::vector<int32_t> prompt = read_prompt(a, m.vocab, world);
  const model::ContinueWay way = model::parse_continue_way(a.continue_way);
  std::vector<std::vector<int32_t>> turns;
  int64_t added = a.max_new - 1, longest = 0;  // positions the cache gains after the prompt
  WF_USAGE_CHECK(a.continues.empty() || a.continue_texts.empty(),
                 "give the further turns as --continue FILE.npy or as --continue-text TEXT, not "
                 "both (their order would be lost)");
  for (const std::string& f : a.continues)
    turns.push_back(read_token_file("--continue", f, m.vocab));
  for (const std::string& t : a.continue_texts)
    turns.push_back(encode_text(a, "--continue-text", t, m.vocab, world));
  for (const std::vector<int32_t>& turn : turns) {
    // The previous turn's last token (never fed back) and this turn's, then its answer.
    const int64_t n = 1 + int64_t(turn.size());
    added += n + a.max_new - 1;
    longest = std::max(longest, n);
  }
  seqpar::AttnConfig attn;
  const seqpar::ParallelSpec spec{seqpar::parse_strategy(a.strategy), a.teams, a.inner, a.ulysses,
                                  false};
  seqpar::validate_parallel(spec);
  seqpar::set_parallel(attn, spec);
  attn.inner = seqpar::resolved_inner_in_world(attn.strategy, attn.inner, P);
  attn.dtype = parse_dtype(a.dtype);
  const int64_t L = int64_t(prompt.size());
  WF_USAGE_CHECK(a.prefill_chunk >= 0,
                 "--prefill-chunk is {}; give 0 (from the memory limit) or more", a.prefill_chunk);
  const bool fp32 = attn.dtype == Dtype::fp32;
  WF_USAGE_CHECK(a.prefill_chunk == 0 || a.prefill_chunk >= L || fp32,
                 "--prefill-chunk {} with --dtype {}: a prefill in chunks runs in fp32",
                 a.prefill_chunk, a.dtype);
  const double limit = memory_limit_bytes(), gib = 1024.0 * 1024.0 * 1024.0;
  // The estimate of a prefill in chunks of `chunk` tokens (0: the whole prompt at once) and its
  // cache's shard sizes: the prompt's positions and every new token but the last (never fed back)
  // and the continuations (the balance rule fills the shards alike however the positions come).
  struct Estimate {
    model::PromptSplit split;  // the first chunk's (the whole prompt's without chunks)
    std::vector<int64_t> final_sizes;
    int64_t most = 0;
    double need = 0;
  };
  auto estimate = [&](int64_t chunk) {
    Estimate e;
    e.split = model::split_prompt(m, attn, P, chunk > 0 ? chunk : L);
    e.final_sizes = model::shard_sizes(e.split.held, L - e.split.prompt + added);
    e.most = *std::max_element(e.final_sizes.begin(), e.final_sizes.end());
    e.need = chunk > 0 ? model::chunked_memory_bytes(m, attn, P, chunk, longest, e.most)
                       : model::generate_memory_bytes(
                             m, P, std::max(e.split.padded, (longest + P - 1) / P * P), e.most,
                             model::prefill_scratch_bytes(m, attn, P, e.split.padded));
    return e;
  };
  // The chunk: --prefill-chunk rounded up to the layout's unit, else none when the whole prompt
  // fits the limit, else the longest that fits (fp32 only).
  const int64_t unit = model::prefill_chunk_unit(m, attn, P);
  int64_t chunk = (a.prefill_chunk + unit - 1) / unit * unit;
  const Estimate whole = estimate(0);
  if (a.prefill_chunk == 0 && whole.need > limit && fp32)
    chunk = model::choose_prefill_chunk(m, attn, P, L, longest, whole.most + 1, limit);
  if (chunk >= L) chunk = 0;
  const Estimate est = chunk > 0 ? estimate(chunk) : whole;
  const model::PromptSplit& split = est.split;
  const std::vector<int64_t>& final_sizes = est.final_sizes;
  if (est.need > limit) {
    // The estimate with the chunk given, else the shortest chunk (fp32), else the whole prompt.
    const int64_t least = chunk > 0 ? chunk : fp32 && unit < L ? unit : 0;
    const Estimate shown = least == chunk ? est : estimate(least);
    const int fit = ranks_that_fit(m, P, L, a.max_new, fp32);
    throw UsageError(fmt::format(
        "a prompt of {} tokens and {} new ones needs about {:.3g} GiB per rank on {} ranks (its "
        "KV cache shard {:.3g} GiB{}); the limit is {:.3g} GiB (--max-memory, or this machine's "
        "memory shared by its ranks): {}",
        L, a.max_new, shown.need / gib, P, double(model::cache_bytes(m, shown.most)) / gib,
        least > 0 ? fmt::format(", prefilled in chunks of {} tokens", least) : std::string(),
        limit / gib,
        fit > 0 ? fmt::format("it fits on {} ranks", fit)
                : std::string("1024 ranks would not hold it")));
  }
  const int64_t chunks = chunk > 0 ? (L + chunk - 1) / chunk : 1;
  if (chunks > 1 && rank == 0)
    fmt::print(stderr, "prefill in {} chunks of {} tokens ({})\n", chunks, chunk,
               a.prefill_chunk > 0
                   ? fmt::format("--prefill-chunk {}", a.prefill_chunk)
                   : fmt::format("the whole prompt's prefill needs about {:.3g} GiB per rank, "
                                 "the limit is {:.3g} GiB",
                                 whole.need / gib, limit / gib));
  auto st = train::load_checkpoint(dir, 0, 0, model::gpt_num_params(m));
  // Generation reads the weights alone: the optimizer's moments (twice the weights' bytes, which
  // the memory estimate above does not count) are let go before the prefill allocates.
  std::vector<float>().swap(st.m);
  std::vector<float>().swap(st.v);
  model::ShardedKvCache cache(m, world, split, final_sizes[size_t(rank)]);
  const model::Sampling sampling{a.temperature, a.top_k, a.top_p};
  Rng rng(uint64_t(a.seed));
  std::vector<float> kept_logits;
  // Rank 0 draws each token and every rank takes it (one id; the logits agree on every rank).
  auto pick = [&](const float* logits) {
    if (!a.logits.empty() && rank == 0)
      kept_logits.insert(kept_logits.end(), logits, logits + m.vocab);
    uint64_t t =
        rank == 0 ? uint64_t(model::sample_token(logits, m.vocab, sampling, rng.uniform())) : 0;
    world.all_reduce_max(&t, 1);
    return int32_t(t);
  };

  world.barrier();
  const auto t0 = Clock::now();
  model::PrefillChunks prefill;
  const std::vector<float> first =
      model::chunked_prefill(m, st.params.data(), prompt, chunk, attn, world, cache, &prefill);
  std::vector<int32_t> out{pick(first.data())};
  const double ttft_ms = ms_since(t0);
  int64_t merge_bytes = 0;
  // The tokens after the first one of a turn; returns the decode's milliseconds.
  auto decode = [&](std::vector<int32_t>& toks) {
    model::GptDecoder dec(m, st.params.data(), cache, cache.positions());
    const auto t1 = Clock::now();
    while (int64_t(toks.size()) < a.max_new && toks.back() != a.eos) {
      const float* logits = dec.step(toks.back());
      merge_bytes = cache.merge_bytes_last();
      toks.push_back(pick(logits));
    }
    return ms_since(t1);
  };
  const double merge_ms0 = cache.merge_ms();
  const double decode_ms = decode(out);
  const double merge_ms = cache.merge_ms() - merge_ms0;  // this rank's, in the first answer
  int32_t last = out.back();                             // drawn, not yet in the cache
  if (out.back() == a.eos) out.pop_back();
  const double decode_tps =
      out.size() > 1 && decode_ms > 0 ? double(out.size() - 1) / (decode_ms / 1e3) : 0.0;
  // Further turns: the last drawn token and the turn's tokens prefilled against the shards.
  std::vector<Turn> done;
  for (const std::vector<int32_t>& t : turns) {
    std::vector<int32_t> feed{last};
    feed.insert(feed.end(), t.begin(), t.end());
    Turn turn;
    turn.plan = model::plan_continue(m, cache.held(), int64_t(feed.size()), way);
    world.barrier();
    const auto t2 = Clock::now();
    int64_t sent = 0;
    const std::vector<float> first_logits =
        model::continue_prefill(m, st.params.data(), feed, turn.plan, world, cache, &sent);
    turn.tokens.push_back(pick(first_logits.data()));
    turn.ttft_ms = ms_since(t2);
    turn.decode_ms = decode(turn.tokens);
    last = turn.tokens.back();
    if (turn.tokens.back() == a.eos) turn.tokens.pop_back();
    turn.sent_bytes = double(sent);
    world.all_reduce_sum(&turn.sent_bytes, 1);
    done.push_back(std::move(turn));
  }

  // Every rank's shard: the positions it holds and the bytes it allocated.
  // And the milliseconds it spent in the first answer's merges, and its peak resident set.
  std::vector<double> mine(size_t(4 * P), 0.0);
  mine[size_t(rank)] = double(cache.rows());
  mine[size_t(P + rank)] = double(cache.bytes());
  mine[size_t(2 * P + rank)] = merge_ms;
  mine[size_t(3 * P + rank)] = double(peak_rss_bytes());
  world.all_reduce_sum(mine.data(), int64_t(mine.size()));
  // The new tokens as text (rank 0), before anything is written.
  std::string text;
  if (!a.tokenizer.empty())
    world.agree([&] {
      if (rank == 0) text = tokenizer_decode(a.tokenizer, out);
    });
  if (rank != 0) return 0;
  if (!a.logits.empty())
    write_npy(a.logits, kept_logits.data(),
              {int64_t(kept_logits.size()) / m.vocab, int64_t(m.vocab)});
  std::vector<int64_t> positions, bytes;
  std::vector<std::string> merge_ms_by_rank;
  const double decoded = out.size() > 1 ? double(out.size() - 1) : 1.0;
  double merge_ms_sum = 0, peak_rss = 0;
  for (int r = 0; r < P; ++r) {
    peak_rss = std::max(peak_rss, mine[size_t(3 * P + r)]);
    positions.push_back(int64_t(mine[size_t(r)]));
    bytes.push_back(int64_t(mine[size_t(P + r)]));
    merge_ms_by_rank.push_back(fmt::format("{:.4f}", mine[size_t(2 * P + r)] / decoded));
    merge_ms_sum += mine[size_t(2 * P + r)];
  }
  const int64_t most_bytes = *std::max_element(bytes.begin(), bytes.end());
  std::vector<std::string> conts;
  for (const Turn& t : done)
    conts.push_back(fmt::format(
        "{{\"tokens\": [{}], \"new_tokens\": {}, \"cached_tokens\": {}, \"way\": \"{}\", "
        "\"pass_kv_bytes\": {}, \"pass_q_bytes\": {}, \"sent_bytes\": {}, \"ttft_ms\": {:.3f}, "
        "\"decode_ms\": {:.3f}, \"new_tokens_by_rank\": [{}]}}",
        fmt::join(t.tokens, ", "), t.plan.added, t.plan.cached,
        model::continue_way_name(t.plan.way), t.plan.pass_kv_bytes, t.plan.pass_q_bytes,
        int64_t(t.sent_bytes), t.ttft_ms, t.decode_ms, fmt::join(t.plan.rows, ", ")));
  if (a.json) {
    fmt::print(
        "{{\"tokens\": [{}], \"prompt_tokens\": {}, \"padded_tokens\": {}, \"ranks\": {}, "
        "\"strategy\": \"{}\", \"teams\": {}, \"inner\": {}, \"ulysses\": {}, \"dtype\": \"{}\", "
        "\"ttft_ms\": {:.3f}, "
        "\"decode_ms\": {:.3f}, \"decode_tokens_per_s\": {:.3f}, \"cache_bytes_per_rank\": {}, "
        "\"cache_bytes_by_rank\": [{}], \"cache_positions_by_rank\": [{}], "
        "\"cache_bytes_one_process\": {}, \"merge_bytes_per_token\": {}, "
        "\"merge_ms_per_token\": {:.4f}, \"merge_ms_per_token_by_rank\": [{}], "
        "\"continuations\": [{}], \"prefill_chunks\": {}, \"prefill_chunk_tokens\": {}, "
        "\"prefill_pass_kv_chunks\": {}, \"prefill_pass_q_chunks\": {}, "
        "\"memory_estimate_bytes\": {:.0f}, \"memory_limit_bytes\": {:.0f}, "
        "\"peak_rss_bytes_per_rank\": {:.0f}{}}}\n",
        fmt::join(out, ", "), L, split.padded + L - split.prompt, P, a.strategy, a.teams,
        attn.inner, a.ulysses, a.dtype, ttft_ms, decode_ms, decode_tps, most_bytes,
        fmt::join(bytes, ", "), fmt::join(positions, ", "), model::cache_bytes(m, L + added),
        merge_bytes, merge_ms_sum / P / decoded, fmt::join(merge_ms_by_rank, ", "),
        fmt::join(conts, ", "), prefill.chunks, prefill.chunk_tokens, prefill.pass_kv,
        prefill.pass_q, est.need, limit, peak_rss,
        a.tokenizer.empty()
            ? std::string()
            : ", \"text\": " + nlohmann::json(text).dump(-1, ' ', false,
                                                         nlohmann::json::error_handler_t::replace));
  } else if (!a.tokenizer.empty()) {
    fmt::print("{}\n", text);
  } else {
    fmt::print("{}\n", fmt::join(out, " "));
    fmt::print(stderr,
               "prompt {} tokens (padded to {} for {} on {} ranks), ttft {:.1f} ms, decode {:.1f} "
               "tokens/s, KV cache {} bytes on the fullest rank\n",
               L, split.padded + L - split.prompt, a.strategy, P, ttft_ms, decode_tps, most_bytes);
    for (const Turn& t : done) {
      fmt::print("{}\n", fmt::join(t.tokens, " "));
      fmt::print(stderr,
                 "continuation: {} new tokens after {} cached, {} (pass-KV would send {} bytes, "
                 "pass-Q {}), time to first token {:.1f} ms\n",
                 t.plan.added, t.plan.cached, model::continue_way_name(t.plan.way),
                 t.plan.pass_kv_bytes, t.plan.pass_q_bytes, t.ttft_ms);
    }
  }
  WF_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout), "cannot write to standard output: {}",
           std::strerror(errno));
  return 0;
}

Action setup(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = root.add_subcommand(
      "generate",
      "Generate token ids from a GPT or Llama checkpoint with the prompt's prefill and KV cache "
      "spread over the ranks: mpirun -np P wallfacer generate --ckpt DIR --prompt TEXT "
      "--max-new N");
  cmd->add_option("--ckpt", args->ckpt,
                  "Checkpoint dir: step-N, ckpt/ or a training --out dir (required)");
  cmd->add_option("--prompt", args->prompt,
                  "Text to continue: byte-level, or encoded by --tokenizer")
      ->each([args](const std::string&) { args->has_prompt = true; });
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "The prompt as a 1-D .npy of token ids (scripts/tokenize makes them)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "A Hugging Face tokenizer.json: --prompt is encoded and the new tokens printed "
                  "as text with it (runs scripts/tokenize: python3 with the package 'tokenizers')");
  // Checked after parsing, as --ckpt is: an unknown flag is named before a missing option.
  cmd->add_option("--max-new", args->max_new, "Tokens to generate (required, >= 1)")
      ->each([args](const std::string&) { args->has_max_new = true; });
  cmd->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Sample among the K most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p,
                  "Sample among the most likely tokens holding this much probability, (0, 1]")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--eos", args->eos, "Stop at this token id (default: never)");
  add_strategy_option(*cmd, args->strategy, "Prefill attention")->capture_default_str();
  cmd->add_option("--teams", args->teams, "WallFacer team size C")->capture_default_str();
  cmd->add_option("--inner", args->inner,
                  "double-ring: inner ring length W, consecutive ranks (W must divide P; default: "
                  "the ranks per node)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ulysses", args->ulysses, "Ulysses degree of a hybrid (ring, zigzag)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "The prefill's products and attention: fp32 | bf16 (the decode is fp32)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json,
                "Print one JSON object: tokens, ttft_ms, decode_tokens_per_s, "
                "cache_bytes_per_rank, ...");
  cmd->add_option("--logits", args->logits,
                  "Write every step's logits (steps, V) as fp32 FILE.npy (rank 0)");
  cmd->add_option("--continue", args->continues,
                  "A further turn (repeatable): a 1-D .npy of token ids appended after the "
                  "previous answer and prefilled against the sharded cache, then --max-new more");
  cmd->add_option("--continue-text", args->continue_texts,
                  "A further turn as text (repeatable), encoded as --prompt is (byte-level, or by "
                  "--tokenizer); instead of --continue");
  cmd->add_option("--continue-way", args->continue_way,
                  "How a turn meets the cached shards: auto (the fewer bytes) | pass-kv | pass-q")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", args->prefill_chunk,
                  "Prefill the prompt in chunks of N tokens (rounded up to the layout's multiple "
                  "of the ranks), each against the cache of the ones before; 0: only when the "
                  "whole prompt's prefill does not fit the memory limit, then the longest that "
                  "fits (fp32)")
      ->capture_default_str();
  return [args]() { return run_generate(*args); };
}

WALLFACER_COMMAND(45, "generate", setup);

}  // namespace
}  // namespace wallfacer::cli
