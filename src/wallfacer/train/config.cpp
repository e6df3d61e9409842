#include "wallfacer/train/config.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <variant>

#include "wallfacer/core/error.h"
#include "wallfacer/core/toml_reader.h"
#include "wallfacer/kernels/attention_bf16.h"

namespace wallfacer::train {

std::string_view kind_name(ModelKind k) { return k == ModelKind::Dit ? "dit" : "gpt"; }

std::string_view packing_name(Packing p) { return p == Packing::Documents ? "documents" : "none"; }

namespace {

// A key whose string names one of a few choices, bound to its enum field: read sets the field
// from the text (a UsageError naming the key and the choices for any other text), name gives the
// text back as a config writes it.
struct Choice {
  std::function<void(std::string_view)> read;
  std::function<std::string()> name;
};

template <class T, class Read, class Name>
Choice choice(T& field, Read read, Name name) {
  return {[&field, read](std::string_view s) { field = read(s); },
          [&field, name] { return std::string(name(field)); }};
}

// The readers of the choices: the words of each key's message are the contract of its errors.
ModelKind read_kind(std::string_view s) {
  if (s == "gpt") return ModelKind::Gpt;
  if (s == "dit") return ModelKind::Dit;
  throw UsageError(fmt::format("model.kind must be 'gpt' or 'dit' (got '{}')", s));
}

Packing read_packing(std::string_view s) {
  if (s == "none") return Packing::None;
  if (s == "documents") return Packing::Documents;
  throw UsageError(fmt::format("train.packing must be 'none' or 'documents' (got '{}')", s));
}

std::optional<model::Dtype> read_dtype(std::string_view s) {
  if (s == "auto") return std::nullopt;
  try {
    return parse_dtype(s);
  } catch (const UsageError&) {
    throw UsageError(fmt::format("train.dtype must be 'auto', 'fp32' or 'bf16' (got '{}')", s));
  }
}

std::string_view dtype_text(const std::optional<model::Dtype>& d) {
  return d ? dtype_name(*d) : "auto";
}

// What the checks of the strategy options call them in a training config.
constexpr seqpar::ParallelNames kParallelKeys{"parallel.strategy", "parallel.teams",
                                              "parallel.inner",    "parallel.ulysses",
                                              "parallel.keep_kv",  true};

seqpar::Strategy read_strategy(std::string_view s) {
  try {
    return seqpar::parse_strategy(s);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("parallel.strategy: {}", e.what()));
  }
}

std::optional<seqpar::Layout> read_layout(std::string_view s) {
  if (s.empty()) return std::nullopt;
  try {
    return seqpar::parse_layout(s);
  } catch (const UsageError&) {
    throw UsageError(fmt::format("parallel.layout must be 'balanced' or 'strategy' (got '{}')", s));
  }
}

std::string_view layout_text(const std::optional<seqpar::Layout>& l) {
  return l ? seqpar::layout_name(*l) : "";
}

// One key of the schema, bound to its field in a TrainConfig.
struct Field {
  const char* key;
  std::variant<int*, int64_t*, double*, std::string*, bool*, std::array<int64_t, 2>*,
               std::vector<int64_t>*, Choice>
      ptr;
};

// model.arch: "dit" is model.kind = "dit"; "gpt" and "llama" are text models of that architecture.
Choice arch_choice(TrainConfig& c) {
  return {[&c](std::string_view s) {
            if (s == "dit") {
              c.kind = ModelKind::Dit;
              c.model.arch = model::Arch::Gpt;
            } else {
              c.model.arch = model::parse_arch(s);
              c.kind = ModelKind::Gpt;
            }
          },
          [&c] { return std::string(c.arch_name()); }};
}

std::vector<Field> fields(TrainConfig& c) {
  kernels::RopeScaling& rs = c.model.rope_scaling;
  return {
      {"model.kind", choice(c.kind, read_kind, kind_name)},
      {"model.arch", arch_choice(c)},
      {"model.layers", &c.model.layers},
      {"model.dim", &c.model.dim},
      {"model.heads", &c.model.heads},
      {"model.kv_heads", &c.model.kv_heads},
      {"model.mlp_ratio", &c.model.mlp_ratio},
      {"model.vocab", &c.model.vocab},
      {"model.intermediate", &c.model.intermediate},
      {"model.norm_eps", &c.model.norm_eps},
      {"model.tie_embeddings", &c.model.tie_embeddings},
      {"model.qkv_bias", &c.model.qkv_bias},
      {"model.rope_theta", &c.model.rope_theta},
      {"model.rope_scaling.type",
       choice(rs.type, kernels::parse_rope_scaling_type, kernels::rope_scaling_type_name)},
      {"model.rope_scaling.factor", &rs.factor},
      {"model.rope_scaling.low_freq_factor", &rs.low_freq_factor},
      {"model.rope_scaling.high_freq_factor", &rs.high_freq_factor},
      {"model.rope_scaling.original_max_position_embeddings", &rs.original_max_position_embeddings},
      {"model.window", &c.model.window},
      {"model.window_layers", &c.model.window_layers},
      {"model.patch", &c.patch},
      {"model.freq_dim", &c.freq_dim},
      {"model.classes", &c.classes},
      {"train.seq", &c.seq},
      {"train.batch", &c.batch},
      {"train.steps", &c.steps},
      {"train.lr", &c.lr},
      {"train.min_lr", &c.min_lr},
      {"train.warmup", &c.warmup},
      {"train.weight_decay", &c.weight_decay},
      {"train.beta1", &c.beta1},
      {"train.beta2", &c.beta2},
      {"train.grad_clip", &c.grad_clip},
      {"train.seed", &c.seed},
      {"train.ckpt_every", &c.ckpt_every},
      {"train.keep_checkpoints", &c.keep_checkpoints},
      {"train.eval_every", &c.eval_every},
      {"train.eval_batches", &c.eval_batches},
      {"train.time_sampling", choice(c.time_sampling, parse_time_sampling, time_sampling_name)},
      {"train.timeout", &c.timeout},
      {"train.dtype", choice(c.dtype, read_dtype, dtype_text)},
      {"train.packing", choice(c.packing, read_packing, packing_name)},
      {"train.trace_steps", &c.trace_steps},
      {"data.dir", &c.data_dir},
      {"data.frames", &c.frames},
      {"data.min_frames", &c.min_frames},
      {"data.size", &c.size},
      {"data.channels", &c.channels},
      {"data.clips", &c.clips},
      {"parallel.sp", &c.sp},
      {"parallel.strategy", choice(c.parallel.strategy, read_strategy, seqpar::strategy_name)},
      {"parallel.teams", &c.parallel.teams},
      {"parallel.inner", &c.parallel.inner},
      {"parallel.ulysses", &c.parallel.ulysses},
      {"parallel.keep_kv", &c.parallel.keep_kv},
      {"parallel.checkpointing",
       choice(c.checkpointing, model::parse_checkpointing, model::checkpointing_name)},
      {"parallel.layout", choice(c.layout, read_layout, layout_text)},
  };
}

Field* find_field(std::vector<Field>& fs, std::string_view key) {
  for (auto& f : fs) {
    if (key == f.key) return &f;
  }
  std::string known;
  for (auto& f : fs) known += std::string(known.empty() ? "" : ", ") + f.key;
  throw UsageError(fmt::format("unknown config key '{}' (known keys: {})", key, known));
}

int64_t parse_int(std::string_view key, std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  WF_USAGE_CHECK(ec == std::errc() && p == s.data() + s.size(), "{} expects an integer, got '{}'",
                 key, s);
  return v;
}

double parse_double(std::string_view key, std::string_view s) {
  try {
    size_t used = 0;
    const double v = std::stod(std::string(s), &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("{} expects a number, got '{}'", key, s));
}

void store_int(const Field& f, int64_t v) {
  if (auto p = std::get_if<int*>(&f.ptr)) {
    WF_USAGE_CHECK(v >= INT32_MIN && v <= INT32_MAX, "{} = {} is out of range", f.key, v);
    **p = int(v);
  } else {
    *std::get<int64_t*>(f.ptr) = v;
  }
}

// Whether `s` is UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF), as TOML
// strings are: a config's strings must read back unchanged from the TOML a checkpoint records.
bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) {
      n = 1, cp = b & 0x1fu;
    } else if (b >= 0xe0 && b <= 0xef) {
      n = 2, cp = b & 0x0fu;
    } else if (b >= 0xf0 && b <= 0xf4) {
      n = 3, cp = b & 0x07u;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0u) != 0x80u) return false;
      cp = cp << 6 | (c & 0x3fu);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

