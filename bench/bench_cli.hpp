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

// --max-connecting, as every bench of simulated clients takes it: at least 1
// (with 0 no client would ever connect, and the run would wait forever).
inline void add_max_connecting(CLI::App& app, int& max_connecting) {
  app.add_option("--max-connecting", max_connecting, "connects in flight at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
}

}  // namespace ddp::bench
