// ddp::init(): the worker's view of the job, read from the launcher's env.
//
// Under ddprun the env names the native store (DDP_STORE_ENDPOINT) and a
// per-round key prefix (DDP_STORE_PREFIX). Under torchrun, or with hand-set
// MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, rank 0 hosts a store in-process and
// the other ranks connect to it (docs/worker-sdk.md, "Env contract").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ddp {

namespace store {
class Store;
}

struct Context {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;     // node rank
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: > 0 after an elastic restart
  std::string run_id;
  std::string master_addr;
  std::uint16_t master_port = 0;
  std::string store_endpoint;  // HOST:PORT of the store this process talks to
  std::string store_prefix;    // every SDK key starts with it (DDP_STORE_PREFIX)
  std::string error_file;      // TORCHELASTIC_ERROR_FILE, may be empty
  // Shared by every ProcessGroup of this process. When rank 0 hosts the store
  // (MASTER_ADDR fallback) this pointer also keeps the server alive: keep the
  // Context until the other ranks are done with the store.
  std::shared_ptr<store::Store> store;

  bool is_main() const { return rank == 0; }
};

struct InitOptions {
  // How long connecting to the store keeps retrying (with backoff) before
  // failing with an error naming HOST:PORT. Env DDP_INIT_TIMEOUT (seconds) overrides.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(60);
};

// Reads and validates the env, connects to (or hosts) the store. Throws
// ddp::ConfigError naming the variable to fix (missing RANK, RANK >= WORLD_SIZE,
// a non-numeric value, ...) and ddp::NetworkError naming HOST:PORT when the
// store cannot be reached.
Context init(InitOptions options = {});

// The env part of init(), without connecting: `getenv` returns nullopt for an
// unset variable. Exposed for tests and for programs that only need the ranks.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
Context parse_env(const EnvLookup& getenv);
Context parse_env();  // the process environment

}  // namespace ddp