// t without its leading and trailing spaces.
std::string_view trim(std::string_view t) {
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t;
}

// "[a, b]" or "a,b": a pair of integers.
std::array<int64_t, 2> parse_pair(std::string_view key, std::string_view s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  const auto comma = s.find(',');
  WF_USAGE_CHECK(comma != std::string_view::npos, "{} expects [a, b], got '{}'", key, s);
  return {parse_int(key, trim(s.substr(0, comma))), parse_int(key, trim(s.substr(comma + 1)))};
}

// "[a, b, ...]" or "a,b,...": a list of integers ("[]" or "": none).
std::vector<int64_t> parse_list(std::string_view key, std::string_view s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::vector<int64_t> out;
  if (trim(s).empty()) return out;
  for (size_t at = 0;;) {
    const size_t comma = s.find(',', at);
    out.push_back(parse_int(key, trim(s.substr(at, comma - at))));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

// Assigns a TOML node to a field, checking its type.
void assign(const Field& f, const toml::node& n) {
  if (auto pair = std::get_if<std::array<int64_t, 2>*>(&f.ptr)) {
    const auto* arr = n.as_array();
    std::optional<int64_t> a, b;
    if (arr && arr->size() == 2) a = toml_integer((*arr)[0]), b = toml_integer((*arr)[1]);
    WF_USAGE_CHECK(a && b, "{} expects an array of two integers, like [3, 5]", f.key);
    **pair = {*a, *b};
  } else if (auto list = std::get_if<std::vector<int64_t>*>(&f.ptr)) {
    const auto* arr = n.as_array();
    WF_USAGE_CHECK(arr, "{} expects an array of integers, like [0, 2]", f.key);
    (*list)->clear();
    for (const auto& e : *arr) {
      const std::optional<int64_t> v = toml_integer(e);
      WF_USAGE_CHECK(v, "{} expects an array of integers, like [0, 2]", f.key);
      (*list)->push_back(*v);
    }
  } else if (std::holds_alternative<std::string*>(f.ptr)) {
    WF_USAGE_CHECK(n.is_string(), "{} expects a string", f.key);
    *std::get<std::string*>(f.ptr) = n.value<std::string>().value();
  } else if (auto ch = std::get_if<Choice>(&f.ptr)) {
    WF_USAGE_CHECK(n.is_string(), "{} expects a string", f.key);
    ch->read(n.value<std::string>().value());
  } else if (std::holds_alternative<double*>(f.ptr)) {
    const std::optional<double> v = toml_number(n);
    WF_USAGE_CHECK(v, "{} expects a number", f.key);
    *std::get<double*>(f.ptr) = *v;
  } else if (std::holds_alternative<bool*>(f.ptr)) {
    WF_USAGE_CHECK(n.is_boolean(), "{} expects true or false", f.key);
    *std::get<bool*>(f.ptr) = n.value<bool>().value();
  } else {
    const std::optional<int64_t> v = toml_integer(n);
    WF_USAGE_CHECK(v, "{} expects an integer", f.key);
    store_int(f, *v);
  }
}

// A field's value as changes_from names it: strings quoted, arrays in brackets.
template <class T>
std::string value_text(T* p) {
  if constexpr (std::is_same_v<T, std::string>) {
    return "'" + *p + "'";
  } else if constexpr (std::is_same_v<T, std::array<int64_t, 2>>) {
    return fmt::format("[{}, {}]", (*p)[0], (*p)[1]);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    std::string items;
    for (const int64_t v : *p) items += (items.empty() ? "" : ", ") + std::to_string(v);
    return "[" + items + "]";
  } else {
    return fmt::format("{}", *p);
  }
}

// Inserts a field's value into a TOML table as key `name`.
template <class T>
void insert_value(toml::table& t, const std::string& name, T* p) {
  if constexpr (std::is_same_v<T, int>) {
    t.insert(name, int64_t(*p));
  } else if constexpr (std::is_same_v<T, std::array<int64_t, 2>>) {
    t.insert(name, toml::array{(*p)[0], (*p)[1]});
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    toml::array arr;
    for (const int64_t v : *p) arr.push_back(v);
    t.insert(name, std::move(arr));
  } else {
    t.insert(name, *p);
  }
}

}  // namespace

TrainConfig TrainConfig::from_record(const std::string& text, const std::string& name) {
  TrainConfig c;
  auto fs = fields(c);
  const toml::table tbl = parse_toml(text, name);
  // An empty file (or comments only) is a mistake, not a request for every default.
  WF_USAGE_CHECK(!tbl.empty(),
                 "{} is empty: it has no settings; a config needs at least [data] dir (start "
                 "from configs/gpt-kjv.toml)",
                 name);
  for (auto& [section, node] : tbl) {
    const auto* sub = node.as_table();
    WF_USAGE_CHECK(sub, "{}: top-level key '{}' must be a table like [model] or [train]", name,
                   section.str());
    for (auto& [key, value] : *sub) {
      const std::string full = std::string(section.str()) + "." + std::string(key.str());
      if (const auto* inner = value.as_table(); inner && full == "model.rope_scaling") {
        // model.rope_scaling = { type = "llama3", factor = 8.0, ... }: its keys one by one.
        for (auto& [k2, v2] : *inner)
          assign(*find_field(fs, full + "." + std::string(k2.str())), v2);
        continue;
      }
      assign(*find_field(fs, full), value);
      if (full == "train.seq") c.seq_given = true;
    }
  }
  c.derive();
  return c;
}

TrainConfig TrainConfig::from_toml(const std::string& text, const std::string& name,
                                   const std::vector<std::string>& sets) {
  TrainConfig c = from_record(text, name);
  for (const auto& s : sets) c.set(s);
  seqpar::validate_parallel(c.parallel, kParallelKeys);
  return c;
}

TrainConfig TrainConfig::from_file(const std::string& path, const std::vector<std::string>& sets) {
  return from_toml(read_toml_file(path, "config", "configs/gpt-kjv.toml"), path, sets);
}

void TrainConfig::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  WF_USAGE_CHECK(eq != std::string::npos, "--set expects key=value, got '{}'", assignment);
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  auto fs = fields(*this);
  const Field& f = *find_field(fs, key);
  if (key == "train.seq") seq_given = true;
  if (auto p = std::get_if<std::string*>(&f.ptr)) {
    WF_USAGE_CHECK(is_utf8(value), "{} expects UTF-8 text, got bytes that are not", key);
    **p = value;
  } else if (auto ch = std::get_if<Choice>(&f.ptr)) {
    WF_USAGE_CHECK(is_utf8(value), "{} expects UTF-8 text, got bytes that are not", key);
    ch->read(value);
  } else if (auto pair = std::get_if<std::array<int64_t, 2>*>(&f.ptr)) {
    **pair = parse_pair(key, value);
  } else if (auto list = std::get_if<std::vector<int64_t>*>(&f.ptr)) {
    **list = parse_list(key, value);
  } else if (auto d = std::get_if<double*>(&f.ptr)) {
    **d = parse_double(key, value);
  } else if (auto b = std::get_if<bool*>(&f.ptr)) {
    WF_USAGE_CHECK(value == "true" || value == "false", "{} expects true or false, got '{}'", key,
                   value);
    **b = value == "true";
  } else {
    store_int(f, parse_int(key, value));
  }
  derive();
}

