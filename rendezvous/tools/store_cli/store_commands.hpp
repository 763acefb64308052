// ddp-store's commands, one function each, over an open TcpStore. Output is plain
// text for shells and tests; the return value is the process exit code. Keys
// and values come from whoever wrote them: see Command::escape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/exit_code.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::store_cli {

// Exit codes (also in docs and --help), the codes of every ddp executable:
// not found = missing key, timed out, cas not applied; usage = bad flag or
// value, unreadable or wrong token; unreachable = no store at the endpoint.
inline constexpr int kExitOk = exit_code(ExitCode::kOk);
inline constexpr int kExitNotFound = exit_code(ExitCode::kFailed);
inline constexpr int kExitUsage = exit_code(ExitCode::kConfig);
inline constexpr int kExitUnreachable = exit_code(ExitCode::kRendezvous);

// What the user asked for, filled by main.cpp's CLI11 parser.
struct Command {
  std::string name;  // set get add cas del list watch wait stat
  std::vector<std::string> args;
  std::optional<double> wait_seconds;  // get/wait --timeout
  std::int64_t count = 0;              // watch --count (0: forever)
  std::int64_t from_revision = 0;      // watch --from
  // Store keys and values through printable() (--escape; by default when
  // stdout is a terminal); otherwise byte for byte, for scripts.
  bool escape = false;
};

int run_command(store::TcpStore& store, const Command& cmd);

}  // namespace ddp::store_cli
