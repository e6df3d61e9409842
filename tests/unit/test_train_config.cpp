// Training configs read from TOML and --set (train/config.h): what they refuse, and that the TOML
// a checkpoint records reads back to the same values.
#include <gtest/gtest.h>

#include "wallfacer/core/error.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {
namespace {

// The UsageError message of `f`, or "" when it does not throw one.
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// An empty config (or one with comments only) is a mistake, not every default.
TEST(TrainConfig, EmptyFileIsRefused) {
  for (const char* text : {"", "\n\n", "# nothing yet\n"})
    EXPECT_NE(usage_error([&] { TrainConfig::from_toml(text, "c.toml"); }).find("c.toml is empty"),
              std::string::npos)
        << text;
  EXPECT_EQ(usage_error([&] { TrainConfig::from_toml("[train]\nlr = 1e-3\n", "c.toml"); }), "");
}

// parallel.layout: "balanced" by default with packing, "strategy" without; the balanced layout
// only with packing; on one rank of sp every layout is the strategy's.
TEST(TrainConfig, LayoutIsBalancedWithPackingByDefault) {
  TrainConfig c;
  EXPECT_EQ(c.run_layout(), seqpar::Layout::Strategy);
  c.set("train.packing=documents");
  EXPECT_EQ(c.run_layout(), seqpar::Layout::Balanced);
  c.set("parallel.sp=2");
  EXPECT_NO_THROW(c.validate(2));
  EXPECT_EQ(c.attn_config(2).layout, seqpar::Layout::Balanced);
  c.set("parallel.sp=1");
  EXPECT_EQ(c.attn_config(1).layout, seqpar::Layout::Strategy);
  c.set("parallel.layout=strategy");
  EXPECT_EQ(c.run_layout(), seqpar::Layout::Strategy);
  EXPECT_EQ(TrainConfig::from_toml(c.to_toml(), "t").layout, seqpar::Layout::Strategy);
  EXPECT_FALSE(TrainConfig::is_shape_key("parallel.layout"));
  EXPECT_NE(usage_error([&] {
              c.set("parallel.layout=diagonal");
            }).find("parallel.layout must be 'balanced' or 'strategy' (got 'diagonal')"),
            std::string::npos);
  c.set("parallel.layout=balanced");
  c.set("train.packing=none");
  EXPECT_NE(usage_error([&] { c.validate(1); }).find("needs train.packing = 'documents'"),
            std::string::npos);
  // seq 72 on sp = 2: the balanced layout needs a multiple of 16.
  c.set("train.packing=documents");
  c.set("parallel.sp=2");
  c.set("train.seq=72");
  EXPECT_NE(usage_error([&] {
              c.validate(2);
            }).find("train.seq 72 must be divisible by 16 for the balanced layout"),
            std::string::npos);
  c.set("parallel.layout=strategy");
  EXPECT_NO_THROW(c.validate(2));
}

// model.window and model.window_layers from TOML and --set read back from the TOML a checkpoint
// records; a window of train.seq or more runs as none; not shape keys; the DiT refuses them.
TEST(TrainConfig, WindowKeys) {
  TrainConfig c = TrainConfig::from_toml(
      "[model]\nlayers = 3\nwindow = 16\nwindow_layers = [0, 2]\n[train]\nseq = 64\n", "t");
  EXPECT_EQ(c.model.window, 16);
  EXPECT_EQ(c.model.window_layers, (std::vector<int64_t>{0, 2}));
  const TrainConfig back = TrainConfig::from_toml(c.to_toml(), "t");
  EXPECT_EQ(back.model.window, 16);
  EXPECT_EQ(back.model.window_layers, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(c.run_model().window, 16);
  c.set("model.window_layers=[1]");
  EXPECT_EQ(c.model.window_layers, (std::vector<int64_t>{1}));
  c.set("model.window_layers=0, 2");
  EXPECT_EQ(c.model.window_layers, (std::vector<int64_t>{0, 2}));
  c.set("model.window_layers=[]");
  EXPECT_TRUE(c.model.window_layers.empty());
  c.set("model.window=64");
  EXPECT_EQ(c.run_model().window, 0);
  EXPECT_EQ(c.model.window, 64);
  TrainConfig d = c;
  d.set("model.window=8");
  const auto changes = d.changes_from(c);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "model.window");
  EXPECT_FALSE(TrainConfig::is_shape_key("model.window"));
  EXPECT_FALSE(TrainConfig::is_shape_key("model.window_layers"));
  EXPECT_NE(usage_error([&] { c.set("model.window_layers=[a]"); }).find("model.window_layers"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              TrainConfig::from_toml("[model]\nwindow_layers = 1\n", "t");
            }).find("model.window_layers expects an array of integers"),
            std::string::npos);
  c.set("model.kind=dit");
  c.set("model.window=8");
  EXPECT_NE(usage_error([&] { c.validate(1); }).find("model.window is for the GPT"),
            std::string::npos);
}