std::string_view TrainConfig::arch_name() const {
  return kind == ModelKind::Dit ? "dit" : model::arch_name(model.arch);
}

model::DitConfig TrainConfig::dit_model() const {
  model::DitConfig d;
  d.channels = channels;
  d.patch = patch;
  d.frames = frames;
  d.size = size;
  d.layers = model.layers;
  d.dim = model.dim;
  d.heads = model.heads;
  d.mlp_ratio = model.mlp_ratio;
  d.freq_dim = freq_dim;
  d.classes = classes;
  return d;
}

VideoSpec TrainConfig::video_spec() const {
  VideoSpec v;
  v.frames = frames;
  v.size = size;
  v.channels = channels;
  v.classes = classes > 0 ? classes : kVideoShapeKinds;
  return v;
}

void TrainConfig::derive() {
  if (kind == ModelKind::Dit && dit_model().clip_shape_ok() && !(packs() && seq_given))
    seq = dit_model().tokens();
}

seqpar::AttnConfig TrainConfig::attn_config(int P) const {
  seqpar::AttnConfig a;
  seqpar::set_parallel(a, parallel);
  // A double ring whose parallel.inner is still 0 (a config checked outside a job): one inner ring
  // of the sp ranks (nodes of sp ranks), which checks what every W dividing sp would.
  a.inner = seqpar::resolved_inner(parallel.strategy, parallel.inner, sp, sp);
  a.batch = batch / dp(P);
  a.seq = seq;
  a.heads = model.heads;
  a.kv_heads = kind == ModelKind::Dit ? model.heads : model.kv_heads;
  a.head_dim = model.head_dim();
  a.causal = kind != ModelKind::Dit;
  a.dtype = run_dtype();
  // On one rank of sp every layout holds the whole sequence in order.
  a.layout = sp > 1 ? run_layout() : seqpar::Layout::Strategy;
  // The attentions of all layers lay the rows out alike, so the balanced layout counts one window
  // for all (AttnConfig::window is set per layer): the window of the layers that hold the most
  // attention work, their number times the pairs of one causal document of seq tokens under their
  // window (the global layers on a tie). A model without windows counts none.
  if (kind == ModelKind::Gpt) {
    const model::GptConfig m = run_model();
    std::map<int64_t, int> layers;
    for (int l = 0; l < m.layers; ++l) ++layers[m.layer_window(l)];
    // Causal pairs of seq tokens under window W (0: none): query i keeps min(i + 1, W) keys. In
    // double: seq is not yet checked here, and its square may not fit in 64 bits.
    const double S = double(seq);
    auto pairs = [&](int64_t window) {
      const double W = window <= 0 ? S : std::min(S, double(window));
      return W * (W + 1) / 2 + (S - W) * W;
    };
    double most = -1;
    for (const auto& [window, count] : layers) {
      const double work = double(count) * pairs(window);
      if (work > most) most = work, a.layout_window = window;
    }
  }
  return a;
}

