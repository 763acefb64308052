// Process containment tests: every process a test starts carries the test's
// own environment tag, and the test fails if any process with that tag
// survives (read from /proc/PID/environ, so it finds processes that called
// setsid, double-forked or were re-parented to init).
#pragma once

#include "launcher_test_util.hpp"
#include "test_support.hpp"

namespace ddp::test::launcher {

// ProcessTag (tests/support/test_support.hpp): the tag every process of a
// containment test carries.
using ddp::test::ProcessTag;

}  // namespace ddp::test::launcher
