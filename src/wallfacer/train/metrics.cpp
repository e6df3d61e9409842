#include "wallfacer/train/metrics.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"

namespace wallfacer::train {

MetricsLine parse_metrics_line(const std::string& path, int64_t number, const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const auto damaged = [&](const std::string& why) {
    return Error(fmt::format(
        "{}:{}: damaged metrics line ({}): each line must be a JSON object with an integer "
        "\"step\" >= 1 and a number \"loss\"; repair or delete the line, or start over with "
        "--overwrite",
        path, number, why));
  };
  if (!j.is_object()) throw damaged("not a JSON object");
  const auto step = j.find("step");
  if (step == j.end()) throw damaged("no \"step\"");
  // An integer in 1..2^63-1; a float (1e300), a negative or a string is refused, not converted.
  const bool in_range = step->is_number_unsigned()
                            ? step->get<uint64_t>() >= 1 && step->get<uint64_t>() <= INT64_MAX
                            : step->is_number_integer() && step->get<int64_t>() >= 1;
  if (!in_range) throw damaged(fmt::format("\"step\" is {}", step->dump()));
  const auto loss = j.find("loss");
  if (loss == j.end() || !loss->is_number()) throw damaged("no numeric \"loss\"");
  MetricsLine m;
  m.step = step->get<int64_t>();
  m.loss = loss->get<double>();
  const auto val = j.find("val_loss");
  if (val != j.end()) {
    if (!val->is_number()) throw damaged(fmt::format("\"val_loss\" is {}", val->dump()));
    m.has_val = true;
    m.val_loss = val->get<double>();
  }
  return m;
}

std::string trim_metrics(const std::string& path, int64_t last_step) {
  std::string kept, note;
  if (last_step > 0 && std::filesystem::exists(path)) {
    const std::string text = read_file(path);
    size_t begin = 0;
    for (int64_t number = 1; begin < text.size(); ++number) {
      const size_t end = text.find('\n', begin);
      const std::string line = text.substr(begin, end == std::string::npos ? end : end - begin);
      if (end == std::string::npos) {
        // The last line, cut off: dropped when it does not read as a line, said either way.
        try {
          if (parse_metrics_line(path, number, line).step <= last_step) kept += line + "\n";
        } catch (const Error&) {
        }
        note = fmt::format("dropped the incomplete last line {} of '{}' (a write cut off)", number,
                           path);
        break;
      }
      if (parse_metrics_line(path, number, line).step <= last_step) kept += line + "\n";
      begin = end + 1;
    }
  }
  write_file_atomic(path, kept);
  return note;
}

std::string MetricsWriter::open(const std::string& path, int64_t last_step) {
  path_ = path;
  std::string note = trim_metrics(path, last_step);
  out_.open(path, std::ios::app);
  WF_CHECK(out_.good(), "cannot open '{}' for writing: {}", path, std::strerror(errno));
  bytes_ = std::filesystem::file_size(path);
  return note;
}

void MetricsWriter::append(int64_t step, const std::string& line) {
  out_ << line;
  out_.flush();
  if (!out_.good()) {
    // No half line: the file ends with the last complete one.
    const int e = errno;
    out_.close();
    std::error_code ec;
    std::filesystem::resize_file(path_, bytes_, ec);
    WF_CHECK(false, "cannot write step {} to '{}': {} (the lines before it are kept)", step, path_,
             std::strerror(e));
  }
  bytes_ += line.size();
}

}  // namespace wallfacer::train
