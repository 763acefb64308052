// Health checks before a node joins (docs/agent-recovery.md, "Health checks"): the
// real ddprun with a failing, a flaky and a hanging --health_check, a full and
// an unwritable --health_paths entry, a slow store, no NVML, and a two-node
// job where `ddp-store status` shows the unhealthy node while the other waits.
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher_test_util.hpp"
#include "loopback_listener.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

std::vector<std::string> standalone(std::vector<std::string> flags) {
  std::vector<std::string> args = {"--standalone", "--health_retry_interval=0.05"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
  return args;
}

// ddprun kept the node out (exit 5: unhealthy, it gave up) and said `why`.
void check_unhealthy(const RunResult& r, const std::string& why) {
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK_THAT(r.err, Catch::Contains(why));
}

std::vector<nlohmann::json> events(const fs::path& log, const std::string& name) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_file(log));
  std::string line;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("event") == name) out.push_back(std::move(j));
  }
  return out;
}

// A tmpfs of 1 MiB at `dir` (mount options `extra`), unmounted on
// destruction; `ok` is false where mounting is not permitted.
struct SmallTmpfs {
  SmallTmpfs(const fs::path& dir, const std::string& extra) : path(dir) {
    fs::create_directories(dir);
    ok = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=1m" + extra).c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (ok) ::umount2(path.c_str(), MNT_DETACH);
  }
  fs::path path;
  bool ok = false;
};

// A TCP relay to `upstream` on 127.0.0.1 that holds every reply for `delay`:
// a store across a slow network.
class SlowProxy {
 public:
  SlowProxy(int upstream, std::chrono::milliseconds delay) : upstream_(upstream), delay_(delay) {
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~SlowProxy() {
    stop_ = true;
    accept_.join();  // before the pumps: it adds them
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  int port() const { return listener_.port(); }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = connect_loopback(upstream_);
      if (server < 0) {
        ::close(client);
        continue;
      }
      fds_.insert(fds_.end(), {client, server});
      pumps_.emplace_back([this, client, server] { pump(client, server, {}); });
      pumps_.emplace_back([this, client, server] { pump(server, client, delay_); });
    }
  }
  // from -> to, each chunk after `delay`; ends (and closes both) on EOF or stop.
  void pump(int from, int to, std::chrono::milliseconds delay) {
    char buf[65536];
    while (!stop_) {
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::read(from, buf, sizeof(buf));
      if (n <= 0) break;
      std::this_thread::sleep_for(delay);
      if (::write(to, buf, static_cast<std::size_t>(n)) != n) break;
    }
    ::shutdown(to, SHUT_RDWR);
    ::shutdown(from, SHUT_RDWR);
  }
  int upstream_;
  std::chrono::milliseconds delay_;
  LoopbackListener listener_;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::vector<std::thread> pumps_;  // two per connection
  std::vector<int> fds_;            // closed once the pumps are joined
};

}  // namespace

TEST_CASE(
    "a failing --health_check keeps the node out, retries, and gives up with exit 5 naming the reason") {
  TempDir dir;
  const auto log = dir / "events.jsonl";
  auto r = ddprun(standalone({"--health_check", "echo checking >&2; echo ECC errors on GPU 2 >&2; exit 3",
                              "--health_retries=2", "--event_log", log.string()}),
                  dir, {{"FAKE_PID_FILE", (dir / "pids").string()}});
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(count_lines(r.err,
                    "node unhealthy, not joining (command check): --health_check exited with 3: ECC "
                    "errors on GPU 2; checking again in") == 2);
  REQUIRE(count_lines(r.err, "ddprun: error:") == 1);
  CHECK_THAT(r.err,
             Catch::Contains("ddprun: error: node unhealthy (command check): --health_check exited with "
                             "3: ECC errors on GPU 2; gave up after 3 failed health checks "
                             "(--health_retries=2)"));
  CHECK_FALSE(fs::exists(dir / "pids"));  // no worker ever started
  const auto unhealthy = events(log, "unhealthy");
  REQUIRE(unhealthy.size() == 3);
  CHECK(unhealthy[0].at("check") == "command");
  CHECK(unhealthy[0].at("reason") == "--health_check exited with 3: ECC errors on GPU 2");
  CHECK(unhealthy[2].at("failures") == 3);
  CHECK(events(log, "rendezvous").empty());
  const auto failure = events(log, "failure");
  REQUIRE(failure.size() == 1);
  CHECK(failure[0].at("exit_code") == 5);
}

