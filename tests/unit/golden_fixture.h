#pragma once
// Reader of the PyTorch golden fixtures in tests/golden/: NAME.json lists float64 arrays (name,
// offset and size in elements) stored back to back in NAME.bin.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace wallfacer::golden {

struct GoldenFixture {
  nlohmann::json meta;
  std::map<std::string, std::vector<double>> arrays;
  std::vector<float> f32(const std::string& name) const {
    const auto& a = arrays.at(name);
    return std::vector<float>(a.begin(), a.end());
  }
};

inline GoldenFixture load_golden_fixture(const std::string& name) {
  const std::string dir = std::string(WALLFACER_SOURCE_DIR) + "/tests/golden/";
  GoldenFixture g;
  std::ifstream js(dir + name + ".json");
  EXPECT_TRUE(js.good()) << "missing " << dir << name << ".json";
  g.meta = nlohmann::json::parse(js);
  std::ifstream bin(dir + name + ".bin", std::ios::binary);
  for (const auto& a : g.meta["arrays"]) {
    std::vector<double> v(a["size"].get<size_t>());
    bin.seekg(std::streamoff(a["offset"].get<int64_t>() * 8));
    bin.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 8));
    EXPECT_TRUE(bin.good()) << "short read of " << a["name"];
    g.arrays[a["name"].get<std::string>()] = std::move(v);
  }
  return g;
}

}  // namespace wallfacer::golden
