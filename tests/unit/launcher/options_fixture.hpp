// The steps the tests of ddprun's options share: argv -> LaunchOptions (a
// run, not help), a host of known size, and translate_options' one-line error.
#pragma once

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher::test {
using Env = std::map<std::string, std::string>;

inline LaunchOptions parse(std::vector<std::string> args, const Env& env = {}) {
  args.insert(args.begin(), "ddprun");
  auto out = parse_command_line(args, env);
  REQUIRE(out.kind == ParseOutcome::Kind::kRun);
  return out.options;
}

inline HostInfo host(int gpus = 0, int cpus = 6) {
  HostInfo h;
  h.hostname = "node-a";
  h.pid = 42;
  h.gpu_count = gpus;
  h.cpu_count = cpus;
  h.env = {{"PATH", "/usr/bin:/bin"}};
  return h;
}

inline ddp::agent::AgentConfig translate(std::vector<std::string> args, const HostInfo& h = host()) {
  return translate_options(parse(std::move(args)), h);
}

// The one-line error translate gives, for REQUIRE_THAT on its flag.
inline std::string error_of(std::vector<std::string> args, const HostInfo& h = host()) {
  try {
    translate(std::move(args), h);
  } catch (const ddp::ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  return "<no error>";
}

}  // namespace ddp::launcher::test
