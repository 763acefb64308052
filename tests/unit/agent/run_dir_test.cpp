// Where the temp run directory goes: a memory filesystem when nothing large
// is written there and TMPDIR does not say otherwise, $TMPDIR (or /tmp) else.
#include "run_dir.hpp"

#include <linux/magic.h>
#include <sys/statfs.h>

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
