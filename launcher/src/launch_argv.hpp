// What ddprun does with its argv beside CLI11's parse (launch_options.cpp):
// argparse's long-option prefixes, the warning for a prefix easy to type by
// mistake, and the shell completion script.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ddp::launcher {

// The option whose long name is `name` (or, with `prefix`, starts with it);
// nullptr if none; ConfigError naming the candidates if several.
const CLI::Option* find_long(const CLI::App& app, const std::string& name, bool prefix);

// argparse (torchrun's parser) takes any unambiguous prefix of a long option:
// --nproc for --nproc_per_node, --nnode=1. Rewrites those to the full name, up
// to the program, whose arguments are left alone. Each rewrite, as typed and
// as rewritten, goes to `expanded` when given.
std::vector<std::string> expand_prefixes(
    const CLI::App& app, std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>>* expanded = nullptr);

// Warnings for abbreviations that are easy to type by mistake: torchrun's
// workers take --local_rank, and given to the launcher it is a prefix of
// --local_ranks_filter, which then hides every other rank's output (argparse
// reads it the same way).
std::vector<std::string> abbreviation_warnings(const CLI::App& app, const std::vector<std::string>& args);

// A completion script for `shell` (bash, zsh, tcsh): ddprun's long flags, then
// files for the program. zsh uses bash's through bashcompinit.
std::string completion_script(const CLI::App& app, const std::string& shell);

}  // namespace ddp::launcher
