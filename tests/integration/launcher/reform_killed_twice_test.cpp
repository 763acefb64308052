// --on_failure=reform, one run seen from every side: rank 1 killed, then its
// replacement too while the group re-forms (docs/reform.md).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "launcher_test_util.hpp"
#include "reform_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace ddp::test::launcher::reform;
using namespace std::chrono_literals;

namespace {

// What `ddprun --standalone --nproc_per_node=3 --on_failure=reform
// --max_restarts=2` shows when rank 1 is killed, then its replacement too
// while the group re-forms: the replacement's and a sibling's env, the
// workers' store after each loss, the pid lines, stderr, the event log.
struct KilledTwice {
  std::map<std::string, std::string> replacement_env;  // rank 1's first replacement
  std::map<std::string, std::string> sibling_env;      // rank 0
  std::string second_restart_count;                    // of rank 1's second replacement
  std::map<std::string, std::string> keys_after_first, keys_after_second;
  std::string pids;  // FAKE_PID_FILE
  std::string err, events;
  std::optional<int> code;
  pid_t sibling0 = -1, sibling2 = -1, second = -1, third = -1;

  // The pids of `rank`'s lines that say `what`.
  std::vector<pid_t> pids_of(int rank, const std::string& what) const {
    TempDir tmp;
    write_file(tmp / "pids", pids);
    return reform::pids_of(tmp / "pids", rank, what);
  }
  // The event log's worker_start events, in order.
  std::vector<nlohmann::json> worker_starts() const {
    std::vector<nlohmann::json> starts;
    std::istringstream lines(events);
    for (std::string line; std::getline(lines, line);) {
      auto e = nlohmann::json::parse(line);
      if (e.at("event") == "worker_start") starts.push_back(e);
    }
    return starts;
  }
};

std::string text_of(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += k + "=" + v + "\n";
  return out;
}

std::map<std::string, std::string> map_of(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// The run, as SavedRun entries.
SavedRun run_killed_twice() {
  SavedRun v;
  TempDir dir;
  const auto pid_file = dir / "pids";
  const auto events = dir / "events.jsonl";
  // Every worker runs 5 s and exits 0: a sibling signalled by ddprun would
  // die without its "exit" line.
  Process job = standalone_reform_job(dir, 3, "5000", {"--max_restarts=2", "--event_log", events.string()});
  const pid_t first = wait_for_start(pid_file, 1, 1);
  const pid_t sibling0 = wait_for_start(pid_file, 0, 1);
  const pid_t sibling2 = wait_for_start(pid_file, 2, 1);
  INFO(job.err());
  REQUIRE(first > 0);
  REQUIRE(sibling0 > 0);
  REQUIRE(sibling2 > 0);
  REQUIRE(::kill(first, SIGKILL) == 0);
  const pid_t second = wait_for_start(pid_file, 1, 2);
  REQUIRE(second > 0);
  auto env = read_env_dump(dir / "rank_1.env");
  v["replacement.env"] = text_of(env);
  v["sibling.env"] = text_of(read_env_dump(dir / "rank_0.env"));
  const std::string endpoint = env["DDP_STORE_ENDPOINT"];
  const std::string prefix = env["DDP_STORE_PREFIX"];
  v["keys_first"] = text_of(reform_keys(dir, endpoint, prefix));
  // A second failure while the group re-forms: the generation moves on again.
  REQUIRE(::kill(second, SIGKILL) == 0);
  const pid_t third = wait_for_start(pid_file, 1, 3);
  REQUIRE(third > 0);
  v["keys_second"] = text_of(reform_keys(dir, endpoint, prefix));
  const auto code = job.wait(30s);
  v["facts"] =
      text_of({{"second_restart_count", read_env_dump(dir / "rank_1.env")["TORCHELASTIC_RESTART_COUNT"]},
               {"code", code ? std::to_string(*code) : "none"},
               {"sibling0", std::to_string(sibling0)},
               {"sibling2", std::to_string(sibling2)},
               {"second", std::to_string(second)},
               {"third", std::to_string(third)}});
  v["pids"] = read_file(pid_file);
  v["err"] = job.err();
  v["events.jsonl"] = read_file(events);
  return v;
}

// The run, once per process; under ctest once for all the cases below (the
// fixture "ddp_integration_reform:killed twice", $DDP_REFORM_KILLED_TWICE).
const KilledTwice& killed_twice(bool fresh = false) {
  static const KilledTwice k = [fresh] {
    const auto& v = saved_run("DDP_REFORM_KILLED_TWICE", run_killed_twice, fresh);
    KilledTwice r;
    r.replacement_env = map_of(v.at("replacement.env"));
    r.sibling_env = map_of(v.at("sibling.env"));
    r.keys_after_first = map_of(v.at("keys_first"));
    r.keys_after_second = map_of(v.at("keys_second"));
    r.pids = v.at("pids");
    r.err = v.at("err");
    r.events = v.at("events.jsonl");
    const auto facts = map_of(v.at("facts"));
    r.second_restart_count = facts.at("second_restart_count");
    if (facts.at("code") != "none") r.code = std::stoi(facts.at("code"));
    r.sibling0 = std::stoi(facts.at("sibling0"));
    r.sibling2 = std::stoi(facts.at("sibling2"));
    r.second = std::stoi(facts.at("second"));
    r.third = std::stoi(facts.at("third"));
    return r;
  }();
  return k;
}

}  // namespace

TEST_CASE("on_failure=reform: the killed-twice run is recorded", "[.killed-twice]") {
  // ctest's fixture: runs it afresh and saves it for the cases below.
  const auto& k = killed_twice(true);
  INFO(k.err);
  CHECK(k.third > 0);
}

TEST_CASE(
    "on_failure=reform: a killed worker's replacement takes its rank, slot and world, told it is joining") {
  const auto& k = killed_twice();
  INFO(k.err);
  auto env = k.replacement_env;
  CHECK(env["RANK"] == "1");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "3");
  CHECK(env["DDP_REFORM"] == "1");
  CHECK(env["DDP_REFORM_JOINING"] == "1");
}

