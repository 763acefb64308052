// ddprun for operators: --config files and --print-config, --event_log lines,
// and the live job table of `ddp-store status`, all with the real binaries.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using nlohmann::json;
using Env = EnvOverrides;

namespace {

std::vector<json> read_events(const fs::path& path) {
  std::vector<json> out;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) out.push_back(json::parse(line));  // each line must parse
  return out;
}

// The line of `text` holding `needle` (1-based), for checking reported file lines.
std::string line_with(const std::string& text, const std::string& needle) {
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find(needle) != std::string::npos) return std::to_string(n);
  }
  return "?";
}

}  // namespace

TEST_CASE("a config file supplies flags and the program: command line over file over env") {
  TempDir dir;
  const auto conf = dir / "job.conf";
  write_file(conf,
             "{\n  \"nproc-per-node\": 2,\n  \"rdzv_id\": \"from_file\",\n"
             "  \"max_restarts\": 1,\n  \"no_python\": true,\n"
             "  \"program\": \"" +
                 bin("fake_worker").string() +
                 "\",\n"
                 "  \"args\": [\"--epochs\", \"3\"]\n}\n");
  const Env env = {{"PET_ROLE", "from_env"}, {"PET_RDZV_ID", "env_loses"}, {"PET_MAX_RESTARTS", "9"}};

  auto shown = ddprun({"--config", conf.string(), "--max_restarts=4", "--print-config"}, dir, env);
  REQUIRE(shown.code == 0);
  const std::string at = "file " + conf.string() + ":";
  CHECK(count_lines(shown.out, "nproc_per_node       2 ") == 1);
  CHECK(count_lines(shown.out, at + "2") == 1);  // nproc-per-node
  CHECK(count_lines(shown.out, "from_file") == 1);
  CHECK(count_lines(shown.out, "env_loses") == 0);
  CHECK(count_lines(shown.out, "max_restarts         4 ") == 1);
  CHECK(count_lines(shown.out, "role                 from_env                 env PET_ROLE") == 1);
  CHECK(count_lines(shown.out, "stop_timeout         30                       default") == 1);
  CHECK_THAT(shown.out, Catch::Contains("--epochs 3"));
  CHECK(read_file(dir / "pids").empty());  // nothing launched

  auto ran = ddprun({"--config", conf.string()}, dir,
                    {{"FAKE_PID_FILE", (dir / "pids").string()}, {"FAKE_ENV_DUMP", dir.path().string()}});
  REQUIRE(ran.code == 0);
  CHECK(started_pids(read_file(dir / "pids")).size() == 2);
  const auto dump = read_env_dump(dir / "rank_1.env");
  CHECK(dump.at("TORCHELASTIC_RUN_ID") == "from_file");
  CHECK(dump.at("TORCHELASTIC_MAX_RESTARTS") == "1");
  CHECK_THAT(dump.at("ARGS"), Catch::Contains("--epochs 3"));
}

TEST_CASE("a bad config file is one line naming the file and line and key with exit 2 and nothing started") {
  TempDir dir;
  const Env env = {{"FAKE_PID_FILE", (dir / "pids").string()}};
  const std::string worker = bin("fake_worker").string();

  const std::string unknown = "{\n  \"nproc_per_node\": 1,\n  \"nprocs\": 2\n}\n";
  write_file(dir / "unknown.json", unknown);
  auto r = ddprun({"--config", (dir / "unknown.json").string(), worker}, dir, env);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err, "") == 1);
  CHECK_THAT(r.err, Catch::Contains("unknown.json:" + line_with(unknown, "nprocs") + ": key 'nprocs'"));

  write_file(dir / "broken.json", "{\n  \"nnodes\": 1,\n  \"rdzv_id\" \"x\"\n}\n");
  r = ddprun({"--config", (dir / "broken.json").string(), worker}, dir, env);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err, "") == 1);
  CHECK_THAT(r.err, Catch::Contains("broken.json:3: malformed JSON"));

  r = ddprun({"--config", (dir / "missing.json").string(), worker}, dir, env);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("missing.json"));

  write_file(dir / "switch.json", "{\"standalone\": \"yes please\"}");
  r = ddprun({"--config", (dir / "switch.json").string(), worker}, dir, env);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("switch.json:1: key 'standalone'"));
  CHECK(read_file(dir / "pids").empty());
}

