#pragma once
// Subcommands register themselves: each cmd_*.cpp defines a setup function and a static
// registration, so adding a subcommand touches no other file.

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "wallfacer/seqpar/strategy.h"

namespace wallfacer::cli {

// Runs the subcommand after parsing; returns the process exit code.
using Action = std::function<int()>;

// Adds the subcommand and its options to `root` and returns what runs it. Option values live in
// storage the action captures (e.g. a shared_ptr to an options struct).
using Setup = std::function<Action(CLI::App& root)>;

// Registers a subcommand; `order` sorts them in --help. Returns true (for static initialisers).
bool register_command(int order, std::string name, Setup setup);

// --timeout of the commands that run under mpirun, when given (main applies it to
// comm::set_timeout before the command runs; train lets it override train.timeout).
std::optional<double>& timeout_option();

// --strategy into `out`: the choices are the names of the strategy table (seqpar/strategy.h),
// those `pred` accepts when given; the help text is `what` (if any) and the names.
CLI::Option* add_strategy_option(CLI::App& cmd, std::string& out, std::string_view what = {},
                                 bool (*pred)(const seqpar::StrategyTraits&) = nullptr);

}  // namespace wallfacer::cli

#define WALLFACER_COMMAND(order, name, setup)       \
  static const bool wallfacer_command_registered_ = \
      ::wallfacer::cli::register_command(order, name, setup)