model::GptConfig TrainConfig::run_model() const {
  model::GptConfig m = model;
  if (m.window >= seq) m.window = 0, m.window_layers.clear();
  return m;
}

seqpar::Layout TrainConfig::run_layout() const {
  if (layout) return *layout;
  return packs() ? seqpar::Layout::Balanced : seqpar::Layout::Strategy;
}

model::Dtype TrainConfig::run_dtype() const {
  if (dtype) return *dtype;
  return kernels::bf16_avx512_available() ? model::Dtype::bf16 : model::Dtype::fp32;
}

void TrainConfig::validate(int P) const {
  validate_model();
  validate_training(P);
  validate_packing();
  validate_parallel(P);
}

void TrainConfig::validate_model() const {
  if (kind == ModelKind::Dit) {
    const model::DitConfig d = dit_model();
    WF_USAGE_CHECK(!d.clip_shape_ok() || d.tokens() <= (int64_t(1) << 32),
                   "a clip of data.frames {} x (data.size {} / model.patch {})^2 = {} tokens is "
                   "more than 2^32: use fewer frames, smaller frames or larger patches",
                   frames, size, patch, d.tokens());
  }
  // Upper bounds that keep every product of sizes (parameter counts, buffer sizes) inside 64 bits;
  // whether the job fits in memory is checked before allocating (check_training_memory).
  WF_USAGE_CHECK(model.intermediate <= (1 << 24),
                 "model.intermediate ({}) <= 16777216 is the largest size supported",
                 model.intermediate);
  WF_USAGE_CHECK(model.layers <= 10000 && model.dim <= (1 << 20) && model.mlp_ratio <= 64 &&
                     model.vocab <= (1 << 24) && seq <= (int64_t(1) << 32) && batch <= (1 << 20),
                 "model.layers ({}) <= 10000, model.dim ({}) <= 1048576, model.mlp_ratio ({}) <= "
                 "64, model.vocab ({}) <= 16777216, train.seq ({}) <= 2^32 and train.batch ({}) "
                 "<= 1048576 are the largest sizes supported",
                 model.layers, model.dim, model.mlp_ratio, model.vocab, seq, batch);
  if (kind == ModelKind::Dit) {
    WF_USAGE_CHECK(model.arch == model::Arch::Gpt,
                   "model.kind = 'dit' contradicts model.arch = '{}': set model.arch = 'dit' (or "
                   "drop model.kind)",
                   model::arch_name(model.arch));
    dit_model().validate();
    WF_USAGE_CHECK(classes >= 0 && classes <= kVideoShapeKinds,
                   "model.classes must be in [0, {}] (the shape kinds of the videos), got {}",
                   kVideoShapeKinds, classes);
    WF_USAGE_CHECK(channels == 1 || channels == 3, "data.channels must be 1 or 3 (got {})",
                   channels);
    WF_USAGE_CHECK(clips >= 1, "data.clips must be >= 1 (got {})", clips);
    WF_USAGE_CHECK(model.window == 0 && model.window_layers.empty(),
                   "model.window is for the GPT (causal attention); the DiT attends to every "
                   "token of its clip: drop model.window and model.window_layers");
    WF_USAGE_CHECK(
        checkpointing == model::Checkpointing::None,
        "parallel.checkpointing = '{}' is not supported for model.kind = 'dit': use 'none'",
        model::checkpointing_name(checkpointing));
  } else {
    model.validate();
  }
}

