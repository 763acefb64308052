// The C++ SDK trainer the re-form tests of a lost node run, on every backend
// (docs/reform.md, "A lost node"): 6 epochs of 2048 samples at 32 per rank
// and step on 4 ranks, 96 steps of at least 40 ms, long enough to kill a node
// mid-run; its checkpoint under `dir`.
#pragma once

#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test {

inline std::vector<std::string> reform_trainer(const TempDir& dir) {
  return {bin("ddp-example-train-reform").string(),
          "--epochs",
          "6",
          "--dataset-size",
          "2048",
          "--step-sleep-ms",
          "40",
          "--checkpoint",
          (dir / "ckpt").string()};
}

}  // namespace ddp::test
