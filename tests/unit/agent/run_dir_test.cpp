// Where the temp run directory goes: a memory filesystem when nothing large
// is written there and TMPDIR does not say otherwise, $TMPDIR (or /tmp) else.
#include "run_dir.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "test_support.hpp"

using ddp::agent::RunDir;

namespace {

bool on_tmpfs(const std::string& path) {
  struct statfs st {};
  return ::statfs(path.c_str(), &st) == 0 && st.f_type == TMPFS_MAGIC;
}

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("a temp run dir with no worker logs goes to /dev/shm when TMPDIR is unset") {
  if (!on_tmpfs("/dev/shm")) {
    WARN("SKIP: /dev/shm is not a tmpfs here");
    return;
  }
  const ScopedEnv no_tmpdir("TMPDIR", std::nullopt);
  const ScopedEnv no_runtime("XDG_RUNTIME_DIR", std::nullopt);
  std::string path;
  {
    const RunDir dir("", "rid", /*worker_logs=*/false);
    path = dir.path().string();
    CHECK(dir.is_temp());
    CHECK(path.rfind("/dev/shm/ddprun-rid-", 0) == 0);
    dir.prepare_attempt(0, 2);
    CHECK(std::filesystem::is_directory(dir.worker(0, 1)));
  }
  CHECK_FALSE(std::filesystem::exists(path));  // removed with the RunDir
}

TEST_CASE("a temp run dir that may hold worker logs, or with TMPDIR set, stays in TMPDIR") {
  const ddp::test::TempDir tmp;
  {
    const ScopedEnv tmpdir("TMPDIR", tmp.path().string());
    for (const bool logs : {true, false}) {
      const RunDir dir("", "rid", logs);
      CHECK(dir.path().parent_path() == tmp.path());
    }
  }
  const ScopedEnv no_tmpdir("TMPDIR", std::nullopt);
  const RunDir dir("", "rid", /*worker_logs=*/true);
  CHECK(dir.path().string().rfind("/tmp/ddprun-rid-", 0) == 0);
}

namespace {

void write_file(const std::filesystem::path& path, const std::string& text = "x") {
  std::ofstream(path) << text;
}

// A temp run dir (in a TMPDIR of its own) with two workers' attempt 0,
// filled by `fill`, then kept and closed: its path.
template <class Fill>
std::filesystem::path kept_temp_run_dir(const ddp::test::TempDir& tmp, Fill fill) {
  const ScopedEnv tmpdir("TMPDIR", tmp.path().string());
  RunDir dir("", "rid", /*worker_logs=*/false);
  dir.prepare_attempt(0, 2);
  fill(dir);
  dir.keep();
  return dir.path();
}

}  // namespace

TEST_CASE("a kept run dir keeps what explains the run and drops what only the running agent used") {
  const ddp::test::TempDir tmp;
  const auto path = kept_temp_run_dir(tmp, [](RunDir& dir) {
    for (const char* name : {"fence", "liveness.pipe", "watchdog_timer.pipe", "zygote.sock"}) {
      write_file(dir.path() / name);
    }
    for (int lr = 0; lr < 2; ++lr) {
      write_file(dir.worker(0, lr) / "liveness");
      write_file(dir.worker(0, lr) / "python_stacks.txt", "");
    }
    write_file(dir.worker(0, 1) / "error.json", "{}");
    write_file(dir.attempt(0) / "failure.json", "{}");
  });
  CHECK(std::filesystem::exists(path / "attempt_0" / "failure.json"));
  CHECK(std::filesystem::exists(path / "attempt_0" / "1" / "error.json"));
  CHECK_FALSE(std::filesystem::exists(path / "attempt_0" / "1" / "liveness"));
  CHECK_FALSE(std::filesystem::exists(path / "attempt_0" / "1" / "python_stacks.txt"));
  CHECK_FALSE(std::filesystem::exists(path / "attempt_0" / "0"));  // nothing left in it
  for (const char* name : {"fence", "liveness.pipe", "watchdog_timer.pipe", "zygote.sock"}) {
    CHECK_FALSE(std::filesystem::exists(path / name));
  }
}

TEST_CASE("a kept temp run dir with nothing to read in it is removed") {
  const ddp::test::TempDir tmp;
  const auto path = kept_temp_run_dir(tmp, [](RunDir& dir) {
    write_file(dir.worker(0, 0) / "liveness");
    write_file(dir.path() / "fence");
  });
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a --log_dir run dir keeps its logs and loses the liveness files") {
  const ddp::test::TempDir tmp;
  {
    const RunDir dir(tmp.path(), "job");
    dir.prepare_attempt(0, 1);
    write_file(dir.worker(0, 0) / "stdout.log", "hello\n");
    write_file(dir.worker(0, 0) / "liveness");
    write_file(dir.path() / "fence");
  }
  CHECK(std::filesystem::exists(tmp.path() / "job" / "attempt_0" / "0" / "stdout.log"));
  CHECK_FALSE(std::filesystem::exists(tmp.path() / "job" / "attempt_0" / "0" / "liveness"));
  CHECK_FALSE(std::filesystem::exists(tmp.path() / "job" / "fence"));
}

namespace {

// A temp run dir made in `base` by a child process, filled by `fill`, after
// which the child dies of SIGKILL as a killed agent does: its path.
template <class Fill>
std::filesystem::path killed_agents_run_dir(const std::filesystem::path& base, Fill fill) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::setenv("TMPDIR", base.c_str(), 1);
    auto* dir = new RunDir("", "killed", /*worker_logs=*/false);  // never destroyed: the process dies
    dir->prepare_attempt(0, 2);
    fill(*dir);
    const std::string path = dir->path().string();
    if (::write(fds[1], path.data(), path.size()) < 0) ::_exit(1);
    ::close(fds[1]);
    ::raise(SIGKILL);
    ::_exit(1);
  }
  ::close(fds[1]);
  std::string path;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) path.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
  return path;
}

}  // namespace

