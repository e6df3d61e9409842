// wallfacer: one binary, one subcommand per job (train, sample, attn, bench, plan, tune, ...).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

CLI::Option* add_strategy_option(CLI::App& cmd, std::string& out, std::string_view what,
                                 bool (*pred)(const seqpar::StrategyTraits&)) {
  std::vector<std::string> names;
  for (const seqpar::StrategyTraits& t : seqpar::strategies())
    if (!pred || pred(t)) names.emplace_back(t.name);
  const std::string list = seqpar::strategy_names(" | ", {}, pred);
  return cmd.add_option("--strategy", out, what.empty() ? list : fmt::format("{}: {}", what, list))
      ->check(CLI::IsMember(names));
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

// A number given as an empty string ('--seed ""') would read as 0, a negative one given to an
// unsigned option would wrap around, and nan or inf passes range checks (every comparison with nan
// is false): all are refused for every number option of every command.
void add_number_checks(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();  // "INT", "FLOAT:NONNEGATIVE", ...
      const std::string kind = type.substr(0, type.find(':'));
      if (kind != "INT" && kind != "UINT" && kind != "FLOAT") continue;
      opt->check(CLI::Validator(
          [kind](std::string& s) -> std::string {
            if (s.empty()) return "an empty value is not a number; give a number";
            if (kind == "UINT" && s.find('-') != std::string::npos)
              return "the value " + s + " is negative; give a number >= 0";
            if (kind == "FLOAT" && !std::isfinite(std::strtod(s.c_str(), nullptr)))
              return "the value " + s + " is not a finite number; give a finite number";
            // A decimal integer past 64 bits would be clamped to the largest value.
            if (kind != "FLOAT" && s.find_first_not_of("-0123456789") == std::string::npos) {
              int64_t i = 0;
              uint64_t u = 0;
              const auto r = kind == "UINT" ? std::from_chars(s.data(), s.data() + s.size(), u)
                                            : std::from_chars(s.data(), s.data() + s.size(), i);
              if (r.ec == std::errc::result_out_of_range)
                return "the value " + s + " is out of range";
            }
            return "";
          },
          ""));
    }
    add_number_checks(*sub);
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
  add_number_checks(app);

  // The first word that is not an option: the subcommand (the main command's options are flags).
  std::string word;
  for (int i = 1; i < argc && word.empty(); ++i)
    if (argv[i][0] != '-') word = argv[i];
  std::string names;
  bool known = false;
  for (const auto& [name, action] : actions) {
    names += (names.empty() ? "" : ", ") + name;
    known = known || name == word;
  }
  const auto unknown_subcommand = [&] {
    return wallfacer::comm::end_job_with_error(
        "wallfacer",
        word.empty()
            ? fmt::format("a subcommand is required: one of {} (see 'wallfacer --help')", names)
            : fmt::format("unknown subcommand '{}': the subcommands are {} (see 'wallfacer "
                          "--help')",
                          word, names),
        2);
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const bool help = dynamic_cast<const CLI::CallForHelp*>(&e) ||
                      dynamic_cast<const CLI::CallForAllHelp*>(&e) ||
                      dynamic_cast<const CLI::CallForVersion*>(&e);
    // `wallfacer NOSUCH --help` is as unknown as `wallfacer NOSUCH`.
    if (app.get_subcommands().empty() && !word.empty() && !known) return unknown_subcommand();
    if (help) return app.exit(e);
    // No subcommand was recognised: name the word given instead, and list the subcommands.
    if (app.get_subcommands().empty() && e.get_name() == "RequiredError")
      return unknown_subcommand();
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