TEST_CASE("a --health_check that fails once and then passes lets the node join and the job run") {
  TempDir dir;
  const auto marker = (dir / "checked_once").string();
  auto r = ddprun(standalone({"--health_check",
                              "test -e " + marker + " || { touch " + marker + "; echo not yet >&2; exit 1; }",
                              "--nproc_per_node=2"}),
                  dir);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err, "not joining (command check): --health_check exited with 1: not yet") == 1);
  CHECK(count_lines(r.err, "node healthy again after 1 failed health check(s): joining") == 1);
}

TEST_CASE("a hanging --health_check is killed at its timeout with everything it started") {
  TempDir dir;
  ProcessTag tag;
  const auto start = std::chrono::steady_clock::now();
  auto r = ddprun(standalone({"--health_check", "sleep 300 & sleep 300", "--health_check_timeout=0.3",
                              "--health_retries=1"}),
                  dir, {tag.env()});
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(count_lines(r.err,
                    "not joining (command check): --health_check did not finish within "
                    "--health_check_timeout=0.3 s; killed; checking again") == 1);
  CHECK(count_lines(r.err,
                    "ddprun: error: node unhealthy (command check): --health_check did not finish within "
                    "--health_check_timeout=0.3 s; killed; gave up after 2") == 1);
  CHECK(took < std::chrono::seconds(10));
  CHECK(tag.all_gone(std::chrono::seconds(5)));
  INFO(tag.describe());
}

// Processes that leave the check's process group: a setsid child and a
// double-fork daemon, both ignoring SIGTERM.
constexpr const char* kEscapingChildren =
    "(setsid sh -c 'trap \"\" TERM HUP INT; exec sleep 1000' &); "
    "( trap '' TERM HUP INT; sleep 1001 & ); ";

TEST_CASE("a --health_check's setsid child and double-fork daemon do not outlive it") {
  TempDir dir;
  ProcessTag tag;
  auto r =
      ddprun(standalone({"--health_check", std::string(kEscapingChildren) + "echo all good >&2; exit 0"}),
             dir, {tag.env()});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("stopping") == std::string::npos);  // the check's guard says nothing on ddprun's stderr
  CHECK(tag.all_gone(std::chrono::seconds(5)));
  INFO(tag.describe());
}

TEST_CASE("a failing --health_check's reason is its own last line, and what it left is killed") {
  TempDir dir;
  ProcessTag tag;
  auto r =
      ddprun(standalone({"--health_check", std::string(kEscapingChildren) + "echo ECC errors >&2; exit 4",
                         "--health_retries=0"}),
             dir, {tag.env()});
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(count_lines(
            r.err, "node unhealthy (command check): --health_check exited with 4: ECC errors; gave up") == 1);
  CHECK(tag.all_gone(std::chrono::seconds(5)));
  INFO(tag.describe());
}

TEST_CASE("a --health_check killed at its timeout leaves no setsid child or daemon behind") {
  TempDir dir;
  ProcessTag tag;
  auto r = ddprun(standalone({"--health_check", std::string(kEscapingChildren) + "sleep 300",
                              "--health_check_timeout=0.5", "--health_retries=1"}),
                  dir, {tag.env()});
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(count_lines(r.err, "--health_check did not finish within --health_check_timeout=0.5 s; killed") == 2);
  CHECK(tag.all_gone(std::chrono::seconds(5)));
  INFO(tag.describe());
}