// The balanced layout counts one window for every layer: that of the layers with the most
// attention work (pairs of one causal document of train.seq tokens times their layers), global
// ones on a tie; none without a window; the DiT's counts its attention's (none).
TEST(TrainConfig, LayoutCountsTheWindowOfMostWork) {
  TrainConfig c = TrainConfig::from_toml(
      "[model]\nlayers = 3\nwindow = 16\n[train]\nseq = 64\npacking = \"documents\"\n", "t");
  EXPECT_EQ(c.attn_config(2).layout_window, 16);  // every layer windowed
  EXPECT_EQ(c.attn_config(2).window, 0);          // the trainer sets each layer's own
  c.set("model.window_layers=[0, 2]");            // 2 x 904 pairs against 1 x 2080
  EXPECT_EQ(c.attn_config(2).layout_window, 0);
  c.set("model.window=40");  // 2 x 1780 against 2080
  EXPECT_EQ(c.attn_config(2).layout_window, 40);
  c.set("model.window=64");  // the whole sequence: no window
  EXPECT_EQ(c.attn_config(2).layout_window, 0);
  c.set("model.window=0");
  EXPECT_EQ(c.attn_config(2).layout_window, 0);
  c.set("model.window=40");
  c.set("parallel.sp=2");
  EXPECT_NO_THROW(c.validate(2));  // the layout's window passes seqpar::validate
  const TrainConfig d = TrainConfig::from_toml("[model]\nkind = \"dit\"\n", "t");
  EXPECT_EQ(seqpar::counted_layout_window(d.attn_config(1)), 0);
}

