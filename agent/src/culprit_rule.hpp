// Who hung (docs/agent-diagnosis.md, "Who hung: the culprit rule"). When a rank's
// deadline passes, the ranks of a job that wait in a collective on a hung
// one miss theirs too, often first. The culprit is the rank that is not
// waiting on a peer: outside any collective, or behind the others in the
// sequence of collectives. What each local rank was doing comes from the
// liveness file (a worker SDK rank counts its collectives), torch's Flight
// Recorder and the Python stacks (a torch rank); the rule itself is here,
// pure and unit-tested.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::agent {

// What one local rank was doing when the deadline passed.
struct RankActivity {
  enum class Where : std::uint8_t {
    kUnknown,  // nothing tells (a native worker without the SDK's counts, no stack)
    kOutside,  // in no collective: not waiting on a peer
    kWaiting,  // in a collective, waiting for its peers
  };
  int rank = 0;
  int local_rank = 0;
  Where where = Where::kUnknown;
  std::string op;            // the collective waited in ("all_reduce"), when known
  std::uint64_t seq = 0;     // its number (from 1, the same on every rank); 0: unknown
  std::uint64_t issued = 0;  // collectives issued so far; 0: unknown
  std::string evidence;      // "liveness file", "Flight Recorder", "stack"
  // When its own earliest deadline is (passed or not); max when it has none.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct CulpritVerdict {
  // The local rank to kill; -1 when the culprit is on another node (remote).
  int culprit_local_rank = -1;
  bool remote = false;
  // "ranks 0, 2–7 wait in all_reduce #1234 for rank 1"; empty when no local
  // rank waits on a peer.
  std::string waiting;
  // How the culprit was told from the rank whose deadline passed, when it is
  // another rank: "rank 0 missed its deadline first, waiting in all_reduce
  // #6 (Flight Recorder); rank 1 is in no collective (stack)".
  std::string why;
};

// Whether the job has ranks on other nodes, which the local ranks may be
// waiting for; and whether those nodes were already given their time to
// name the rank they hold (then the rule decides among the local ranks).
enum class OtherNodes : std::uint8_t { kNone, kYes, kSilent };

// `missed`: the local rank whose deadline passed.
CulpritVerdict decide_culprit(int missed, const std::vector<RankActivity>& ranks, OtherNodes other_nodes);

// "0, 2–7": ranks in order, runs of three or more as a range.
std::string rank_ranges(std::vector<int> ranks);

}  // namespace ddp::agent