TEST_CASE("a --health_check reason with terminal escapes is shown escaped on ddprun's stderr") {
  TempDir dir;
  const auto log = dir / "events.jsonl";
  // A window title (ESC ] ... BEL), a colour and a right-to-left override.
  auto r = ddprun(standalone({"--health_check",
                              R"(printf 'bad \033]0;pwned\007 \033[31mRED \342\200\256evil\n' >&2; exit 1)",
                              "--health_retries=1", "--event_log", log.string()}),
                  dir);
  INFO(r.err);
  CHECK(r.code == 5);
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find('\x07') == std::string::npos);
  const std::string shown = R"(--health_check exited with 1: bad \x1b]0;pwned\x07 \x1b[31mRED \u202eevil)";
  CHECK(count_lines(r.err, "node unhealthy, not joining (command check): " + shown + "; checking again") ==
        1);
  CHECK(count_lines(r.err, "ddprun: error: node unhealthy (command check): " + shown + "; gave up") == 1);
  // The event log is JSON: it keeps the bytes, escaped as JSON escapes them.
  CHECK(events(log, "unhealthy").at(0).at("reason") ==
        "--health_check exited with 1: bad \x1b]0;pwned\x07 \x1b[31mRED \u202e"
        "evil");
}

TEST_CASE("a full --health_paths entry and a full --log_dir keep the node out") {
  TempDir dir;
  SmallTmpfs fs1(dir / "full", "");
  if (!fs1.ok) {
    WARN("SKIP: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)");
    return;
  }
  // Fill it: the last write fails with ENOSPC.
  run({"/bin/sh", "-c", "dd if=/dev/zero of=" + (dir / "full" / "fill").string() + " bs=64k 2>/dev/null"},
      dir.path());
  auto r = ddprun(
      standalone({"--health_paths", (dir / "full").string(), "--health_min_free_mb=0", "--health_retries=0"}),
      dir);
  check_unhealthy(r, "node unhealthy (path check): --health_paths " + (dir / "full").string() +
                         ": cannot write a file: No space left on device");

  // Below the free-space bound: under 1 MiB of tmpfs left against the default 100 MiB.
  fs::remove(dir / "full" / "fill");
  r = ddprun(standalone({"--log_dir", (dir / "full").string(), "--health_retries=0"}), dir);
  check_unhealthy(r, "(path check): --log_dir " + (dir / "full").string() +
                         ": 0 MiB free, below --health_min_free_mb=100");
}

TEST_CASE("an unwritable or missing --health_paths entry keeps the node out") {
  TempDir dir;
  fs::create_directories(dir / "ro");
  SmallTmpfs ro(dir / "ro", ",ro");
  if (!ro.ok) {
    if (::geteuid() == 0) {
      WARN("SKIP: cannot mount a tmpfs here, and root writes into any mode");
      return;
    }
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  }
  auto r = ddprun(standalone({"--health_paths", "/tmp," + (dir / "ro").string(), "--health_min_free_mb=0",
                              "--health_retries=0"}),
                  dir);
  check_unhealthy(r, "--health_paths " + (dir / "ro").string() + ": cannot create a file: " +
                         (ro.ok ? "Read-only file system" : "Permission denied"));
  r = ddprun(standalone({"--health_paths", (dir / "missing").string(), "--health_retries=0"}), dir);
  check_unhealthy(r, "--health_paths " + (dir / "missing").string() +
                         ": cannot open the directory: No such file or directory");
}

