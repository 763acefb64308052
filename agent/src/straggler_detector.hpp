// Which ranks are stragglers (docs/agent-diagnosis.md, "Stragglers"): the pure rule,
// fed with every rank's latest step time as the nodes' status records give
// them. A rank whose step time is over `factor` x the job's median for
// `steps` steps in a row is named; it stays named until a step time of its
// is back under the bar.
//
// Steps arrive a status interval at a time (a mean over the interval's
// steps), so "in a row" counts the steps of consecutive slow intervals.
//
// Thread-safety: none; one owner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddp::agent {

// One rank's numbers from its node's status record.
struct RankSteps {
  int rank = 0;
  std::string node;
  std::string host;         // the node's --local_addr or hostname
  std::uint64_t steps = 0;  // steps measured so far (grows)
  double step_s = -1;       // mean step time of the latest interval; < 0: none yet
};

struct Straggler {
  int rank = 0;
  std::string node;
  std::string host;
  double step_s = 0;
  double median_s = 0;
  double factor = 0;             // step_s / median_s
  std::uint64_t slow_steps = 0;  // in a row, over the bar
};

class StragglerDetector {
 public:
  StragglerDetector(double factor, int steps) : factor_(factor), steps_(steps) {}

  struct Verdict {
    double median_s = -1;               // of the ranks with a step time; < 0: none
    std::size_t ranks = 0;              // ranks with a step time
    std::vector<Straggler> stragglers;  // named now, by rank
  };
  // One look at every rank's latest numbers. A rank's numbers count once:
  // only steps beyond those seen at the last look move its count.
  Verdict update(const std::vector<RankSteps>& ranks);
  // A new round: ranks and step times start over.
  void reset() { seen_.clear(); }

 private:
  struct Seen {
    std::uint64_t steps = 0;
    std::uint64_t slow = 0;
  };
  double factor_;
  std::uint64_t steps_;
  std::map<int, Seen> seen_;
};

// The lower median: with two ranks, the faster one, so one slow rank of two
// still stands out.
double lower_median(std::vector<double> values);

}  // namespace ddp::agent
