// wallfacer: one binary, one subcommand per job (train, sample, attn, bench, plan, tune, ...).

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/kernels/isa.h"

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

std::optional<double>& timeout_option() {
  static std::optional<double> t;
  return t;
}

}  // namespace wallfacer::cli

namespace {

// Every command takes --max-memory (the limit of memory sizing, wallfacer/core/memory.h).
void add_memory_option(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    sub->add_option_function<double>(
           "--max-memory", [](double gib) { wallfacer::set_memory_limit(gib * (1 << 30)); },
           "GiB this process may use; bigger jobs stop before allocating (default: the "
           "machine's memory shared by the ranks on it)")
        ->check(CLI::PositiveNumber);
  }
}

// The commands that run under mpirun take --timeout (the watchdog's limit).
void add_timeout_option(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    if (name != "train" && name != "attn" && name != "tune") continue;
    sub->add_option_function<double>(
           "--timeout", [](double s) { wallfacer::cli::timeout_option() = s; },
           "Seconds a wait for another rank may last before the job is aborted (0: no limit; "
           "default 600, or train.timeout)")
        ->check(CLI::NonNegativeNumber);
  }
}

}  // namespace

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
  add_timeout_option(app);
  add_memory_option(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return wallfacer::comm::end_job_with_error(
        "wallfacer", fmt::format("{} (see 'wallfacer --help')", e.what()), 2);
  }
  if (timeout_option()) wallfacer::comm::set_timeout(*timeout_option());

  // Every error ends the whole job (all ranks) with its message: 2 for bad input, 1 otherwise.
  for (auto& [name, action] : actions) {
    if (!app.got_subcommand(name)) continue;
    const std::string prefix = "wallfacer " + name;
    try {
      wallfacer::kernels::isa::active();  // a bad WALLFACER_CPU stops before any work
      return action();
    } catch (const wallfacer::UsageError& e) {
      return wallfacer::comm::end_job_with_error(prefix, e.what(), 2);
    } catch (const std::exception& e) {
      return wallfacer::comm::end_job_with_error(prefix, e.what(), 1);
    }
  }
  return 2;
}
