// How every ddp-bench subcommand parses its flags: the one place that decides
// what a bad flag prints and which exit code it gives.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

namespace ddp::bench {

// Parses `app` from argv (argv[0] is the subcommand's name). nullopt: go on
// with the run. Otherwise the exit code to return at once: 0 after --help,
// 2 (usage) after one line naming the subcommand and what was wrong.
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "ddp-bench %s: %s\n", argv[0], e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace ddp::bench
