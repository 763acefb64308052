// ddp-bench subcommands register themselves here; main.cpp dispatches on argv[1].
// A subcommand is one file in bench/ named *_bench.cpp with one
// DDP_BENCH_SUBCOMMAND(...) line; nothing else needs editing to add one.
#pragma once

#include <functional>
#include <string>

namespace ddp::bench {

// argc/argv start at the subcommand name (argv[0] == "store"), ready for CLI11.
using SubcommandFn = std::function<int(int argc, char** argv)>;

bool register_subcommand(const std::string& name, const std::string& summary, SubcommandFn fn);

}  // namespace ddp::bench

#define DDP_BENCH_SUBCOMMAND(name, summary, fn) \
  static const bool ddp_bench_registered_##fn = ::ddp::bench::register_subcommand(name, summary, fn)