TEST_CASE("a store slower than --health_store_rtt_ms keeps the node out, and within the bound it joins") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  REQUIRE(daemon.port > 0);
  // 2 s against a bound of 1 s (the default): a loaded or sanitized run's
  // round trip stays under the bound, the proxy's never does.
  SlowProxy slow(daemon.port, std::chrono::milliseconds(2000));
  const auto node = [&](const std::string& endpoint, const std::string& id) {
    return ddprun(
        {"--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint, "--rdzv_id=" + id,
         "--health_store_rtt_ms=1000", "--health_retries=0", "--no_python", bin("fake_worker").string()},
        dir);
  };
  auto r = node("127.0.0.1:" + std::to_string(slow.port()), "slowjob");
  check_unhealthy(r, "node unhealthy (store check): store round trip ");
  CHECK_THAT(r.err, Catch::Contains("over --health_store_rtt_ms=1000"));
  r = node(daemon.endpoint, "fastjob");
  INFO(r.err);
  CHECK(r.code == 0);
}

TEST_CASE("without NVML the GPU check is skipped with one note, and --health_gpus=N is unhealthy") {
  TempDir dir;
  // Two rounds (one restart): the note is logged once.
  auto r = ddprun(standalone({"--max_restarts=1", "--log_level=debug"}), dir, {{"FAKE_EXIT", "3"}});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err, "no GPU check: cannot load libnvidia-ml.so.1") == 1);  // a debug line

  r = ddprun(standalone({"--health_gpus=1", "--health_retries=0"}), dir);
  check_unhealthy(r, "node unhealthy (gpus check): --health_gpus=1 but cannot load libnvidia-ml.so.1");

  // A job told it has no GPUs is not checked.
  r = ddprun(standalone({"--log_level=debug"}), dir, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err, "no GPU check") == 0);
}

// NVML answers through bin/fake_nvml/libnvidia-ml.so.1 (fake_nvml.cpp).
TEST_CASE(
    "the default --health_gpus=auto joins a node with fewer GPUs than workers, not one that lost a GPU") {
  TempDir dir;
  const std::string nvml = bin("fake_nvml").string();
  // Two gloo workers on a one-GPU node: torchrun runs them, and so does ddprun.
  auto r = ddprun(standalone({"--nproc_per_node=2", "--log_level=debug"}), dir,
                  {{"LD_LIBRARY_PATH", nvml}, {"DDP_TEST_FAKE_NVML_GPUS", "1"}});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err,
                    "1 GPU(s) visible for --nproc_per_node=2: the workers share them or use none "
                    "(--health_gpus=2 would keep such a node out)") == 1);
  CHECK_THAT(r.err, Catch::Contains("all 2 local workers succeeded"));
  CHECK(count_lines(r.err, "no GPU check") == 0);

  // An explicit count is one.
  r = ddprun(standalone({"--nproc_per_node=2", "--health_gpus=2", "--health_retries=0"}), dir,
             {{"LD_LIBRARY_PATH", nvml}, {"DDP_TEST_FAKE_NVML_GPUS", "1"}});
  check_unhealthy(r, "node unhealthy (gpus check): 1 GPU(s) visible, fewer than --health_gpus=2");

  // A GPU lost between two rounds: the first attempt's workers take one away
  // (by rename: the agent may stop one mid-way) and fail; the restart round's
  // check keeps the node out.
  const auto gpus = dir / "gpus";
  const auto lose_one = [&](int nproc) {
    write_file(gpus, "2");
    return ddprun(
        {"--standalone", "--health_retries=0", "--nproc_per_node=" + std::to_string(nproc),
         "--max_restarts=1", "--no_python", "/bin/sh", "-c",
         "echo 1 >" + gpus.string() + ".$$ && mv " + gpus.string() + ".$$ " + gpus.string() + "; exit 1"},
        dir, {{"LD_LIBRARY_PATH", nvml}, {"DDP_TEST_FAKE_NVML_GPUS_FILE", gpus.string()}});
  };
  check_unhealthy(
      lose_one(2),
      "node unhealthy (gpus check): 1 GPU(s) visible, fewer than --nproc_per_node=2 (--health_gpus=auto)");
  check_unhealthy(lose_one(3),
                  "node unhealthy (gpus check): 1 GPU(s) visible, fewer than the 2 this node had at "
                  "its first check (--health_gpus=auto)");

  // A GPU that is counted but does not answer (fallen off the bus).
  r = ddprun(standalone({"--health_retries=0"}), dir,
             {{"LD_LIBRARY_PATH", nvml}, {"DDP_TEST_FAKE_NVML_GPUS", "2"}, {"DDP_TEST_FAKE_NVML_LOST", "1"}});
  check_unhealthy(r, "node unhealthy (gpus check): GPU 1 does not answer: GPU is lost");

  // CUDA_VISIBLE_DEVICES: the list ends at an index past the devices, as in
  // CUDA; UUIDs count.
  r = ddprun(
      standalone({"--health_gpus=2", "--health_retries=0"}), dir,
      {{"LD_LIBRARY_PATH", nvml}, {"DDP_TEST_FAKE_NVML_GPUS", "2"}, {"CUDA_VISIBLE_DEVICES", "0,4095,1"}});
  check_unhealthy(r, "1 GPU(s) visible (CUDA_VISIBLE_DEVICES=0,4095,1), fewer than --health_gpus=2");
  r = ddprun(standalone({"--health_gpus=2"}), dir,
             {{"LD_LIBRARY_PATH", nvml},
              {"DDP_TEST_FAKE_NVML_GPUS", "2"},
              {"CUDA_VISIBLE_DEVICES", "GPU-fake-1,0"}});
  INFO(r.err);
  CHECK(r.code == 0);
}

