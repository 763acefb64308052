// --on_failure=reform (docs/reform.md): a failed worker is replaced, or given
// up, while its siblings keep their processes; the agent writes the
// generation and size to the workers' store.
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ddp/store/job_keys.hpp"
#include "launcher_test_util.hpp"
#include "reform_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace ddp::test::launcher::reform;
using namespace std::chrono_literals;

namespace {

// ddprun's argv for node `n` of a c10d job `id` of two nodes on `daemon`, two
// fake workers each, in reform mode.
std::vector<std::string> c10d_node(const LocalDaemon& daemon, const std::string& id,
                                   const std::string& nnodes, int n, const std::string& max_restarts) {
  return ddprun_argv({"--nnodes=" + nnodes, "--rdzv_backend=c10d", "--rdzv_endpoint=" + daemon.endpoint,
                      "--rdzv_id=" + id, "--rdzv_conf=join_timeout=30,last_call_timeout=10",
                      "--local_addr=node" + std::to_string(n), "--nproc_per_node=2", "--on_failure=reform",
                      "--max_restarts=" + max_restarts, "--no_python", bin("fake_worker").string()});
}

// Two such nodes on a daemon of their own, every rank a fake worker in a
// ddp::ElasticGroup that runs 5 s; built once each rank has started.
struct TwoNodeJob {
  TempDir dir;
  LocalDaemon daemon{dir};
  fs::path pid_file = dir / "pids";
  std::optional<Process> n0, n1;
  std::vector<pid_t> started = std::vector<pid_t>(4, -1);

  TwoNodeJob(const std::string& id, const std::string& nnodes, const std::string& max_restarts) {
    REQUIRE(daemon.port > 0);
    const auto env = clean_env({{"FAKE_PID_FILE", pid_file.string()},
                                {"FAKE_ELASTIC_JOIN", "1"},
                                {"FAKE_ENV_DUMP", dir.path().string()},
                                {"FAKE_SLEEP_MS", "5000"}});
    n0.emplace(c10d_node(daemon, id, nnodes, 0, max_restarts), dir.path(), env, "node0");
    n1.emplace(c10d_node(daemon, id, nnodes, 1, max_restarts), dir.path(), env, "node1");
    for (int r = 0; r < 4; ++r) started[static_cast<std::size_t>(r)] = wait_for_start(pid_file, r, 1);
  }
  // SIGKILL to the first process of `rank`.
  void kill_first(int rank) {
    const pid_t pid = started[static_cast<std::size_t>(rank)];
    REQUIRE(pid > 0);
    REQUIRE(::kill(pid, SIGKILL) == 0);
  }
  std::string err() const { return "node 0:\n" + n0->err() + "node 1:\n" + n1->err(); }
  // Both nodes exit 0 within 30 s.
  void require_success() {
    CHECK(n0->wait(30s) == std::optional<int>(0));
    CHECK(n1->wait(30s) == std::optional<int>(0));
  }
};

// `ddprun --standalone --nproc_per_node=2 --on_failure=reform --max_restarts=1`
// of fake workers in a ddp::ElasticGroup whose rank 1 fails on the first
// attempt with `message` in its error file (of exception type `type` when
// not empty), their env dumped in `dir`.
RunResult rank1_fails_once(const TempDir& dir, const std::string& message, const std::string& type) {
  EnvOverrides env = {{"FAKE_ONLY_RANK", "1"},
                      {"FAKE_ELASTIC_JOIN", "1"},
                      {"FAKE_ERROR_MESSAGE", message},
                      {"FAKE_FAIL_ON_RESTART_BELOW", "1"},
                      // Rank 0 still runs when rank 1 fails: a failure after a
                      // rank finished restarts every worker instead.
                      {"FAKE_OTHERS_SLEEP_MS", "2000"},
                      {"FAKE_ENV_DUMP", dir.path().string()}};
  if (!type.empty()) env["FAKE_ERROR_TYPE"] = type;
  return ddprun({"--standalone", "--nproc_per_node=2", "--on_failure=reform", "--max_restarts=1",
                 "--no_python", bin("fake_worker").string()},
                dir, env);
}

}  // namespace

