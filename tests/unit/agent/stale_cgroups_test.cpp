// How a guard cgroup's name records its owner, and when the owner counts as
// gone: the rule that decides which cgroups the next ddprun kills.
#include "stale_cgroups.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

using ddp::guard::GuardOwner;
using ddp::guard::owner_alive;
using ddp::guard::owner_name;
using ddp::guard::parse_guard_cgroup;

TEST_CASE("a guard cgroup's name is parsed back into its owner") {
  const auto o = parse_guard_cgroup("ddp-guard." + owner_name(::getpid()));
  REQUIRE(o);
  CHECK(o->pid == ::getpid());
  CHECK(o->start_time > 0);
  CHECK(o->pid_ns > 0);
}

TEST_CASE("names not of the guard's form are never taken for guard cgroups") {
  for (const char* name : {"ddp-guard.12", "ddp-guard.12.34", "ddp-guard.12.34.56.78", "ddp-guard.x.1.2",
                           "ddp-guard..1.2", "ddp-guard.0.1.2", "ddp-guard.-3.1.2", "ddp-guard.1.2.3 ",
                           "xddp-guard.1.2.3", "system.slice", "ddp-guard.12345"}) {
    INFO(name);
    CHECK_FALSE(parse_guard_cgroup(name));
  }
}

TEST_CASE("an owner is alive while its process runs, and gone once it exited or its pid was reused") {
  const auto self = *parse_guard_cgroup("ddp-guard." + owner_name(::getpid()));
  CHECK(owner_alive(self));
  // The same pid with another start time: a new process that got the old pid.
  GuardOwner reused = self;
  reused.start_time += 1;
  CHECK_FALSE(owner_alive(reused));

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  const auto gone = *parse_guard_cgroup("ddp-guard." + owner_name(child));
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK_FALSE(owner_alive(gone));
}

TEST_CASE("an owner in another pid namespace is never judged from this one") {
  GuardOwner foreign = *parse_guard_cgroup("ddp-guard." + owner_name(::getpid()));
  foreign.pid_ns += 1;
  foreign.start_time += 1;  // would be "gone" here
  CHECK(owner_alive(foreign));
}
