// Synthetic videos, rectified-flow sampling and the GIF writer.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/gif.h"
#include "wallfacer/model/dit_sampler.h"
#include "wallfacer/train/video.h"

namespace wallfacer::train {
namespace {

TEST(Video, ClipsAreDeterministicDistinctAndMove) {
  VideoSpec spec;
  spec.frames = 4;
  spec.size = 16;
  std::vector<float> a(size_t(spec.values())), b(a.size()), c(a.size());
  const int la = render_clip(spec, 5, 17, a.data());
  EXPECT_EQ(render_clip(spec, 5, 17, b.data()), la);
  EXPECT_EQ(a, b);
  render_clip(spec, 5, 18, c.data());
  EXPECT_NE(a, c);
  for (float v : a) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
  // Consecutive frames differ (the shapes move) and every label appears over a few clips.
  const int64_t frame = int64_t(spec.size) * spec.size * spec.channels;
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + frame, a.begin() + frame));
  std::set<int> labels;
  for (int64_t i = 0; i < 40; ++i) labels.insert(render_clip(spec, 5, i, c.data()));
  EXPECT_EQ(labels.size(), size_t(kVideoShapeKinds));
}

TEST(Video, FlowTimeAndNoiseStatistics) {
  double mean = 0, sq = 0, tmean = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double x = flow_noise(3, 7, 2, i);
    mean += x;
    sq += x * x;
    const float t = flow_time(3, i, 0, TimeSampling::LogitNormal);
    ASSERT_TRUE(t > 0.0f && t < 1.0f);
    tmean += t;
  }
  EXPECT_NEAR(mean / n, 0.0, 0.03);
  EXPECT_NEAR(sq / n, 1.0, 0.05);
  EXPECT_NEAR(tmean / n, 0.5, 0.01);  // logit-normal(0, 1) is symmetric about 1/2
  EXPECT_EQ(flow_noise(3, 7, 2, 11), flow_noise(3, 7, 2, 11));
  EXPECT_NE(flow_noise(3, 7, 2, 11), flow_noise(3, 8, 2, 11));
  EXPECT_THROW(parse_time_sampling("normal"), UsageError);
}

// Independent GIF reader: walks the blocks and decodes variable-width LZW.
struct Decoded {
  int width = 0, height = 0;
  std::vector<std::vector<uint8_t>> frames;  // palette indices
};

Decoded decode_gif(const std::vector<uint8_t>& g) {
  Decoded d;
  EXPECT_EQ(std::string(g.begin(), g.begin() + 6), "GIF89a");
  d.width = g[6] | g[7] << 8;
  d.height = g[8] | g[9] << 8;
  size_t i = 13 + ((g[10] & 0x80) ? 3u * (2u << (g[10] & 7)) : 0u);
  auto skip_blocks = [&] {
    while (g[i] != 0) i += size_t(g[i]) + 1;
    ++i;
  };
  while (i < g.size() && g[i] != 0x3B) {
    if (g[i] == 0x21) {
      i += 2;
      skip_blocks();
      continue;
    }
    EXPECT_EQ(g[i], 0x2C);
    const int min_code = g[i + 10];
    i += 11;
    std::vector<uint8_t> data;
    while (g[i] != 0) {
      data.insert(data.end(), g.begin() + long(i) + 1, g.begin() + long(i) + 1 + g[i]);
      i += size_t(g[i]) + 1;
    }
    ++i;
    const int clear = 1 << min_code, end = clear + 1;
    std::vector<std::vector<uint8_t>> table;
    auto reset = [&] {
      table.clear();
      for (int c = 0; c < clear + 2; ++c) table.push_back({uint8_t(c)});
    };
    reset();
    int width = min_code + 1, prev = -1;
    size_t bit = 0;
    std::vector<uint8_t> out;
    while (bit + size_t(width) <= data.size() * 8) {
      int code = 0;
      for (int k = 0; k < width; ++k, ++bit) code |= ((data[bit / 8] >> (bit % 8)) & 1) << k;
      if (code == clear) {
        reset();
        width = min_code + 1;
        prev = -1;
        continue;
      }
      if (code == end) break;
      std::vector<uint8_t> entry;
      if (code < int(table.size())) {
        entry = table[size_t(code)];
        if (prev >= 0) {
          auto e = table[size_t(prev)];
          e.push_back(entry[0]);
          table.push_back(e);
        }
      } else {
        entry = table[size_t(prev)];
        entry.push_back(entry[0]);
        table.push_back(entry);
      }
      out.insert(out.end(), entry.begin(), entry.end());
      prev = code;
      if (int(table.size()) == (1 << width) && width < 12) ++width;
    }
    d.frames.push_back(out);
  }
  return d;
}

