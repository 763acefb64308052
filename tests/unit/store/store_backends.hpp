// The Store implementations the conformance suite runs against. Each backend
// is a Catch2 TEMPLATE_TEST_CASE type that owns whatever its store needs (for
// TcpStore: an in-process StoreServer on 127.0.0.1, port 0).
#pragma once

#include <chrono>
#include <memory>

#include "ddp/store/memory_store.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::test {

struct MemoryBackend {
  static constexpr const char* kName = "MemoryStore";
  store::MemoryStore memory;
  store::Store& store() { return memory; }
};

inline store::StoreServerOptions loopback_server_options() {
  store::StoreServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  return opts;
}

inline store::TcpStoreOptions client_options(std::uint16_t port) {
  store::TcpStoreOptions opts;
  opts.endpoint = Endpoint{"127.0.0.1", port};
  opts.connect_timeout = std::chrono::seconds(5);
  opts.request_timeout = std::chrono::seconds(5);
  return opts;
}

struct TcpBackend {
  static constexpr const char* kName = "TcpStore";
  std::unique_ptr<store::StoreServer> server;
  std::unique_ptr<store::TcpStore> client;
  TcpBackend() {
    server = std::make_unique<store::StoreServer>(loopback_server_options());
    server->start();
    client = std::make_unique<store::TcpStore>(client_options(server->port()));
  }
  ~TcpBackend() {
    client.reset();  // before the server, so the client does not see it vanish
    server.reset();
  }
  store::Store& store() { return *client; }
};

}  // namespace ddp::test
