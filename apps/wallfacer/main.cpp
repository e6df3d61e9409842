// wallfacer: one binary, one subcommand per job (train, sample, attn, bench, plan, tune, ...).

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "command.h"
#include "wallfacer/core/error.h"

namespace wallfacer::cli {
namespace {

struct Entry {
  int order;
  std::string name;
  Setup setup;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

}  // namespace

bool register_command(int order, std::string name, Setup setup) {
  registry().push_back({order, std::move(name), std::move(setup)});
  return true;
}

}  // namespace wallfacer::cli

int main(int argc, char** argv) {
  using namespace wallfacer::cli;
  CLI::App app{
      "wallfacer: long-sequence Transformer training with multi-dimensional ring "
      "sequence parallelism"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "wallfacer 0.1.0");

  auto& entries = registry();
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.order < b.order; });
  std::vector<std::pair<std::string, Action>> actions;
  for (auto& e : entries) actions.emplace_back(e.name, e.setup(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "wallfacer: error: %s (see 'wallfacer --help')\n", e.what());
    return 2;
  }

  for (auto& [name, action] : actions) {
    if (!app.got_subcommand(name)) continue;
    try {
      return action();
    } catch (const wallfacer::UsageError& e) {
      std::fprintf(stderr, "wallfacer %s: error: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wallfacer %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  return 2;
}