TEST_CASE("on_failure=reform: each replacement's TORCHELASTIC_RESTART_COUNT counts the re-forms") {
  const auto& k = killed_twice();
  INFO(k.err);
  CHECK(k.replacement_env.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(k.second_restart_count == "2");
}

TEST_CASE("on_failure=reform: a sibling runs in re-form mode, neither joining nor passing --on_failure on") {
  const auto& k = killed_twice();
  CHECK(k.sibling_env.at("DDP_REFORM") == "1");
  CHECK(k.sibling_env.count("DDP_REFORM_JOINING") == 0);
  // ddprun's own env spelling of --on_failure: a ddprun this worker starts
  // must not inherit the mode.
  CHECK(k.sibling_env.count("DDP_ON_FAILURE") == 0);
}

TEST_CASE("on_failure=reform: the workers' store holds the generation, size 0 and why the rank was lost") {
  const auto& k = killed_twice();
  auto first = k.keys_after_first;
  CHECK(first["generation"] == "1");
  CHECK(first["size"] == "0");
  const auto hostname = read_file("/proc/sys/kernel/hostname");
  CHECK(first["lost/1"] == "rank 1 on " + hostname.substr(0, hostname.find('\n')) + ": signal SIGKILL");
}

TEST_CASE("on_failure=reform: a second loss while the group re-forms moves the generation on again") {
  const auto& k = killed_twice();
  auto second = k.keys_after_second;
  CHECK(second["generation"] == "2");
  CHECK(second["size"] == "0");
}

TEST_CASE("on_failure=reform: the siblings keep their one process each, which runs to its own end") {
  const auto& k = killed_twice();
  INFO(k.err);
  CHECK(k.code == std::optional<int>(0));
  CHECK(k.pids_of(0, "start") == std::vector<pid_t>{k.sibling0});
  CHECK(k.pids_of(2, "start") == std::vector<pid_t>{k.sibling2});
  CHECK(k.pids_of(0, "exit") == std::vector<pid_t>{k.sibling0});
  CHECK(k.pids_of(2, "exit") == std::vector<pid_t>{k.sibling2});
  CHECK(k.pids_of(1, "exit") == std::vector<pid_t>{k.third});
}

TEST_CASE(
    "on_failure=reform: stderr names each loss, its cause and the replacements spent, and stops nothing") {
  const auto& k = killed_twice();
  CHECK_THAT(k.err, Catch::Contains("reform: rank 1 lost (signal SIGKILL); starting a replacement (1/2)"));
  CHECK_THAT(k.err, Catch::Contains("reform: rank 1 lost (signal SIGKILL); starting a replacement (2/2)"));
  CHECK(count_lines(k.err, "stopping") == 0);
}

TEST_CASE("on_failure=reform: the event log has a reform event per loss and no restart") {
  const auto& k = killed_twice();
  CHECK(count_lines(k.events, "\"event\":\"reform\"") == 2);
  CHECK_THAT(k.events, Catch::Contains("\"generation\":2"));
  CHECK(count_lines(k.events, "\"event\":\"restart\"") == 0);
}

TEST_CASE("on_failure=reform: one worker_start for the group, then one per replacement naming it alone") {
  const auto& k = killed_twice();
  const auto starts = k.worker_starts();
  REQUIRE(starts.size() == 3);
  CHECK(starts[0].at("ranks") == nlohmann::json::array({0, 1, 2}));
  CHECK(starts[0].count("replacement") == 0);
  CHECK(starts[1].at("ranks") == nlohmann::json::array({1}));
  CHECK(starts[1].at("pids") == nlohmann::json::array({k.second}));
  CHECK(starts[1].at("replacement") == true);
  CHECK(starts[2].at("pids") == nlohmann::json::array({k.third}));
}

TEST_CASE("on_failure=reform: the attempt's startup times are the group's only") {
  const auto& k = killed_twice();
  CHECK(count_lines(k.events, "\"event\":\"startup\"") == 1);
}
