// Helpers for tests that run the real binaries: a temp dir per test, a child
// process with captured output, and polling a predicate with a deadline (tests
// never sleep to synchronise).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::test {

namespace fs = std::filesystem;

// A sanitizer build (CMake DDP_SANITIZE): load tests do less there, where a
// fork or a syscall costs several times more and the point is the races.
inline constexpr bool kSanitized = DDP_SANITIZED != 0;

// Directory of the built executables (build/bin).
fs::path bin_dir();
fs::path bin(const std::string& name);
fs::path source_dir();

// A fresh directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Polls `pred` every few milliseconds until it is true or `timeout` passes.
bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

std::string read_file(const fs::path& path);  // "" when missing
void write_file(const fs::path& path, const std::string& text);

// What execve() takes for `argv`, with the test's own environment changed by
// `env` (a value of nullopt removes a var). Build it before fork(): the child
// then only reads it.
class ExecArgs {
 public:
  ExecArgs(std::vector<std::string> argv, const std::map<std::string, std::optional<std::string>>& env);
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;
  char* path() { return args_[0]; }
  char** argv() { return args_.data(); }
  char** envp() { return envp_.data(); }

 private:
  std::vector<std::string> argv_strings_;
  std::vector<std::string> env_strings_;
  std::vector<char*> args_;
  std::vector<char*> envp_;
};

// A child process: argv[0] is a path; stdout and stderr go to files in `dir`.
// The environment is the test's own plus `env` (a value of nullopt removes a var).
// The destructor SIGKILLs the child's process group if still running, and reaps it.
class Process {
 public:
  Process(std::vector<std::string> argv, const fs::path& dir,
          std::map<std::string, std::optional<std::string>> env = {}, const std::string& name = "proc");
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for exit; returns the exit code, or 128+signal, or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  bool running();
  void signal(int sig);
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  const fs::path& out_path() const { return out_path_; }
  const fs::path& err_path() const { return err_path_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  fs::path out_path_;
  fs::path err_path_;
};

// Runs a command to completion and returns {exit code, stdout+stderr}.
struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};
RunResult run(std::vector<std::string> argv, const fs::path& dir,
              std::map<std::string, std::optional<std::string>> env = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// True if the process `pid` still exists (and is not a zombie).
bool pid_alive(pid_t pid);

// Every process a test starts carries the test's own environment tag
// (DDP_TEST_TAG=<unique>), so that what survives is found however it left
// its parent (setsid, a double fork, re-parented to init): read from
// /proc/PID/environ. The destructor SIGKILLs whatever still carries it, so a
// failing test leaves nothing behind for the next one.
class ProcessTag {
 public:
  ProcessTag();
  ~ProcessTag();
  ProcessTag(const ProcessTag&) = delete;
  ProcessTag& operator=(const ProcessTag&) = delete;

  const std::string& value() const { return value_; }
  std::pair<std::string, std::optional<std::string>> env() const { return {"DDP_TEST_TAG", value_}; }
  // Live (non-zombie) processes whose environment holds the tag.
  std::vector<pid_t> alive() const;
  // Waits (bounded) for every tagged process to be gone; false if some survive.
  bool all_gone(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // "PID: command line" of each one still alive, or "(none)".
  std::string describe() const;

 private:
  std::string value_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, picked at random in
// 3000-9999, below the kernel's ephemeral range (so a server binding port 0 or
// a connect() beside the test is never given it). For flags that need a port up front
// (--master_port, a fixed --rdzv_endpoint); another test process could still
// pick the same one in between, rarely.
int free_port();

struct HttpReply {
  int status = 0;
  std::string headers;  // the header lines, "\r\n"-separated
  std::string body;
};
// GET http://127.0.0.1:<port><path>, Connection: close; status 0 when nothing
// complete came back within `timeout`. `extra_headers`: more header lines,
// each ending in "\r\n" ("Authorization: Bearer T\r\n").
HttpReply http_get(int port, const std::string& path,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10),
                   const std::string& extra_headers = {});

// Reads a port number written by --port-file, waiting until it appears.
int wait_for_port_file(const fs::path& path, std::chrono::milliseconds timeout = std::chrono::seconds(10));

// What one run of a scenario showed, by name ("err", "page.body"...), for
// test cases that each check one thing of it: made once per process, or,
// under a ctest fixture (ddp_add_catch_test_with_run), once for all of them:
// with $`env` naming a directory, the first process saves each entry there as
// a file and the cases' processes read them back. `fresh` drops what an
// earlier run saved (the fixture's own case).
using SavedRun = std::map<std::string, std::string>;
const SavedRun& saved_run(const std::string& env, const std::function<SavedRun()>& run, bool fresh = false);

}  // namespace ddp::test
