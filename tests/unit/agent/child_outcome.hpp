// What a unit test of the agent saw of one child it started through the
// ProcessRunner or the preload zygote.
#pragma once

#include <sys/types.h>

#include <string>

namespace ddp::test {

struct ChildOutcome {
  pid_t pid = -1;  // negative: the spawn failed with `error`
  std::string error;
  std::string out;
  std::string err;
  int status = -1;  // the wait status
  bool exited = false;
};

}  // namespace ddp::test