TEST_CASE("on_failure=reform: two workers killed at once each get a replacement and a worker_start line") {
  TempDir dir;
  const auto pid_file = dir / "pids";
  const auto events = dir / "events.jsonl";
  Process job = standalone_reform_job(dir, 4, "4000", {"--max_restarts=2", "--event_log", events.string()});
  std::vector<pid_t> first;
  for (int r = 0; r < 4; ++r) first.push_back(wait_for_start(pid_file, r, 1));
  REQUIRE(first[1] > 0);
  REQUIRE(first[2] > 0);
  REQUIRE(::kill(first[1], SIGKILL) == 0);
  REQUIRE(::kill(first[2], SIGKILL) == 0);
  const pid_t second1 = wait_for_start(pid_file, 1, 2);
  const pid_t second2 = wait_for_start(pid_file, 2, 2);
  INFO(job.err());
  REQUIRE(second1 > 0);
  REQUIRE(second2 > 0);
  CHECK(job.wait(30s) == std::optional<int>(0));
  // However the two replacements' spawns overlap, each is named in a line of its own.
  std::set<pid_t> replaced;
  std::istringstream lines(read_file(events));
  for (std::string line; std::getline(lines, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.at("event") != "worker_start" || !e.contains("replacement")) continue;
    REQUIRE(e.at("pids").size() == 1);
    replaced.insert(e.at("pids")[0].get<pid_t>());
  }
  CHECK(replaced == std::set<pid_t>{second1, second2});
}

