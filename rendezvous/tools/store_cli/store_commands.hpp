// ddp-store's commands, one function each, over an open TcpStore. Output is plain
// text for shells and tests; the return value is the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/store/tcp_store.hpp"

namespace ddp::store_cli {

// Exit codes (also in docs and --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotFound = 1;  // missing key, timed out, cas not applied
inline constexpr int kExitUsage = 2;     // bad flag or value, unreadable or wrong token
inline constexpr int kExitUnreachable = 3;

// What the user asked for, filled by main.cpp's CLI11 parser.
struct Command {
  std::string name;  // set get add cas del list watch wait stat
  std::vector<std::string> args;
  std::optional<double> wait_seconds;  // get/wait --timeout
  std::int64_t count = 0;             // watch --count (0: forever)
  std::int64_t from_revision = 0;     // watch --from
};

int run_command(store::TcpStore& store, const Command& cmd);

}  // namespace ddp::store_cli
