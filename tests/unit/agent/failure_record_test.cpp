// The failure report an agent writes to the store for the daemon's status
// page (failure_record.hpp), read back by the daemon's reader (job_records.hpp).
#include "failure_record.hpp"

#include <catch2/catch.hpp>

#include "job_records.hpp"

using namespace ddp::agent;

TEST_CASE("a hung worker's failure record carries its stack, and the daemon reads it back, bounded") {
  WorkerFailure f;
  f.host = "gpu2";
  f.rank = 5;
  f.local_rank = 1;
  f.pid = 4242;
  f.signal = 9;
  f.time = std::chrono::system_clock::time_point(std::chrono::seconds(1800000000));
  f.error =
      ErrorFileContent{"RuntimeError: stuck", std::string(10000, 'x') + "\nRuntimeError: stuck", "", ""};
  for (int i = 0; i < 50; ++i) f.stderr_tail.push_back("line " + std::to_string(i));
  HangInfo h;
  h.source = "heartbeat";
  h.detail = "no heartbeat for 5.0 s";
  for (int i = 0; i < 100; ++i) h.top_frames.push_back("train.py:" + std::to_string(i) + " in step");
  h.other_ranks = {"[rank 4] waiting in: all_reduce"};
  f.hang = h;
  FailureReport report{"job", "default", 2, 1, 3, {f}};
  const auto text = failure_record(report, f, "rank 5 on gpu2: SIGKILL (hung)", "gpu2_77", 3);
  CHECK(text.size() < 16384);

  const auto read = ddp::store::server::read_failure_record("gpu2_77", text);
  REQUIRE(read);
  CHECK(read->summary == "rank 5 on gpu2: SIGKILL (hung)");
  CHECK(read->host == "gpu2");
  CHECK(read->rank == 5);
  CHECK(read->round == 3);
  CHECK(read->time == 1800000000);
  CHECK(read->hang == "heartbeat missed (no heartbeat for 5.0 s)");
  REQUIRE(read->frames.size() == 32);
  CHECK(read->frames.front() == "train.py:0 in step");
  CHECK(read->other_ranks == std::vector<std::string>{"[rank 4] waiting in: all_reduce"});
  // The end of the traceback (the exception) and of stderr are what is kept.
  CHECK(read->traceback.size() == 4096);
  CHECK(read->traceback.ends_with("\nRuntimeError: stuck"));
  REQUIRE(read->stderr_tail.size() == 20);
  CHECK(read->stderr_tail.back() == "line 49");
}