TEST_CASE(
    "on_failure=reform: when the agent cannot write the loss to the workers' store it restarts every worker, "
    "spending one restart") {
  TempDir dir;
  const auto pid_file = dir / "pids";
  Process job = standalone_reform_job(dir, 2, "3000", {"--max_restarts=1"});
  const pid_t victim = wait_for_start(pid_file, 1, 1);
  REQUIRE(victim > 0);
  REQUIRE(wait_for_start(pid_file, 0, 1) > 0);
  // R/size holds what no add can count on: the agent's add(R/size) fails
  // after its probe of the store succeeded.
  const auto env = read_env_dump(dir / "rank_1.env");
  const auto set =
      run({bin("ddp-store").string(), "--endpoint", env.at("DDP_STORE_ENDPOINT"), "set",
           ddp::store::keys::reform_size_key(ddp::store::keys::reform_prefix(env.at("DDP_STORE_PREFIX"))),
           "not-a-number"},
          dir.path());
  REQUIRE(set.code == 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  const auto code = job.wait(60s);
  const auto err = job.err();
  INFO(err);
  // One failure, one restart: max_restarts=1 is enough.
  CHECK(code == std::optional<int>(0));
  CHECK(count_lines(err, "reform: cannot write to the workers' store at ") == 1);
  CHECK(count_lines(err, "restarting workers (1/1)") == 1);
  CHECK_THAT(err, !Catch::Contains("is spent"));
  CHECK(pids_of(pid_file, 0, "start").size() == 2);
  CHECK(pids_of(pid_file, 1, "start").size() == 2);
  CHECK(read_env_dump(dir / "rank_0.env").at("TORCHELASTIC_RESTART_COUNT") == "1");
}

TEST_CASE(
    "on_failure=reform with the restarts spent: the job goes on without the slot while MIN nodes' workers "
    "are left") {
  TwoNodeJob job("shrink", "1:2", "0");
  INFO(job.err());
  job.kill_first(3);
  const auto& started = job.started;
  job.require_success();
  // Nobody replaced it, and the three others ran to their own end.
  CHECK(pids_of(job.pid_file, 3, "start").size() == 1);
  for (int r = 0; r < 3; ++r) {
    CHECK(pids_of(job.pid_file, r, "exit") == std::vector<pid_t>{started[static_cast<std::size_t>(r)]});
  }
  const auto dump = read_env_dump(job.dir / "rank_0.env");
  auto keys = reform_keys(job.dir, job.daemon.endpoint, dump.at("DDP_STORE_PREFIX"));
  CHECK(keys.generation() == "1");
  CHECK(keys.size() == "-1");
  // Group ranks go by arrival: either node may hold rank 3.
  CHECK_THAT(keys.lost(3), Catch::Matches("rank 3 on node[01]: signal SIGKILL"));
  CHECK_THAT(job.err(),
             Catch::Contains("reform: rank 3 lost (signal SIGKILL); max_restarts=0 is spent: the job "
                             "goes on without it"));
}

TEST_CASE("on_failure=reform below the job's minimum: one line naming the lost rank and exit 1") {
  TempDir dir;
  const auto pid_file = dir / "pids";
  Process job = standalone_reform_job(dir, 2, "10000", {"--stop_timeout=2"});
  const pid_t victim = wait_for_start(pid_file, 1, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  CHECK(job.wait(30s) == std::optional<int>(1));
  const auto err = job.err();
  INFO(err);
  REQUIRE(count_lines(err, "ddprun: error:") == 1);
  CHECK_THAT(err, Catch::Contains(
                      "ddprun: error: reform: rank 1 lost and max_restarts=0 is spent: 1 worker(s) would "
                      "be left, fewer than the job's minimum of 2 (--nnodes MIN 1 x --nproc_per_node "
                      "2); raise --max_restarts or lower the --nnodes minimum"));
  CHECK(pids_of(pid_file, 1, "start").size() == 1);
}

TEST_CASE("on_failure=reform with workers that never join a ddp::ElasticGroup falls back to restarting") {
  TempDir dir;
  // Not a worker SDK trainer (as a torch worker): rank 1 fails once, and its
  // sibling, which could not re-form, is restarted with it.
  auto r = ddprun(
      {"--standalone", "--nproc_per_node=2", "--on_failure=reform", "--max_restarts=1", "--no_python",
       bin("fake_worker").string()},
      dir,
      {{"FAKE_ONLY_RANK", "1"}, {"FAKE_FAIL_ON_RESTART_BELOW", "1"}, {"FAKE_ENV_DUMP", dir.path().string()}});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err,
                    "rank 1 failed and no worker joined a ddp::ElasticGroup (not a worker SDK trainer?): "
                    "falling back to --on_failure=restart for this run") == 1);
  CHECK(count_lines(r.err, "restarting workers (1/1)") == 1);
  CHECK_THAT(r.err, !Catch::Contains("starting a replacement"));
  const auto env = read_env_dump(dir / "rank_0.env");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(env.count("DDP_REFORM") == 0);
}

TEST_CASE("on_failure=reform: a worker that did not catch ddp::MembershipChanged falls back to restarting") {
  TempDir dir;
  // Rank 1 dies of the exception (its error file says so) on the first
  // attempt and succeeds on the restart.
  auto r =
      rank1_fails_once(dir, "ddp::MembershipChanged: generation 1: rank 0 left", "ddp::MembershipChanged");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(
      count_lines(
          r.err,
          "rank 1 did not catch ddp::MembershipChanged: falling back to --on_failure=restart for this run") ==
      1);
  CHECK(count_lines(r.err, "restarting workers (1/1)") == 1);
  // The restarted workers are told nothing of re-forming.
  const auto env = read_env_dump(dir / "rank_1.env");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(env.count("DDP_REFORM") == 0);
  CHECK(env.count("DDP_REFORM_JOINING") == 0);
}

TEST_CASE("on_failure=reform: an error message that only names ddp::MembershipChanged still re-forms") {
  TempDir dir;
  // The error file's type decides, not its text: a trainer's own message
  // quoting the exception is an ordinary failure, and its slot is replaced.
  auto r = rank1_fails_once(dir, "std::runtime_error: retried after a ddp::MembershipChanged", "");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err, "starting a replacement (1/1)") == 1);
  CHECK_THAT(r.err, !Catch::Contains("falling back to --on_failure=restart"));
  CHECK_THAT(r.err, !Catch::Contains("restarting workers"));
}

