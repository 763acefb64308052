// Runs N ranks of a worker binary as processes with hand-set env against a
// StoreServer hosted by the test (127.0.0.1, port 0), the way ddprun would.
#pragma once

#include <catch2/catch.hpp>
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

// The lines of `s` ('\n'-terminated).
inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// A failure as the user reads it: exit code `code` and one line on stderr,
// which `says` matches. `r` is a RunResult or a RankResult.
template <typename Result, typename Matcher>
void check_one_line_failure(const Result& r, int code, const Matcher& says) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.code == code);
  CHECK(count_lines(r.err) == 1);
  CHECK_THAT(r.err, says);
}

}  // namespace ddp::test