TEST_CASE("a run dir whose agent was killed is swept as its agent would have pruned it, no other") {
  const ddp::test::TempDir tmp;
  const auto base = tmp.path() / "base", base2 = tmp.path() / "base2";
  std::filesystem::create_directories(base);
  std::filesystem::create_directories(base2);
  // Each in a base of its own: a child's own sweep sees no other.
  const auto empty = killed_agents_run_dir(base, [](RunDir& dir) {
    write_file(dir.path() / "fence");
    write_file(dir.path() / "liveness.pipe");
    write_file(dir.worker(0, 0) / "liveness");
  });
  const auto with_error = killed_agents_run_dir(base2, [](RunDir& dir) {
    write_file(dir.path() / "fence");
    write_file(dir.worker(0, 1) / "liveness");
    write_file(dir.worker(0, 1) / "error.json", "{}");
  });
  REQUIRE(std::filesystem::exists(empty / "agent.lock"));
  REQUIRE(std::filesystem::exists(with_error / "agent.lock"));
  // A running agent's (its lock held, here by the test) and an older agent's (no lock).
  const auto live = base / "ddprun-live-AAAAAA", old = base / "ddprun-old-BBBBBB";
  std::filesystem::create_directories(live);
  std::filesystem::create_directories(old);
  write_file(live / "fence");
  write_file(old / "fence");
  write_file(live / "agent.lock", "");
  const int held = ::open((live / "agent.lock").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);

  CHECK(RunDir::sweep_stale(base) == 1);
  CHECK(RunDir::sweep_stale(base2) == 1);
  ::close(held);
  CHECK_FALSE(std::filesystem::exists(empty));
  CHECK(std::filesystem::exists(with_error / "attempt_0" / "1" / "error.json"));
  CHECK_FALSE(std::filesystem::exists(with_error / "attempt_0" / "1" / "liveness"));
  CHECK_FALSE(std::filesystem::exists(with_error / "fence"));
  CHECK_FALSE(std::filesystem::exists(with_error / "agent.lock"));
  CHECK(std::filesystem::exists(live / "fence"));
  CHECK(std::filesystem::exists(live / "agent.lock"));
  CHECK(std::filesystem::exists(old / "fence"));
  CHECK(RunDir::sweep_stale(base2) == 0);  // a kept dir is not swept again
}

TEST_CASE("a run dir's agent.lock is gone once its run ends, and a kept dir keeps no lock") {
  const ddp::test::TempDir tmp;
  const auto path = kept_temp_run_dir(tmp, [](RunDir& dir) {
    CHECK(std::filesystem::exists(dir.path() / "agent.lock"));
    write_file(dir.attempt(0) / "failure.json", "{}");
  });
  CHECK(std::filesystem::exists(path / "attempt_0" / "failure.json"));
  CHECK_FALSE(std::filesystem::exists(path / "agent.lock"));
}