TEST_CASE("health flags out of range get one line naming the flag and exit 2") {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--health_retries=-1", "--health_retries: '-1' is not an integer in 0..1000"},
      {"--health_check_timeout=0", "--health_check_timeout: '0' is not a number of seconds > 0"},
      {"--health_retry_interval=soon", "--health_retry_interval: 'soon' is not a number of seconds > 0"},
      {"--health_gpus=many", "--health_gpus: 'many' is not auto or a number of GPUs >= 0"},
      {"--health_store_rtt_ms=-5", "--health_store_rtt_ms: '-5' is not a number of milliseconds >= 0"},
      {"--health_min_free_mb=1.5", "--health_min_free_mb: '1.5' is not a number of MiB >= 0"},
  };
  for (const auto& [flag, line] : cases) {
    auto r = ddprun({"--standalone", flag, "--no_python", bin("fake_worker").string()}, dir);
    INFO(flag << "\n" << r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err, "ddprun: error: " + line) == 1);
  }
}

TEST_CASE("on a two-node c10d job ddp-store status shows the unhealthy node while the healthy one waits") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  REQUIRE(daemon.port > 0);
  const auto node = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--nnodes=2",
                                     "--rdzv_backend=c10d",
                                     "--rdzv_endpoint=" + daemon.endpoint,
                                     "--rdzv_id=healthjob",
                                     "--local_addr=" + name,
                                     "--log_level=warn",
                                     "--rdzv_conf=join_timeout=60"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
    return std::make_unique<Process>(ddprun_argv(args), dir.path(), clean_env({}), name);
  };
  auto good = node("good", {});
  auto bad = node("bad", {"--health_check", "echo GPU 3 fell off the bus >&2; false", "--health_retries=100",
                          "--health_retry_interval=0.2"});
  RunResult table;
  const bool shown = wait_for_status(dir, daemon.endpoint, "healthjob", table, [](const std::string& out) {
    return count_lines(out, "unhealthy: --health_check exited with 1: GPU 3 fell off the bus") == 1;
  });
  INFO(table.out << table.err << "\ngood:\n" << good->err() << "\nbad:\n" << bad->err());
  CHECK(shown);
  CHECK(count_lines(table.out, " bad ") == 1);
  // It holds no ranks yet: the workers it would start stand in for them.
  CHECK(count_lines(table.out, "? (1 local)") == 1);
  // The healthy node is still waiting for a second node; neither has exited.
  CHECK_FALSE(good->wait(std::chrono::milliseconds(0)).has_value());
  CHECK_FALSE(bad->wait(std::chrono::milliseconds(0)).has_value());
}
