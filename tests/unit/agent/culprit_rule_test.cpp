// The culprit rule (docs/agent-diagnosis.md, "Who hung"): which local rank is killed
// when a deadline passes, from what each rank was doing; and how a Python
// rank's dump (faulthandler stacks, the Flight Recorder line, the end line)
// is read into that.
#include "culprit_rule.hpp"

#include <catch2/catch.hpp>

#include "stack_dump.hpp"

using namespace ddp::agent;
using Where = RankActivity::Where;

namespace {

RankActivity outside(int rank, std::uint64_t issued = 0) {
  RankActivity a;
  a.rank = rank;
  a.local_rank = rank;
  a.where = Where::kOutside;
  a.issued = issued;
  a.evidence = "liveness file";
  return a;
}

RankActivity waiting(int rank, std::uint64_t seq, const std::string& op = "all_reduce") {
  RankActivity a;
  a.rank = rank;
  a.local_rank = rank;
  a.where = Where::kWaiting;
  a.seq = seq;
  a.issued = seq;
  a.op = op;
  a.evidence = "Flight Recorder";
  return a;
}

RankActivity unknown(int rank) {
  RankActivity a;
  a.rank = rank;
  a.local_rank = rank;
  return a;
}

}  // namespace

TEST_CASE("the rank outside every collective is the culprit, whichever rank missed its deadline first") {
  // Eight ranks, rank 1 hangs in its own code; for each rank that may miss
  // first, the verdict is rank 1, and the others wait in all_reduce #1234.
  for (int missed = 0; missed < 8; ++missed) {
    std::vector<RankActivity> ranks;
    for (int r = 0; r < 8; ++r) ranks.push_back(r == 1 ? outside(1, 1233) : waiting(r, 1234));
    const auto v = decide_culprit(missed, ranks, OtherNodes::kNone);
    INFO("missed: " << missed);
    CHECK(v.culprit_local_rank == 1);
    CHECK_FALSE(v.remote);
    CHECK(v.waiting == "ranks 0, 2\u20137 wait in all_reduce #1234 for rank 1");
    if (missed == 1) {
      CHECK(v.why.empty());
    } else {
      CHECK(v.why ==
            "rank " + std::to_string(missed) +
                " missed its deadline but waits in all_reduce #1234 (Flight Recorder); rank 1 is in no "
                "collective (liveness file: 1233 issued, all done)");
    }
  }
}

TEST_CASE("the lowest, a middle and the highest rank are each named when they hang") {
  for (int hung : {0, 1, 3}) {
    std::vector<RankActivity> ranks;
    for (int r = 0; r < 4; ++r) ranks.push_back(r == hung ? outside(r, 6) : waiting(r, 7));
    const int missed = hung == 0 ? 3 : 0;
    const auto v = decide_culprit(missed, ranks, OtherNodes::kNone);
    CHECK(v.culprit_local_rank == hung);
    CHECK_THAT(v.waiting, Catch::EndsWith("wait in all_reduce #7 for rank " + std::to_string(hung)));
  }
}

TEST_CASE("a rank that already issued the collective waited in is not whom it waits for") {
  // Rank 2 is outside every collective but has issued #9: it is not holding #7.
  const auto v = decide_culprit(0, {waiting(0, 7), outside(1, 6), outside(2, 9)}, OtherNodes::kNone);
  CHECK(v.culprit_local_rank == 1);
}

TEST_CASE("of several ranks outside the collectives, the one furthest behind is named") {
  const auto v = decide_culprit(0, {waiting(0, 7), outside(1, 6), outside(2, 5)}, OtherNodes::kNone);
  CHECK(v.culprit_local_rank == 2);
}

TEST_CASE("a rank whose deadline passed while outside any collective is its own culprit") {
  const auto v = decide_culprit(1, {waiting(0, 7), outside(1, 6), waiting(2, 7)}, OtherNodes::kNone);
  CHECK(v.culprit_local_rank == 1);
  CHECK(v.why.empty());
  CHECK(v.waiting == "ranks 0, 2 wait in all_reduce #7 for rank 1");
  // Nothing known of anybody (a native worker without the SDK's counts): as before the rule.
  const auto none = decide_culprit(1, {unknown(0), unknown(1)}, OtherNodes::kNone);
  CHECK(none.culprit_local_rank == 1);
  CHECK(none.waiting.empty());
}