void TrainConfig::validate_training(int P) const {
  WF_USAGE_CHECK(sp >= 1 && P % sp == 0,
                 "parallel.sp = {} must divide the number of ranks {} (world = dp x sp)", sp, P);
  WF_USAGE_CHECK(batch >= 1 && batch % dp(P) == 0,
                 "train.batch = {} must be a positive multiple of dp = {} (ranks {} / sp {})",
                 batch, dp(P), P, sp);
  WF_USAGE_CHECK(seq >= 2 && seq % sp == 0, "train.seq = {} must be divisible by parallel.sp = {}",
                 seq, sp);
  WF_USAGE_CHECK(steps >= 1, "train.steps must be at least 1 (got {})", steps);
  for (const auto& [key, v] : {std::pair<const char*, double>{"train.lr", lr},
                               {"train.min_lr", min_lr},
                               {"train.weight_decay", weight_decay},
                               {"train.beta1", beta1},
                               {"train.beta2", beta2},
                               {"train.grad_clip", grad_clip},
                               {"model.rope_theta", model.rope_theta}}) {
    WF_USAGE_CHECK(std::isfinite(v), "{} is {}; it must be a finite number", key, v);
  }
  WF_USAGE_CHECK(lr > 0 && min_lr >= 0 && min_lr <= lr,
                 "train.lr ({}) must be positive and train.min_lr ({}) in [0, lr]", lr, min_lr);
  WF_USAGE_CHECK(warmup >= 0, "train.warmup must be >= 0 (got {})", warmup);
  WF_USAGE_CHECK(weight_decay >= 0, "train.weight_decay must be >= 0 (got {})", weight_decay);
  WF_USAGE_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                 "train.beta1 and train.beta2 must lie in [0, 1)");
  WF_USAGE_CHECK(grad_clip >= 0, "train.grad_clip must be >= 0 (0 turns clipping off)");
  WF_USAGE_CHECK(ckpt_every >= 0 && eval_every >= 0 && eval_batches >= 1,
                 "train.ckpt_every and train.eval_every must be >= 0, train.eval_batches >= 1");
  WF_USAGE_CHECK(keep_checkpoints >= 0, "train.keep_checkpoints must be >= 0 (0: keep all), got {}",
                 keep_checkpoints);
  WF_USAGE_CHECK(timeout >= 0, "train.timeout must be >= 0 seconds (0: no limit), got {}", timeout);
  WF_USAGE_CHECK(!data_dir.empty(), "data.dir must not be empty");
  WF_USAGE_CHECK((trace_steps[0] == 0 && trace_steps[1] == 0) ||
                     (trace_steps[0] >= 1 && trace_steps[0] <= trace_steps[1]),
                 "train.trace_steps = [{}, {}] must be [a, b] with 1 <= a <= b (steps, 1-based), "
                 "or [0, 0] for every step",
                 trace_steps[0], trace_steps[1]);
}

