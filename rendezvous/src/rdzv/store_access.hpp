// How a handler reaches its store: connect as a client, or host a StoreServer in
// this process when this node owns the endpoint. Private to ddp_rdzv.
#pragma once

#include <memory>
#include <string>

#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/store.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::rdzv::detail {

struct StoreAccess {
  std::unique_ptr<store::StoreServer> server;  // set when this process hosts the store
  std::shared_ptr<store::Store> client;
};

enum class HostMode : std::uint8_t {
  kNever,    // always a client
  kAlways,   // must host (static node 0, RendezvousConfig::is_host)
  kIfLocal,  // host when the endpoint is this machine and its port is free (torchrun's is_host)
};

// What an endpoint nobody serves within the join timeout is: a RendezvousError
// for static (exit 3: node 0 may come later), a ConfigError for c10d (exit 2:
// the endpoint is wrong).
enum class Unreachable : std::uint8_t { kRendezvousError, kConfigError };

// A StoreServer for this job's nodes or workers, started: listening on `host`
// and `port` (0: a free one), with the job's token and torch legacy protocol.
// Throws NetworkError when it cannot listen.
std::unique_ptr<store::StoreServer> host_store(const RendezvousConfig& config, const std::string& host,
                                               std::uint16_t port);

// `flag` names what the user typed the endpoint with (--rdzv_endpoint or
// --master_addr/--master_port), for error messages. A client connects with
// retry until config.join_timeout. Every failure is converted here, once.
StoreAccess open_store(const RendezvousConfig& config, HostMode mode, const std::string& flag,
                       Unreachable unreachable = Unreachable::kRendezvousError);

// True when `host` names this machine: a loopback address, "localhost", this
// machine's hostname, or an address of one of its interfaces.
bool is_local_host(const std::string& host);

}  // namespace ddp::rdzv::detail
