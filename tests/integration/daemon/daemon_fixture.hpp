// Starts the real ddp-rendezvousd on 127.0.0.1 with --port 0 in a temp dir and
// reads its port from --port-file. With `failpoints`, the test build
// ddp-rendezvousd-failpoints runs instead, with them in $DDP_FAILPOINTS.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "raw_client.hpp"
#include "test_support.hpp"

namespace ddp::test {

struct Daemon {
  Daemon(const fs::path& dir, std::vector<std::string> extra = {}, const std::string& failpoints = {})
      : dir_(dir) {
    std::error_code ec;
    fs::remove(dir / "port", ec);
    const auto binary = failpoints.empty() ? "ddp-rendezvousd" : "ddp-rendezvousd-failpoints";
    std::vector<std::string> argv = {
        bin(binary).string(),    "--host",      "127.0.0.1", "--port", "0", "--port-file",
        (dir / "port").string(), "--log-level", "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::map<std::string, std::optional<std::string>> env;
    if (!failpoints.empty()) env["DDP_FAILPOINTS"] = failpoints;
    proc = std::make_unique<Process>(argv, dir, env, "rdzvd");
    port = wait_for_port_file(dir / "port");
    INFO("daemon stderr: " << proc->err());
    REQUIRE(port > 0);
  }

  // A connection that completed the handshake.
  std::unique_ptr<RawClient> client(const std::string& token = {}) const {
    auto c = std::make_unique<RawClient>(port);
    REQUIRE(c->handshake(token) == store::Status::kOk);
    return c;
  }

  fs::path dir_;
  std::unique_ptr<Process> proc;
  int port = -1;
};

// The well-behaved connection keeps being served: a set and a get round-trip.
inline void check_served(RawClient& c, const std::string& tag) {
  auto set = c.call(make_request(store::Op::kSet, {"alive/" + tag}, {tag}));
  REQUIRE(set.status == store::Status::kOk);
  auto get = c.call(make_request(store::Op::kTryGet, {"alive/" + tag}));
  REQUIRE(get.status == store::Status::kOk);
  REQUIRE(get.items.size() == 1);
  CHECK(get.items[0].value == tag);
}

}  // namespace ddp::test