void TrainConfig::validate_packing() const {
  if (kind == ModelKind::Dit) {
    WF_USAGE_CHECK(min_frames >= 0 && min_frames <= frames,
                   "data.min_frames = {} must be in 1..data.frames ({}), or 0 for data.frames",
                   min_frames, frames);
    const int64_t ft = frame_tokens(), below = seq / ft * ft, above = below + ft;
    WF_USAGE_CHECK(!packs() || seq % ft == 0,
                   "train.seq = {} must be a whole number of frames of {} tokens ((data.size {} / "
                   "model.patch {})^2) with train.packing = 'documents': use {}",
                   seq, ft, size, patch,
                   below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above));
  }
  WF_USAGE_CHECK(layout != seqpar::Layout::Balanced || packs(),
                 "parallel.layout = 'balanced' places the rows by the documents of each sequence "
                 "and needs train.packing = 'documents': set it, or parallel.layout = 'strategy'");
  // An evaluation forward keeps its K,V for a backward that never comes, and the documents of
  // the next step cannot change while a forward awaits its backward.
  WF_USAGE_CHECK(!(packs() && parallel.keep_kv && eval_every > 0),
                 "train.packing = 'documents' with parallel.keep_kv = true cannot evaluate "
                 "(train.eval_every = {}): set train.eval_every = 0 or parallel.keep_kv = false",
                 eval_every);
}