TEST_CASE("when every local rank waits and the job has other nodes, the culprit is theirs to name") {
  const std::vector<RankActivity> ranks = {waiting(4, 12), waiting(5, 12)};
  const auto v = decide_culprit(4, ranks, OtherNodes::kYes);
  CHECK(v.remote);
  CHECK(v.culprit_local_rank == -1);
  CHECK(v.waiting == "ranks 4, 5 wait in all_reduce #12 for a rank on another node");
  // Once the other nodes had their time, the first to miss is named, and why.
  const auto after = decide_culprit(4, ranks, OtherNodes::kSilent);
  CHECK_FALSE(after.remote);
  CHECK(after.culprit_local_rank == 4);
  CHECK_THAT(after.why, Catch::Contains("no other node named the rank they wait for"));
}

TEST_CASE("on one node, every rank in the same collective means the collective itself is stuck") {
  const auto v = decide_culprit(
      2, {waiting(0, 3, "barrier"), waiting(1, 3, "barrier"), waiting(2, 3, "barrier")}, OtherNodes::kNone);
  CHECK(v.culprit_local_rank == 2);
  CHECK(v.why == "every rank waits in barrier #3: the collective itself does not complete");
  CHECK(v.waiting == "ranks 0\u20132 wait in barrier #3 for each other");
}

TEST_CASE("ranks are listed in order with runs of three or more as ranges") {
  CHECK(rank_ranges({7, 0, 2, 3, 4, 5, 6}) == "0, 2\u20137");
  CHECK(rank_ranges({1, 0}) == "0, 1");
  CHECK(rank_ranges({3}) == "3");
  CHECK(rank_ranges({0, 1, 2, 5, 9, 10, 11, 12}) == "0\u20132, 5, 9\u201312");
  CHECK(rank_ranges({}).empty());
}

TEST_CASE("a Python dump gives the main thread's frames, its torch call and the Flight Recorder's counts") {
  RankStack s;
  s.target.python_file = "/x";
  s.text =
      "Thread 0x00007f977026e6c0 (most recent call first):\n"
      "  File \"/site/sitecustomize.py\", line 56 in _ddprun_answer\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
      "\n"
      "Current thread 0x00007f9770529040 (most recent call first):\n"
      "  File \"/venv/torch/distributed/distributed_c10d.py\", line 4181 in all_reduce\n"
      "  File \"/venv/torch/distributed/c10d_logger.py\", line 83 in wrapper\n"
      "  File \"/job/train.py\", line 61 in <module>\n"
      "ddprun-collectives: issued=5 completed=4 backend=gloo\n"
      "ddprun-end-of-dump\n";
  parse_python_dump(s);
  CHECK(s.complete);
  CHECK(s.text.find("ddprun-end-of-dump") == std::string::npos);
  CHECK(s.top_frames.front() == "/venv/torch/distributed/distributed_c10d.py:4181 in all_reduce");
  CHECK(s.top_frames.size() == 3);
  CHECK(s.torch_call == "all_reduce");
  CHECK(s.flight_recorder);
  CHECK(s.issued == 5);
  CHECK(s.completed == 4);

  // A rank in its own code, an older torch without the recorder, no end line.
  RankStack own;
  own.text =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/job/train.py\", line 38 in compute\n";
  parse_python_dump(own);
  CHECK_FALSE(own.complete);
  CHECK_FALSE(own.flight_recorder);
  CHECK(own.torch_call.empty());
  CHECK(own.top_frames == std::vector<std::string>{"/job/train.py:38 in compute"});

  // A line that is not what sitecustomize writes counts for nothing.
  RankStack bad;
  bad.text = "ddprun-collectives: issued=3 completed=9 backend=gloo\nddprun-collectives: issued=x\n";
  parse_python_dump(bad);
  CHECK_FALSE(bad.flight_recorder);
}