TEST(Gif, DecodesToTheQuantisedFrames) {
  const int count = 3, h = 7, w = 45;  // 315 pixels: several clear codes per frame
  std::vector<uint8_t> rgb(size_t(count * h * w * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t((i * 37 + i / 3) % 256);
  const Decoded d = decode_gif(encode_gif(rgb.data(), count, h, w, 10));
  EXPECT_EQ(d.width, w);
  EXPECT_EQ(d.height, h);
  ASSERT_EQ(d.frames.size(), size_t(count));
  for (int f = 0; f < count; ++f) {
    ASSERT_EQ(d.frames[size_t(f)].size(), size_t(h * w));
    for (int p = 0; p < h * w; ++p) {
      const uint8_t* c = &rgb[size_t((f * h * w + p) * 3)];
      const int want =
          (c[0] * 7 + 127) / 255 << 5 | (c[1] * 7 + 127) / 255 << 2 | (c[2] * 3 + 127) / 255;
      ASSERT_EQ(d.frames[size_t(f)][size_t(p)], want) << "frame " << f << " pixel " << p;
    }
  }
}

TEST(Gif, FailedWriteLeavesNoTemporaryFile) {
  // A file-size limit stands in for a full disk: the write fails part-way.
  const auto dir = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "gif_full";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "x.gif").string();
  std::vector<uint8_t> rgb(size_t(4) * 32 * 32 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 7919 % 251);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 100;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    write_gif(path, rgb.data(), 4, 32, 32, 10);
  } catch (const Error&) {
    threw = true;
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  write_gif(path, rgb.data(), 4, 32, 32, 10);  // without the limit it is written whole
  EXPECT_EQ(std::filesystem::file_size(path), encode_gif(rgb.data(), 4, 32, 32, 10).size());
}

TEST(DitSample, GifHasTheConfiguredFramesAndSize) {
  model::DitConfig cfg;
  cfg.frames = 5;
  cfg.size = 8;
  cfg.patch = 2;
  cfg.dim = 24;
  cfg.heads = 2;
  cfg.layers = 1;
  cfg.freq_dim = 8;
  cfg.classes = 4;
  std::vector<float> params(size_t(model::dit_num_params(cfg)));
  model::dit_init_params(cfg, params.data(), 3);
  const auto clip = model::dit_sample_clip(cfg, params.data(), 3, 2, 9);
  ASSERT_EQ(int64_t(clip.size()), cfg.clip_values());
  const std::string path =
      (std::filesystem::temp_directory_path() / "wallfacer_dit_sample_test.gif").string();
  model::write_clip_gif(path, cfg, clip.data(), 3, 10);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  const Decoded d = decode_gif(bytes);
  EXPECT_EQ(d.width, 24);
  EXPECT_EQ(d.height, 24);
  EXPECT_EQ(d.frames.size(), size_t(cfg.frames));
  for (const auto& f : d.frames) EXPECT_EQ(f.size(), size_t(24 * 24));
  EXPECT_THROW(model::dit_sample_clip(cfg, params.data(), 3, 4, 9), UsageError);
}

}  // namespace
}  // namespace wallfacer::train