TEST(TrainConfig, SetStringsMustBeUtf8) {
  TrainConfig c;
  c.set("data.dir=runs/d\xc3\xa9j\xc3\xa0");  // "déjà" in UTF-8
  EXPECT_EQ(TrainConfig::from_toml(c.to_toml(), "t").data_dir, c.data_dir);
  for (const char* bad : {"data.dir=\xff", "data.dir=a\xc3", "data.dir=\xc0\xaf",
                          "data.dir=\xed\xa0\x80", "data.dir=\xf4\x90\x80\x80"}) {
    EXPECT_NE(usage_error([&] { c.set(bad); }).find("data.dir expects UTF-8 text"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(c.data_dir, "runs/d\xc3\xa9j\xc3\xa0");
}

TEST(TrainConfig, DtypeIsAutoFp32OrBf16ForBothModels) {
  TrainConfig c;
  EXPECT_EQ(c.dtype, std::nullopt);
  c.validate(1);
  c.set("train.dtype=fp32");
  EXPECT_EQ(c.run_dtype(), model::Dtype::fp32);
  c.validate(1);
  c.set("train.dtype=bf16");
  c.validate(1);
  EXPECT_EQ(TrainConfig::from_toml(c.to_toml(), "t").dtype, model::Dtype::bf16);
  EXPECT_EQ(c.run_dtype(), model::Dtype::bf16);
  EXPECT_EQ(c.attn_config(1).dtype, model::Dtype::bf16);
  const TrainConfig defaults;
  const auto changes = c.changes_from(defaults);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "train.dtype");
  EXPECT_FALSE(TrainConfig::is_shape_key("train.dtype"));
  EXPECT_NE(usage_error([&] {
              c.set("train.dtype=fp16");
            }).find("train.dtype must be 'auto', 'fp32' or 'bf16' (got 'fp16')"),
            std::string::npos);
  TrainConfig d =
      TrainConfig::from_toml("[model]\nkind = \"dit\"\n[train]\ndtype = \"bf16\"\n", "t");
  d.validate(1);
  EXPECT_EQ(d.run_dtype(), model::Dtype::bf16);
  EXPECT_EQ(d.attn_config(1).dtype, model::Dtype::bf16);
}

// The keys that name a choice are parsed once, when read or set: each value gives its enum, and
// the TOML a config writes (what checkpoints and metrics record) names it as it was given, in
// the key's own section; any other value is refused there, naming the key and the value, and
// the config keeps what it had.
TEST(TrainConfig, ChoicesAreParsedOnceAndWrittenAsGiven) {
  std::vector<std::string> strategies;
  for (const seqpar::StrategyTraits& t : seqpar::strategies()) strategies.emplace_back(t.name);
  const std::vector<std::pair<std::string, std::vector<std::string>>> keys = {
      {"model.kind", {"gpt", "dit"}},
      {"train.time_sampling", {"logit_normal", "uniform"}},
      {"train.dtype", {"auto", "fp32", "bf16"}},
      {"train.packing", {"none", "documents"}},
      {"parallel.strategy", strategies},
      {"parallel.checkpointing", {"none", "attention"}},
      {"parallel.layout", {"", "strategy", "balanced"}}};
  for (const auto& [key, values] : keys) {
    const auto dot = key.find('.');
    const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
    for (const std::string& v : values) {
      TrainConfig c;
      c.set(key + "=" + v);
      const std::string toml = c.to_toml();
      const auto at = toml.find("\n" + name + " = '" + v + "'\n");
      EXPECT_NE(at, std::string::npos) << key << " = " << v << ":\n" << toml;
      EXPECT_EQ(toml.rfind("\n[", at), toml.find("\n[" + section + "]\n")) << key;
      // The same value from a TOML file, and the written TOML read back: the same config.
      const TrainConfig t =
          TrainConfig::from_toml("[" + section + "]\n" + name + " = \"" + v + "\"\n", "t");
      EXPECT_TRUE(t.changes_from(c).empty()) << key << " = " << v;
      EXPECT_EQ(TrainConfig::from_toml(toml, "t").to_toml(), toml) << key << " = " << v;
    }
    TrainConfig c;
    const std::string before = c.to_toml();
    const std::string err = usage_error([&] { c.set(key + "=bogus"); });
    EXPECT_NE(err.find(key), std::string::npos) << err;
    EXPECT_NE(err.find("'bogus'"), std::string::npos) << err;
    EXPECT_EQ(c.to_toml(), before) << key;
    EXPECT_NE(usage_error([&] {
                TrainConfig::from_toml("[" + section + "]\n" + name + " = \"bogus\"\n", "t");
              }).find(key),
              std::string::npos)
        << key;
    EXPECT_NE(usage_error([&] {
                TrainConfig::from_toml("[" + section + "]\n" + name + " = 3\n", "t");
              }).find(key + " expects a string"),
              std::string::npos)
        << key;
  }
  TrainConfig c;
  EXPECT_EQ(c.kind, ModelKind::Gpt);
  EXPECT_EQ(c.parallel.strategy, seqpar::Strategy::Ring);
  EXPECT_EQ(c.checkpointing, model::Checkpointing::None);
  EXPECT_EQ(c.time_sampling, TimeSampling::LogitNormal);
  EXPECT_EQ(c.layout, std::nullopt);
  c.set("model.kind=dit");
  c.set("parallel.strategy=ulysses");
  c.set("parallel.checkpointing=attention");
  c.set("train.time_sampling=uniform");
  c.set("train.packing=documents");
  c.set("parallel.layout=strategy");
  EXPECT_EQ(c.kind, ModelKind::Dit);
  EXPECT_EQ(c.parallel.strategy, seqpar::Strategy::Ulysses);
  EXPECT_EQ(c.checkpointing, model::Checkpointing::Attention);
  EXPECT_EQ(c.time_sampling, TimeSampling::Uniform);
  EXPECT_TRUE(c.packs());
  EXPECT_EQ(c.layout, seqpar::Layout::Strategy);
}

// C: parallel.teams for WallFacer, 1 for the other strategies (their teams are not WallFacer's).
TEST(TrainConfig, TeamSize) {
  TrainConfig c;
  c.set("parallel.teams=2");
  EXPECT_EQ(c.team_size(), 1);
  c.set("parallel.strategy=wallfacer");
  EXPECT_EQ(c.team_size(), 2);
  EXPECT_EQ(seqpar::team_size(c.attn_config(1)), 2);
  for (const seqpar::StrategyTraits& t : seqpar::strategies()) {
    c.set(fmt::format("parallel.strategy={}", t.name));
    EXPECT_EQ(c.team_size(), t.has_teams ? 2 : 1) << t.name;
    EXPECT_EQ(seqpar::team_size(c.attn_config(1)), t.has_teams ? 2 : 1) << t.name;
  }
}

// The strategy options are checked alone (seqpar::validate_parallel) where the config is parsed,
// naming the config's keys: teams and inner for the strategies that have them, Ulysses over a
// hybrid's ring, keep_kv with teams > 1.
TEST(TrainConfig, StrategyOptionsAreCheckedNamingTheKeys) {
  auto err = [](std::vector<std::string> sets) {
    return usage_error([&] { TrainConfig::from_toml("[parallel]\nsp = 4\n", "t.toml", sets); });
  };
  EXPECT_NE(err({"parallel.teams=2"})
                .find("parallel.teams = 2 applies only to parallel.strategy = 'wallfacer', "
                      "not 'ring'"),
            std::string::npos);
  EXPECT_NE(err({"parallel.strategy=zigzag", "parallel.inner=2"})
                .find("parallel.inner = 2 applies only to parallel.strategy = 'double-ring', "
                      "not 'zigzag'"),
            std::string::npos);
  EXPECT_NE(err({"parallel.strategy=double-ring", "parallel.ulysses=2"})
                .find("parallel.ulysses = 2 needs parallel.strategy = 'ring', 'zigzag' or "
                      "'wallfacer'"),
            std::string::npos);
  EXPECT_NE(err({"parallel.keep_kv=true"}).find("parallel.keep_kv keeps the placed K,V"),
            std::string::npos);
  EXPECT_NE(err({"parallel.inner=-1"}).find("parallel.inner is -1"), std::string::npos);
  EXPECT_NE(err({"parallel.teams=0"}).find("parallel.teams is 0"), std::string::npos);
  EXPECT_NE(err({"parallel.ulysses=0"}).find("parallel.ulysses is 0"), std::string::npos);
}

// The parallel.* strategy keys are read into one seqpar::ParallelSpec and checked together where
// the config is parsed: the TOML's keys, then the overrides in any order.
TEST(TrainConfig, ParseFillsTheParallelSpecAndChecksIt) {
  const TrainConfig c = TrainConfig::from_toml(
      "[parallel]\nsp = 8\nstrategy = \"wallfacer\"\nteams = 2\nulysses = 2\nkeep_kv = true\n",
      "t.toml");
  EXPECT_EQ(c.parallel.strategy, seqpar::Strategy::WallFacer);
  EXPECT_EQ(c.parallel.teams, 2);
  EXPECT_EQ(c.parallel.inner, 0);
  EXPECT_EQ(c.parallel.ulysses, 2);
  EXPECT_TRUE(c.parallel.keep_kv);
  EXPECT_EQ(c.team_size(), 2);
  const TrainConfig d =
      TrainConfig::from_toml("[parallel]\nstrategy = \"double-ring\"\ninner = 4\n", "t.toml");
  EXPECT_EQ(d.parallel.strategy, seqpar::Strategy::DoubleRing);
  EXPECT_EQ(d.parallel.inner, 4);
  EXPECT_EQ(d.team_size(), 1);

  EXPECT_NE(usage_error([] {
              TrainConfig::from_toml("[parallel]\nstrategy = \"ring\"\nteams = 2\n", "t.toml");
            })
                .find("parallel.teams = 2 applies only to parallel.strategy = 'wallfacer', not "
                      "'ring'"),
            std::string::npos);
  // The overrides are checked with the file's keys once all are applied, whatever their order.
  const TrainConfig e = TrainConfig::from_toml("[parallel]\nstrategy = \"ring\"\n", "t.toml",
                                               {"parallel.teams=2", "parallel.strategy=wallfacer"});
  EXPECT_EQ(e.parallel.strategy, seqpar::Strategy::WallFacer);
  EXPECT_EQ(e.parallel.teams, 2);
  EXPECT_NE(usage_error([] {
              TrainConfig::from_toml("[parallel]\nstrategy = \"wallfacer\"\nteams = 2\n", "t.toml",
                                     {"parallel.strategy=zigzag"});
            })
                .find("parallel.teams = 2 applies only to parallel.strategy = 'wallfacer', not "
                      "'zigzag'"),
            std::string::npos);
  // A config a run recorded reads as written, checked or not (a checkpoint of earlier rules).
  const TrainConfig old =
      TrainConfig::from_record("[parallel]\nstrategy = \"ring\"\nteams = 2\n", "manifest.json");
  EXPECT_EQ(old.parallel.teams, 2);
  EXPECT_EQ(old.team_size(), 1);
  // What a checkpoint records reads back to the same spec.
  const TrainConfig back = TrainConfig::from_toml(c.to_toml(), "back.toml");
  EXPECT_EQ(back.parallel.strategy, c.parallel.strategy);
  EXPECT_EQ(back.parallel.teams, c.parallel.teams);
  EXPECT_EQ(back.parallel.inner, c.parallel.inner);
  EXPECT_EQ(back.parallel.ulysses, c.parallel.ulysses);
  EXPECT_EQ(back.parallel.keep_kv, c.parallel.keep_kv);
}

TEST(TrainConfig, IntegersForRealKeysNeedNotBeExactDoubles) {
  // 2^53 + 1 has no exact double: it reads as the nearest one, 2^53.
  const TrainConfig c = TrainConfig::from_toml("[train]\nlr = 9007199254740993\n", "t");
  EXPECT_EQ(c.lr, 9007199254740992.0);
  EXPECT_EQ(TrainConfig::from_toml("[train]\nlr = 3\n", "t").lr, 3.0);
}

TEST(TrainConfig, DtypeIsFp32OrBf16) {
  TrainConfig c;
  c.set("train.dtype=bf16");
  c.validate(1);
  EXPECT_NE(usage_error([&] {
              c.set("train.dtype=fp16");
            }).find("train.dtype must be 'auto', 'fp32' or 'bf16' (got 'fp16')"),
            std::string::npos);
}

TEST(TrainConfig, DitClipShapesAreBounded) {
  const std::string dit = "[model]\nkind = \"dit\"\n";
  // The largest clip: 2^20 frames of 2^16 pixels, patches of 2^10: 2^20 x 64 x 64 tokens.
  const TrainConfig big =
      TrainConfig::from_toml(dit + "patch = 1024\n[data]\nframes = 1048576\nsize = 65536\n", "t");
  EXPECT_EQ(big.seq, int64_t(1) << 32);
  // Beyond it the tokens are not counted (frames x size^2 would wrap int64), and validate says why.
  TrainConfig c = TrainConfig::from_toml(
      dit + "patch = 1\n[data]\nframes = 2147483647\nsize = 2147483647\n", "t");
  EXPECT_NE(usage_error([&] { c.validate(1); }).find("data.frames must be in 1..1048576"),
            std::string::npos);
  c.set("data.frames=8");
  EXPECT_NE(usage_error([&] { c.validate(1); }).find("data.size must be in 1..65536"),
            std::string::npos);
  c.set("model.patch=2048");
  c.set("data.size=65536");
  EXPECT_NE(
      usage_error([&] { c.validate(1); }).find("model.patch (2048), which must be in 1..1024"),
      std::string::npos);
  c.set("model.patch=1024");
  EXPECT_EQ(c.seq, 8 * 64 * 64);
}

}  // namespace
}  // namespace wallfacer::train

