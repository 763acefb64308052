// A ddp-rendezvousd for the ddp-store tests, and ddp-store runs against it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test::store_cli {

// One daemon on 127.0.0.1 with a free port, optionally with a token.
class Daemon {
 public:
  explicit Daemon(const TempDir& dir, const std::string& token = "") : dir_(dir) {
    std::vector<std::string> argv = {
        bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
        (dir / "port").string()};
    if (!token.empty()) {
      ddp::test::write_file(dir / "token", token + "\n");
      argv.push_back("--token-file");
      argv.push_back((dir / "token").string());
    }
    proc_ = std::make_unique<Process>(argv, dir.path(), std::map<std::string, std::optional<std::string>>{},
                                      "rendezvousd");
    port_ = ddp::test::wait_for_port_file(dir / "port");
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

  // Runs ddp-store with --endpoint (and the token, when the daemon has one) first.
  RunResult cli(std::vector<std::string> args, bool with_token = true) const {
    std::vector<std::string> argv = {bin("ddp-store").string(), "--endpoint", endpoint()};
    if (with_token && ddp::test::fs::exists(dir_ / "token")) {
      argv.push_back("--token-file");
      argv.push_back((dir_ / "token").string());
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return ddp::test::run(argv, dir_.path(), {}, std::chrono::seconds(30));
  }

 private:
  const TempDir& dir_;
  std::unique_ptr<Process> proc_;
  int port_ = 0;
};

}  // namespace ddp::test::store_cli