TEST_CASE("the event log records a restart run as JSON lines in lifecycle order") {
  TempDir dir;
  const auto log = dir / "events.jsonl";
  auto r = ddprun({"--nproc_per_node=2", "--max_restarts=1", "--rdzv_id=evjob", "--event_log", log.string(),
                   "--no_python", bin("fake_worker").string()},
                  dir, {{"FAKE_ONLY_RANK", "1"}, {"FAKE_FAIL_ON_RESTART_BELOW", "1"}, {"FAKE_EXIT", "7"}});
  REQUIRE(r.code == 0);
  const auto events = read_events(log);
  const std::vector<std::string> expected = {"rendezvous",   "worker_start", "worker_exit", "restart",
                                             "worker_start", "success",      "shutdown"};
  std::size_t next = 0;
  for (const auto& e : events) {
    CHECK(e.at("run_id") == "evjob");
    CHECK(e.at("ts").get<double>() > 1.6e9);
    CHECK(e.contains("node"));
    CHECK(e.contains("round"));
    CHECK(e.contains("restart_count"));
    const std::string name = e.at("event");
    if (next < expected.size() && name == expected[next]) {
      if (name == "worker_exit") {
        // The one that matters is the failure; successful exits may come first.
        if (e.at("exit_code") != 7) continue;
        CHECK(e.at("rank") == 1);
        CHECK(e.at("local_rank") == 1);
        CHECK(e.at("pid").get<int>() > 0);
      }
      if (name == "worker_start") CHECK(e.at("ranks") == json::array({0, 1}));
      if (name == "restart") {
        CHECK(e.at("restart_count") == 1);
        CHECK_THAT(e.at("reason").get<std::string>(), Catch::Contains("rank 1"));
      }
      ++next;
    }
  }
  CHECK(next == expected.size());
  CHECK(events.back().at("event") == "shutdown");
  CHECK(events.back().at("exit_code") == 0);
}

TEST_CASE("ddp-store status shows both nodes of a running c10d job live from the daemon") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  const std::string& endpoint = daemon.endpoint;
  const auto log = dir / "events.jsonl";
  const auto node = [&](const std::string& name) {
    return std::make_unique<Process>(
        ddprun_argv({"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                     "--rdzv_id=statjob", "--rdzv_conf=last_call_timeout=0.2,keep_alive_interval=0.5",
                     "--stop_timeout=2", "--event_log", log.string(), "--log_level=warn", "--no_python",
                     bin("fake_worker").string()}),
        dir.path(), clean_env({{"FAKE_HANG", "1"}, {"FAKE_PID_FILE", (dir / "pids").string()}}), name);
  };
  auto a = node("node_a");
  auto b = node("node_b");

  RunResult table;
  const bool both_running = wait_for_status(dir, endpoint, "statjob", table, [](const std::string& out) {
    return count_lines(out, "running") == 2 && count_lines(out, "starting") == 0;
  });
  INFO(table.out << table.err << a->err() << b->err());
  REQUIRE(both_running);
  CHECK(count_lines(table.out, "GROUP_RANK") == 1);
  CHECK(count_lines(table.out, " 0/2 ") == 1);
  CHECK(count_lines(table.out, " 1/2 ") == 1);
  CHECK(count_lines(table.out, " 0-1 ") == 1);
  CHECK(count_lines(table.out, " 2-3 ") == 1);
  // "running" is published once every worker has exec'd; each writes its pid
  // file line a moment later.
  REQUIRE(wait_until([&] { return started_pids(read_file(dir / "pids")).size() == 4; }));
  const auto pids = started_pids(read_file(dir / "pids"));
  for (pid_t pid : pids) {
    CHECK_THAT(table.out, Catch::Contains(std::to_string(pid)));
    // The event log is close-on-exec: no worker holds it open.
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      CHECK(fs::read_symlink(fd.path(), ec) != log);
    }
  }

  // An unknown job is exit 1 with one line.
  auto none = store_status(dir, endpoint, "nojob");
  CHECK(none.code == 1);
  CHECK_THAT(none.err, Catch::Contains("nojob"));

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(std::chrono::seconds(20)).has_value());
  CHECK(b->wait(std::chrono::seconds(20)).has_value());
}
