// A PyTorch TCPStore endpoint that forwards to a job's store under a key
// prefix. ddprun runs one per agent, on loopback, and hands its port to the
// torch workers as MASTER_ADDR/MASTER_PORT: every job and every rendezvous
// round then sees a store namespace of its own (docs/rendezvous.md, "Torch
// workers' store"), although torch's env:// rendezvous always uses the same
// "/worker/attempt_<n>/" keys.
//
// Each accepted connection gets its own connection to the store (native
// protocol, with the job's token) and every request keeps its place: blocking
// WAIT/GET are parked by the store, not here, and CANCEL_WAIT reaches the WAIT
// it cancels. The proxy owns no key and no timer of its clients.
//
// Lanes: a client process belongs to a lane (ddprun: its LOCAL_RANK, read
// from the environment of the process at the other end of the loopback
// connection). A lane whose connections have all closed starts a new
// generation when it connects again, and a generation past the first puts
// its keys under "gen_<g>/" of the round's prefix. A script that destroys its
// process group and calls init_process_group again (torch writes the same
// keys every time) so meets fresh keys, as under a new torch-hosted store,
// while the ranks of one init, which connect in the same generation, share
// them. A client whose lane cannot be found keeps the first generation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/protocol.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::store {

struct TorchProxyOptions {
  // Loopback by default: the proxy presents the job's token on its clients'
  // behalf, so only processes on this host may reach it.
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks a free one; see port()
  // The environment variable naming a client process's lane ("": no lanes).
  std::string lane_env;
  // Finds the lane of the client connecting from 127.0.0.1:<port>; unset:
  // `lane_env` of the connecting process (a descendant of this one).
  std::function<std::optional<std::string>(std::uint16_t client_port)> lane_of;
  Limits limits;
  // How long a connection's first connect to the store keeps retrying (the
  // store may be restarting) before the client's connection is closed.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // How a client that opens without VALIDATE is read (torch 1.x and 2.0, or 2.1);
  // the same choice as the store the agent would host (--rdzv_conf).
  TorchLegacyProtocol torch_legacy_protocol = TorchLegacyProtocol::kTorch1;
};

// Where connections accepted from now on go.
struct TorchProxyTarget {
  Endpoint store;          // speaks the native protocol (ddp-rendezvousd or a StoreServer)
  std::string token;       // empty: none
  std::string key_prefix;  // ends with "/", e.g. "/job1/worker/round_3/"
};

// Owns one event-loop thread. Thread-safety: every method may be called from
// any thread. The destructor stops and joins.
class TorchStoreProxy {
 public:
  explicit TorchStoreProxy(TorchProxyOptions options);
  ~TorchStoreProxy();
  TorchStoreProxy(const TorchStoreProxy&) = delete;
  TorchStoreProxy& operator=(const TorchStoreProxy&) = delete;

  // Binds and listens (NetworkError naming the address when it cannot), then
  // starts the loop. Connections accepted before the first set_target() are
  // closed.
  void start();
  std::uint16_t port() const;  // valid after start()
  // Connections accepted after this call forward to `target`; open ones of an
  // earlier target are closed (their round is over). Throws ConfigError for a
  // prefix that does not end with "/".
  void set_target(TorchProxyTarget target);
  // Closes every connection and joins the loop. Idempotent.
  void stop();
  // connections (open), accepted, requests (forwarded), failed_connects,
  // generations (started past a lane's first, this round).
  std::map<std::string, std::int64_t> stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::store
