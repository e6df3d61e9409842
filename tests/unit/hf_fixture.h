#pragma once
// The transformers fixtures of tests/golden/hf (written by tests/golden/gen_hf_fixtures.py): a
// folder's model read through import's code (train/hf_checkpoint.h), its tokens, logits, loss,
// document lengths and gradients, and the comparisons the tests make (the largest difference over
// the largest reference value, per tensor for the gradients). Used by the unit tests (one process)
// and tests/mpi/test_hf_mpi.cpp (every strategy on 2 and 4 ranks).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "wallfacer/core/file.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/core/safetensors.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/hf_layout.h"
#include "wallfacer/train/hf_checkpoint.h"

namespace wallfacer::testing {

inline const char* const kHfFixtures[] = {"llama3",       "qwen2",        "mistral",
                                          "llama-linear", "qwen2-window", "llama-docs"};

inline std::string hf_fixture_dir(const std::string& name) {
  return std::string(WALLFACER_SOURCE_DIR) + "/tests/golden/hf/" + name;
}

struct HfFixture {
  std::string dir;
  model::GptConfig model;
  std::vector<float> params;  // the arena of gpt_param_tensors
  int batch = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens;                    // (batch, seq + 1)
  std::vector<float> logits;                      // (batch, seq, vocab)
  double loss = 0;                                // mean over batch * seq targets
  std::vector<std::vector<int64_t>> doc_lengths;  // per sequence; empty: one document
  nlohmann::json adamw;                           // loss_after_adamw.json
};

inline HfFixture load_hf_fixture(const std::string& name) {
  HfFixture f;
  f.dir = hf_fixture_dir(name);
  const auto cfg = nlohmann::json::parse(read_file(f.dir + "/config.json"));
  f.model = train::gpt_config_from_hf(cfg, f.dir + "/config.json");
  f.params = train::read_hf_params(f.dir, f.model);
  std::vector<int64_t> shape;
  const std::vector<int64_t> t = read_npy_ints(f.dir + "/tokens.npy", shape);
  f.batch = int(shape.at(0));
  f.seq = shape.at(1) - 1;
  f.tokens.assign(t.begin(), t.end());
  f.logits = read_npy(f.dir + "/logits.npy", shape);
  const auto loss = nlohmann::json::parse(read_file(f.dir + "/loss.json"));
  f.loss = loss.at("loss").get<double>();
  if (loss.contains("doc_lengths"))
    f.doc_lengths = loss.at("doc_lengths").get<std::vector<std::vector<int64_t>>>();
  f.adamw = nlohmann::json::parse(read_file(f.dir + "/loss_after_adamw.json"));
  return f;
}

// max |a - ref| / max |ref| over n values.
inline double rel_error(const float* a, const float* ref, int64_t n) {
  double diff = 0, big = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(ref[i])));
    big = std::max(big, std::fabs(double(ref[i])));
  }
  return big > 0 ? diff / big : diff;
}

// Our arena `ours` (parameters or gradients of f.model) against the tensors of the safetensors
// file `path` that it names (all of them, or those listed): the largest rel_error of a tensor, and
// that tensor's name in *worst.
inline double hf_tensors_error(const HfFixture& f, const float* ours, const std::string& path,
                               std::string* worst) {
  const auto ref = safetensors::Reader::open_file(path);
  std::map<std::string, int64_t> offset;
  for (const auto& p : model::gpt_param_tensors(f.model)) offset[p.name] = p.offset;
  double most = -1;
  for (const auto& t : model::hf_tensors(f.model)) {
    if (!ref.has(t.hf_name)) continue;
    const std::vector<float> want = ref.read_f32(t.hf_name);
    std::vector<float> got(want.size());
    model::hf_export(t, ours + offset.at(t.tensor), got.data());
    const double e = rel_error(got.data(), want.data(), int64_t(want.size()));
    if (e > most) {
      most = e;
      if (worst) *worst = t.hf_name;
    }
  }
  return most;
}

}  // namespace wallfacer::testing