void TrainConfig::validate_parallel(int P) const {
  // The strategy options alone were checked where the config was parsed (from_toml); here what
  // they need of sp and the model (seqpar::validate, which checks them alone too: a config built
  // in code or changed by set since).
  WF_USAGE_CHECK(parallel.ulysses >= 1 && sp % parallel.ulysses == 0,
                 "parallel.ulysses = {} must be a divisor of parallel.sp = {}", parallel.ulysses,
                 sp);
  try {
    seqpar::validate(attn_config(P), sp);
  } catch (const UsageError& e) {
    // The layout's checks name attn's flags; a training config names its keys.
    std::string msg = e.what();
    for (const auto& [flag, key] :
         {std::pair<std::string, std::string>{"--teams", std::string(kParallelKeys.teams)},
          {"--inner", std::string(kParallelKeys.inner)},
          {"--strategy", std::string(kParallelKeys.strategy)},
          {"--ulysses", std::string(kParallelKeys.ulysses)},
          {"--kv-heads", "model.kv_heads"},
          {"--heads", "model.heads"},
          {"--head-dim", "the head size (model.dim / model.heads)"},
          {"--batch", "the batch per data-parallel group (train.batch / dp)"},
          {"--seq", "train.seq"},
          {"--layout strategy", "parallel.layout = 'strategy'"}}) {
      for (size_t at = msg.find(flag); at != std::string::npos; at = msg.find(flag, at))
        msg.replace(at, flag.size(), key);
    }
    throw UsageError(msg);
  }
}

std::vector<TrainConfig::Change> TrainConfig::changes_from(const TrainConfig& before) const {
  TrainConfig a = before, b = *this;
  auto fa = fields(a), fb = fields(b);
  std::vector<Change> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    auto text = [](const Field& f) {
      return std::visit(
          [](const auto& field) {
            if constexpr (std::is_same_v<std::decay_t<decltype(field)>, Choice>) {
              return fmt::format("'{}'", field.name());
            } else {
              return value_text(field);
            }
          },
          f.ptr);
    };
    const std::string x = text(fa[i]), y = text(fb[i]);
    if (x != y) out.push_back({fa[i].key, x, y});
  }
  return out;
}

bool TrainConfig::is_shape_key(const std::string& key) {
  for (const char* k :
       {"model.kind", "model.arch", "model.intermediate", "model.tie_embeddings", "model.qkv_bias",
        "model.layers", "model.dim", "model.heads", "model.kv_heads", "model.mlp_ratio",
        "model.vocab", "model.patch", "model.freq_dim", "model.classes", "data.frames", "data.size",
        "data.channels"}) {
    if (key == k) return true;
  }
  return false;
}

std::string TrainConfig::to_toml() const {
  TrainConfig copy = *this;
  auto fs = fields(copy);
  toml::table root;
  for (const auto& f : fs) {
    const std::string key = f.key;
    const auto dot = key.find('.');
    const std::string section = key.substr(0, dot);
    std::string name = key.substr(dot + 1);
    if (!root.contains(section)) root.insert(section, toml::table{});
    toml::table* tp = root[section].as_table();
    if (const auto dot2 = name.find('.'); dot2 != std::string::npos) {  // model.rope_scaling.*
      const std::string sub = name.substr(0, dot2);
      if (!tp->contains(sub)) tp->insert(sub, toml::table{});
      tp = (*tp)[sub].as_table();
      name = name.substr(dot2 + 1);
    }
    auto& t = *tp;
    std::visit(
        [&](const auto& field) {
          using F = std::decay_t<decltype(field)>;
          if constexpr (std::is_same_v<F, Choice>) {
            t.insert(name, field.name());
          } else {
            insert_value(t, name, field);
          }
        },
        f.ptr);
  }
  std::stringstream ss;
  ss << root;
  return ss.str();
}

}  // namespace wallfacer::train