TEST_CASE(
    "on_failure=reform: a worker killed for hanging (FileTimer) is replaced while its sibling runs on") {
  TempDir dir;
  // Rank 1 arms a FileTimer scope due in a second and hangs; its replacement
  // exits 0 at once. Rank 0 runs 3 s and notes that it ran to its end.
  const auto worker = dir / "worker.sh";
  write_file(worker,
             "req() { printf '{\"version\": 1, \"pid\": %d, \"scope_id\": \"%s\", \"expiration_time\": %s, "
             "\"signal\": %d}\\n' $$ \"$1\" \"$2\" \"$3\" > \"$TORCHELASTIC_TIMER_FILE\"; }\n"
             "cd '" +
                 dir.path().string() +
                 "'\n"
                 "echo $$ >> starts_$RANK\n"
                 "'" +
                 bin("ddp-store").string() +
                 "' --endpoint \"$DDP_STORE_ENDPOINT\" add \"${DDP_STORE_PREFIX}" +
                 ddp::store::keys::reform_joined_key(ddp::store::keys::reform_prefix(""), 0) +
                 "\" 1 > /dev/null\n"
                 "if [ \"$RANK\" = 1 ] && [ -z \"$DDP_REFORM_JOINING\" ]; then\n"
                 "  req step $(( $(date +%s) + 1 )) 9; sleep 30\n"
                 "fi\n"
                 "if [ \"$RANK\" = 0 ]; then sleep 3; echo $$ > done_0; fi\n");
  auto r = ddprun({"--standalone", "--nproc_per_node=2", "--on_failure=reform", "--max_restarts=1",
                   "--no_python", "/bin/sh", worker.string()},
                  dir, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("reform: rank 1 lost (hung, "));
  CHECK_THAT(r.err, Catch::Contains("; starting a replacement (1/1)"));
  CHECK(count_lines(read_file(dir / "starts_1"), "") == 2);
  CHECK(count_lines(read_file(dir / "starts_0"), "") == 1);
  CHECK(read_file(dir / "done_0") == read_file(dir / "starts_0"));
}

TEST_CASE(
    "on_failure=reform on two nodes: only the failed worker is replaced, and the other node restarts "
    "nothing") {
  TwoNodeJob job("two", "2", "1");
  INFO(job.err());
  job.kill_first(0);
  const auto& started = job.started;
  const pid_t replacement = wait_for_start(job.pid_file, 0, 2);
  REQUIRE(replacement > 0);
  job.require_success();
  // Rank 0's sibling and the other node's workers kept their one process,
  // which ran to its own end.
  for (int r = 1; r < 4; ++r) {
    CHECK(pids_of(job.pid_file, r, "start") == std::vector<pid_t>{started[static_cast<std::size_t>(r)]});
    CHECK(pids_of(job.pid_file, r, "exit") == std::vector<pid_t>{started[static_cast<std::size_t>(r)]});
  }
  CHECK(pids_of(job.pid_file, 0, "exit") == std::vector<pid_t>{replacement});
  const auto dump = read_env_dump(job.dir / "rank_0.env");
  CHECK(dump.at("DDP_REFORM_JOINING") == "1");
  CHECK(dump.at("WORLD_SIZE") == "4");
  auto keys = reform_keys(job.dir, job.daemon.endpoint, dump.at("DDP_STORE_PREFIX"));
  CHECK(keys.generation() == "1");
  CHECK(keys.size() == "0");
  const auto err = job.err();
  CHECK(count_lines(err, "starting a replacement (1/1)") == 1);
  CHECK(count_lines(err, "restarting workers") == 0);
  CHECK(count_lines(err, "round event") == 0);
  CHECK(count_lines(err, "stopping") == 0);
}
