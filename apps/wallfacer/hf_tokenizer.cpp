#include "hf_tokenizer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"

extern char** environ;

namespace wallfacer::cli {
namespace {

namespace fs = std::filesystem;

// scripts/tokenize beside this binary: a build folder of the source tree, or an installed prefix.
std::string find_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> tried;
  if (!ec) {
    for (const char* rel : {"../scripts/tokenize", "../share/wallfacer/tokenize"}) {
      tried.push_back((exe.parent_path() / rel).lexically_normal().string());
      if (fs::is_regular_file(tried.back(), ec)) return tried.back();
    }
  }
  throw UsageError(fmt::format(
      "--tokenizer runs scripts/tokenize, which is not beside this binary (looked for {}): run the "
      "wallfacer of a source tree's build folder or of cmake --install",
      tried.empty() ? std::string("/proc/self/exe") : fmt::format("{}", fmt::join(tried, ", "))));
}

// The last non-empty line of `text`, without the script's "tokenize: error: " prefix.
std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  const std::string prefix = "tokenize: error: ";
  if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
  return last;
}

// The Python that runs the script: $WALLFACER_PYTHON, else python3 on PATH.
std::string python() {
  const char* p = std::getenv("WALLFACER_PYTHON");
  return p && *p ? p : "python3";
}

// Runs `PYTHON scripts/tokenize --tokenizer T MODE` with `input` on its standard input and
// returns its standard output. Input and outputs go through files of a temporary folder, so that
// neither side can block on a full pipe.
std::string run_tokenize(const std::string& tokenizer, const char* mode, const std::string& input) {
  std::error_code ec;
  WF_USAGE_CHECK(fs::is_regular_file(tokenizer, ec), "--tokenizer '{}' is not a file", tokenizer);
  const std::string script = find_script();
  const char* tmp_env = std::getenv("TMPDIR");
  std::string dir = std::string(tmp_env && *tmp_env ? tmp_env : "/tmp") + "/wallfacer-tok-XXXXXX";
  WF_USAGE_CHECK(mkdtemp(dir.data()) != nullptr,
                 "cannot create a temporary folder for --tokenizer under {}: {} (set TMPDIR)",
                 fs::path(dir).parent_path().string(), std::strerror(errno));
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{dir};
  const std::string in = dir + "/in", out = dir + "/out", err = dir + "/err";
  write_file_atomic(in, input);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string py = python(), tok_flag = "--tokenizer", tok = tokenizer, mode_flag = mode,
              script_arg = script;
  char* argv[] = {py.data(),  script_arg.data(), tok_flag.data(),
                  tok.data(), mode_flag.data(),  nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, py.c_str(), &files, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&files);
  WF_USAGE_CHECK(rc == 0,
                 "--tokenizer runs scripts/tokenize with {} ($WALLFACER_PYTHON, else python3 on "
                 "PATH), which cannot be started: {}; it needs Python 3 with the package "
                 "'tokenizers' (PyPI)",
                 py, std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    WF_CHECK(errno == EINTR, "waiting for scripts/tokenize: {}", std::strerror(errno));
  }
  WF_USAGE_CHECK(!WIFEXITED(status) || WEXITSTATUS(status) != 127,
                 "--tokenizer runs scripts/tokenize with {} ($WALLFACER_PYTHON, else python3 on "
                 "PATH), which was not found; it needs Python 3 with the package 'tokenizers' "
                 "(PyPI)",
                 py);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string why = last_line(read_file(err));
    throw UsageError(
        fmt::format("--tokenizer: {}", why.empty() ? std::string("scripts/tokenize failed") : why));
  }
  return read_file(out);
}

}  // namespace

std::vector<int32_t> tokenizer_encode(const std::string& tokenizer, const std::string& text,
                                      int vocab) {
  const std::string out = run_tokenize(tokenizer, "--encode", text);
  std::vector<int32_t> ids;
  std::istringstream words(out);
  std::string word;
  while (words >> word) {
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    WF_CHECK(ec == std::errc() && end == word.data() + word.size() && id >= 0,
             "scripts/tokenize --encode printed '{}', not a token id", word);
    WF_USAGE_CHECK(id < vocab,
                   "--tokenizer {} gives --prompt the id {}, outside the checkpoint's vocabulary "
                   "0..{}: it is not this model's tokenizer",
                   tokenizer, id, vocab - 1);
    ids.push_back(id);
  }
  WF_USAGE_CHECK(!ids.empty(), "--prompt '{}' has no tokens in {}", text, tokenizer);
  return ids;
}

std::string tokenizer_decode(const std::string& tokenizer, const std::vector<int32_t>& ids) {
  std::string text = run_tokenize(tokenizer, "--decode", fmt::format("{}\n", fmt::join(ids, " ")));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace wallfacer::cli