namespace wallfacer::train {
namespace {

// model.arch: "llama" is a text model with its own keys; "dit" is model.kind = "dit"; a config
// with model.kind only keeps its meaning; model.rope_scaling reads as a TOML table or by --set,
// and the TOML a checkpoint records reads back to the same values.
TEST(TrainConfig, LlamaArchAndRopeScaling) {
  TrainConfig c = TrainConfig::from_toml(
      "[model]\narch = \"llama\"\nintermediate = 96\nnorm_eps = 1e-6\ntie_embeddings = false\n"
      "qkv_bias = true\nrope_theta = 500000.0\n"
      "rope_scaling = { type = \"llama3\", factor = 8.0, low_freq_factor = 1.0, "
      "high_freq_factor = 4.0, original_max_position_embeddings = 8192 }\n"
      "[data]\ndir = \"d\"\n",
      "l.toml");
  EXPECT_EQ(c.kind, ModelKind::Gpt);
  EXPECT_EQ(c.model.arch, model::Arch::Llama);
  EXPECT_EQ(c.model.intermediate, 96);
  EXPECT_EQ(c.model.norm_eps, 1e-6);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_EQ(c.model.rope_scaling.type, kernels::RopeScalingType::Llama3);
  EXPECT_EQ(c.model.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.model.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_NO_THROW(c.validate(1));
  const TrainConfig back = TrainConfig::from_toml(c.to_toml(), "back.toml");
  EXPECT_TRUE(back.changes_from(c).empty()) << c.to_toml();
  EXPECT_EQ(back.model.arch, model::Arch::Llama);
  EXPECT_EQ(back.model.rope_scaling.type, kernels::RopeScalingType::Llama3);

  c.set("model.rope_scaling.type=linear");
  c.set("model.rope_scaling.factor=2");
  EXPECT_EQ(c.model.rope_scaling.type, kernels::RopeScalingType::Linear);
  EXPECT_EQ(c.model.rope_scaling.factor, 2.0);
  EXPECT_FALSE(TrainConfig::is_shape_key("model.rope_scaling.factor"));
  EXPECT_TRUE(TrainConfig::is_shape_key("model.arch"));
  EXPECT_TRUE(TrainConfig::is_shape_key("model.intermediate"));

  // Any other rope scaling type: one line naming it.
  EXPECT_NE(usage_error([&] { c.set("model.rope_scaling.type=yarn"); }).find("'yarn'"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              TrainConfig::from_toml(
                  "[model]\narch = \"llama\"\nrope_scaling = { type = \"dynamic\" }\n", "x.toml");
            }).find("'dynamic'"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { c.set("model.arch=mamba"); }).find("'mamba'"), std::string::npos);

  // The GPT and the DiT as before: model.kind alone, or model.arch.
  TrainConfig g = TrainConfig::from_toml("[model]\nkind = \"gpt\"\n[data]\ndir = \"d\"\n", "g");
  EXPECT_EQ(g.model.arch, model::Arch::Gpt);
  TrainConfig d = TrainConfig::from_toml("[model]\narch = \"dit\"\n", "d");
  EXPECT_EQ(d.kind, ModelKind::Dit);
  TrainConfig d2 = TrainConfig::from_toml("[model]\nkind = \"dit\"\n", "d2");
  EXPECT_EQ(d2.kind, ModelKind::Dit);
  EXPECT_TRUE(TrainConfig::from_toml(d2.to_toml(), "d3").changes_from(d2).empty());
  // model.norm_eps belongs to the RMSNorm.
  EXPECT_NE(usage_error([&] { g.set("model.norm_eps=1e-6"), g.validate(1); }).find("norm_eps"),
            std::string::npos);
}

}  // namespace
}  // namespace wallfacer::train
