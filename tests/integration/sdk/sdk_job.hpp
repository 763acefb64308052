// Runs N ranks of a worker binary as processes with hand-set env against a
// StoreServer hosted by the test (127.0.0.1, port 0), the way ddprun would.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddp/store/store_server.hpp"
#include "test_support.hpp"

namespace ddp::test {

struct RankResult {
  int code = -1;
  std::string out;
  std::string err;
};

class SdkJob {
 public:
  SdkJob();
  ~SdkJob();
  std::string endpoint() const;
  // Starts `world` ranks of `argv` (argv[0] a path), waits for all of them.
  std::vector<RankResult> run(const std::vector<std::string>& argv, int world,
                              std::map<std::string, std::optional<std::string>> extra_env = {},
                              std::chrono::milliseconds timeout = std::chrono::seconds(90));
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::unique_ptr<store::StoreServer> server_;
  int job_ = 0;
};

// All of a rank's output for a failure message.
std::string describe(const std::vector<RankResult>& results);

}  // namespace ddp::test
