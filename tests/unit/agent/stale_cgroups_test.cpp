// How a guard cgroup's name records its owner, and when the owner counts as
// gone: the rule that decides which cgroups the next ddprun kills. And that a
// worker forked into its guard's cgroup starts there.
#include "stale_cgroups.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <string>

#include "cgroup_scope.hpp"

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

TEST_CASE("a child forked into a guard cgroup starts in it, and the cgroup is removed with its scope") {
  auto scope = ddp::guard::CgroupScope::create(::getpid(), ddp::guard::own_cgroup_dir());
  if (!scope) {
    WARN("SKIP: no writable cgroup v2 hierarchy here (needs root or a delegated subtree)");
    return;
  }
  const std::string path = scope->path();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = scope->fork_into();
  if (pid < 0 && (errno == ENOSYS || errno == EINVAL || errno == EPERM)) {
    ::close(fds[0]);
    ::close(fds[1]);
    WARN("SKIP: the kernel refuses clone3(CLONE_INTO_CGROUP) here; the guard then forks and joins");
    return;
  }
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: its own cgroup line, as the kernel reports it, to the parent.
    char buf[512];
    const int fd = ::open("/proc/self/cgroup", O_RDONLY);
    const ssize_t n = fd < 0 ? 0 : ::read(fd, buf, sizeof(buf));
    if (n > 0) [[maybe_unused]]
      auto w = ::write(fds[1], buf, static_cast<std::size_t>(n));
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  // "0::/<...>/ddp-guard.<owner>": the unified hierarchy's line names the scope's directory.
  const auto name = path.substr(path.rfind('/'));
  CHECK_THAT(text, Catch::Contains("0::") && Catch::Contains(name));
  scope.reset();
  CHECK(::access(path.c_str(), F_OK) != 0);
}
