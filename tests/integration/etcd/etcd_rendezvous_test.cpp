// ddprun --rdzv_backend=etcd end to end: real agents, real etcd members.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "ddp/store/etcd_store.hpp"
#include "ddp/store/job_keys.hpp"
#include "etcd_cluster.hpp"
#include "reform_trainer.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::test;

namespace {

// Each worker registers in the workers' store (MASTER_ADDR:MASTER_PORT) and
// waits for every rank of the world: it only succeeds if all nodes' workers
// got the same store. With HOLD_UNTIL set, attempt 0 first marks itself
// started and waits for that file, then rank 0 fails to force a restart. With
// HANG_IN_ROUND_0 set, round 0's workers mark themselves started and hang.
constexpr const char* kWorker = R"(#!/bin/sh
set -e
store="$DDP_STORE --endpoint $MASTER_ADDR:$MASTER_PORT --timeout 20"
if [ -n "$HANG_IN_ROUND_0" ] && [ "$DDP_STORE_PREFIX" = "/job1/worker/round_0/" ]; then
  touch "$MARKS/started_$RANK"
  while :; do sleep 0.05; done
fi
if [ -n "$HOLD_UNTIL" ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  touch "$MARKS/started_$RANK"
  while [ ! -f "$HOLD_UNTIL" ]; do sleep 0.05; done
  [ "$RANK" = 0 ] && exit 1
  exit 0
fi
$store set "${DDP_STORE_PREFIX}rank_$RANK" ok >/dev/null
keys=""
r=0
while [ $r -lt "$WORLD_SIZE" ]; do keys="$keys ${DDP_STORE_PREFIX}rank_$r"; r=$((r + 1)); done
$store wait $keys --timeout 20
touch "$MARKS/done_${TORCHELASTIC_RESTART_COUNT}_$RANK"
)";

std::string write_worker(const TempDir& dir) {
  const auto path = dir / "worker.sh";
  ddp::test::write_file(path, kWorker);
  ::chmod(path.c_str(), 0755);
  return path.string();
}

std::map<std::string, std::optional<std::string>> worker_env(const TempDir& dir, const std::string& hold = "",
                                                             bool hang_in_round_0 = false) {
  return {{"DDP_STORE", ddp::test::bin("ddp-store").string()},
          {"MARKS", dir.path().string()},
          {"HOLD_UNTIL", hold.empty() ? std::nullopt : std::optional<std::string>(hold)},
          {"HANG_IN_ROUND_0", hang_in_round_0 ? std::optional<std::string>("1") : std::nullopt},
          {"OMP_NUM_THREADS", std::nullopt},
          {"PET_NPROC_PER_NODE", std::nullopt},
          {"PET_NNODES", std::nullopt}};
}

std::vector<std::string> agent_argv(const std::string& endpoints, const std::string& script,
                                    std::vector<std::string> extra = {}, const std::string& nnodes = "2") {
  std::vector<std::string> argv{
      ddp::test::bin("ddprun").string(),
      "--nnodes=" + nnodes,
      "--nproc_per_node=2",
      "--rdzv_backend=etcd",
      "--rdzv_endpoint=" + endpoints,
      "--rdzv_id=job1",
      "--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(script);
  return argv;
}

int count_files(const TempDir& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& e : ddp::test::fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

// An agent of run `run_id` under --on_failure=reform on `etcd`, running the
// C++ re-form trainer with `nproc` workers (last call 30 s: a round closes at MAX).
std::vector<std::string> reform_argv(const TempDir& dir, const EtcdCluster& etcd, const std::string& run_id,
                                     const std::string& nnodes, int nproc) {
  std::vector<std::string> out{ddp::test::bin("ddprun").string(),
                               "--nnodes=" + nnodes,
                               "--nproc_per_node=" + std::to_string(nproc),
                               "--rdzv_backend=etcd",
                               "--rdzv_endpoint=" + etcd.endpoints_text(),
                               "--rdzv_id=" + run_id,
                               "--rdzv_conf=keep_alive_interval=1,last_call_timeout=30,join_timeout=60",
                               "--on_failure=reform",
                               "--max_restarts=0",
                               "--no_python"};
  for (auto& w : ddp::test::reform_trainer(dir)) out.push_back(std::move(w));
  return out;
}

std::map<std::string, std::optional<std::string>> reform_env() {
  return {{"DDP_LOG_LEVEL", "info"}, {"OMP_NUM_THREADS", std::nullopt}, {"PET_NPROC_PER_NODE", std::nullopt}};
}

// Waits for both agents: each must exit 0 within 40 s.
void check_both_exit_0(Process& a, Process& b) {
  const auto ca = a.wait(40s);
  const auto cb = b.wait(40s);
  INFO("agent a:\n" << a.err() << "\nagent b:\n" << b.err());
  CHECK(ca == 0);
  CHECK(cb == 0);
}

}  // namespace

TEST_CASE("ddprun etcd: two agents rendezvous through etcd and their workers share one store") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto script = write_worker(dir);
  Process a(agent_argv(etcd.endpoints_text(), script), dir.path(), worker_env(dir), "agent-a");
  Process b(agent_argv(etcd.endpoints_text(), script), dir.path(), worker_env(dir), "agent-b");
  check_both_exit_0(a, b);
  CHECK(count_files(dir, "done_0_") == 4);
  // The rendezvous lives in etcd under the default prefix, namespaced by run id.
  auto o = etcd.options("/ddp/");
  ddp::store::EtcdStore s(o);
  CHECK_FALSE(s.list("job1/rdzv/").kvs.empty());
}

TEST_CASE("ddprun etcd: with one of three members killed the job restarts and re-rendezvous") {
  TempDir dir;
  EtcdCluster etcd(dir.path(), 3);
  const auto script = write_worker(dir);
  const auto hold = (dir / "go").string();
  const std::vector<std::string> extra{"--max_restarts=1"};
  Process a(agent_argv(etcd.endpoints_text(), script, extra), dir.path(), worker_env(dir, hold), "agent-a");
  Process b(agent_argv(etcd.endpoints_text(), script, extra), dir.path(), worker_env(dir, hold), "agent-b");
  REQUIRE(wait_until([&] { return count_files(dir, "started_") == 4; }, 20s));
  etcd.kill(0);  // the member every agent talks to first
  ddp::test::write_file(hold, "");
  check_both_exit_0(a, b);
  CHECK(count_files(dir, "done_1_") == 4);
}

TEST_CASE("ddprun etcd: an agent paused past its lease notices it was dropped and rejoins") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto script = write_worker(dir);
  // keep_alive_interval=1 x keep_alive_max_attempt=2: a 2 s lease.
  std::vector<std::string> extra{"--max_restarts=3"};
  auto argv = agent_argv(etcd.endpoints_text(), script, extra);
  for (auto& arg : argv)
    if (arg.rfind("--rdzv_conf=", 0) == 0)
      arg = "--rdzv_conf=keep_alive_interval=1,keep_alive_max_attempt=2,last_call_timeout=1";
  Process a(argv, dir.path(), worker_env(dir, "", true), "agent-a");
  Process b(argv, dir.path(), worker_env(dir, "", true), "agent-b");
  REQUIRE(wait_until([&] { return count_files(dir, "started_") == 4; }, 20s));

  ddp::store::EtcdStore s(etcd.options("/ddp"));
  const std::string nodes = "/job1/rdzv/round_0/node/";
  REQUIRE(s.list(nodes).kvs.size() == 2);
  b.signal(SIGSTOP);
  // B's record vanishes with its lease: everyone else sees B leave.
  const bool dropped = wait_until([&] { return s.list(nodes).kvs.size() < 2; }, 10s);
  b.signal(SIGCONT);
  REQUIRE(dropped);
  check_both_exit_0(a, b);
  CHECK(count_files(dir, "done_") == 4);  // a later round, both nodes, one store
}

TEST_CASE("ddprun etcd: bad endpoints exit 2 naming the endpoint, and etcd-v2 notes it speaks v3") {
  TempDir dir;
  const auto script = write_worker(dir);
  const auto dead = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  // An etcd that is down is waited for until join_timeout, as a c10d store is.
  auto down = agent_argv(dead, script, {}, "1");
  for (auto& arg : down)
    if (arg.rfind("--rdzv_conf=", 0) == 0) arg += ",join_timeout=2";
  auto r = ddp::test::run(down, dir.path(), worker_env(dir), 20s);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("cannot reach the rendezvous store at " + dead + " (--rdzv_endpoint)"));
  CHECK_THAT(r.err, Contains("etcd at " + dead + " unreachable: Connection refused"));

  auto v2 = down;
  for (auto& arg : v2)
    if (arg == "--rdzv_backend=etcd") arg = "--rdzv_backend=etcd-v2";
  r = ddp::test::run(v2, dir.path(), worker_env(dir), 20s);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("v3 API"));

  auto bad_conf = agent_argv(dead, script, {}, "1");
  for (auto& arg : bad_conf)
    if (arg.rfind("--rdzv_conf=", 0) == 0) arg += ",protocol=gopher";
  r = ddp::test::run(bad_conf, dir.path(), worker_env(dir), 20s);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("protocol"));
}

namespace {
// The ddprun copied to dir/bin run as a node of an https etcd job (a CA file
// given, the endpoint down): what it says before any request.
ddp::test::RunResult run_https_copy(const TempDir& dir) {
  const auto script = write_worker(dir);
  const auto dead = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  auto argv = agent_argv(dead, script, {}, "1");
  argv[0] = (dir / "bin" / "ddprun").string();
  for (auto& arg : argv)
    if (arg.rfind("--rdzv_conf=", 0) == 0) arg += ",etcd_cacert=" + script;
  return ddp::test::run(argv, dir.path(), worker_env(dir), 20s);
}
}  // namespace

TEST_CASE("ddprun etcd: https without its TLS plugin exits 2 naming the plugin and the options") {
  if (fs::exists("/usr/local/lib/ddprun/libddp_etcd_tls.so") ||
      fs::exists("/usr/lib/ddprun/libddp_etcd_tls.so")) {
    WARN("an installed libddp_etcd_tls.so would be found: skipped");
    return;
  }
  // A ddprun (and its guard) copied where no lib/ddprun/ is beside its prefix:
  // plain http still works without the plugin, https is refused before any request.
  TempDir dir;
  fs::create_directories(dir / "bin");
  for (const char* f : {"ddprun", "ddp-guard"}) fs::copy_file(ddp::test::bin(f), dir / "bin" / f);
  auto r = run_https_copy(dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err,
             Contains("ddprun: error: an https etcd endpoint") && Contains("needs libddp_etcd_tls.so"));
  CHECK_THAT(r.err, !Contains("unreachable"));
}

TEST_CASE("ddprun etcd: https with its TLS plugin cut to 4 KiB exits 2 naming the file, no SIGBUS") {
  const auto plugin =
      ddp::test::bin("ddprun").parent_path().parent_path() / "lib" / "ddprun" / "libddp_etcd_tls.so";
  if (!fs::exists(plugin)) {
    WARN("built without the TLS plugin: skipped");
    return;
  }
  TempDir dir;
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "lib" / "ddprun");
  for (const char* f : {"ddprun", "ddp-guard"}) fs::copy_file(ddp::test::bin(f), dir / "bin" / f);
  const auto cut = dir / "lib" / "ddprun" / "libddp_etcd_tls.so";
  ddp::test::write_file(cut, ddp::test::read_file(plugin).substr(0, 4096));
  auto r = run_https_copy(dir);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("ddprun: error: an https etcd endpoint") &&
                        Contains("needs " + cut.string() + ", which is 4096 bytes, but its ELF headers") &&
                        Contains("reinstall ddprun"));
}

TEST_CASE(
    "ddprun etcd: --on_failure=reform: kill -9 of group rank 1 lets a hot spare take its ranks in place") {
  // ddp-example-train-reform on two agents of --nnodes=1:2 and a hot spare;
  // group rank 1 (not 0, whose node hosts the workers' store) is killed.
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto argv = [&] { return reform_argv(dir, etcd, "reform", "1:2", 2); };
  const auto env = reform_env();
  Process a(argv(), dir.path(), env, "agent-a");
  Process b(argv(), dir.path(), env, "agent-b");
  const auto started = [](Process& p) { return p.out().find("start: rank") != std::string::npos; };
  REQUIRE(wait_until([&] { return started(a) && started(b); }, 60s));
  Process s(argv(), dir.path(), env, "agent-s");
  REQUIRE(wait_until([&] { return s.err().find("hot spare: round 0 runs") != std::string::npos; }, 30s));
  const bool b_second = b.err().find("group_rank=1/2") != std::string::npos;
  Process& second = b_second ? b : a;
  Process& first = b_second ? a : b;
  second.signal(SIGKILL);
  const auto c_first = first.wait(90s);
  const auto c_spare = s.wait(90s);
  INFO("group rank 0:\n" << first.err() << first.out() << "\nspare:\n" << s.err() << s.out());
  CHECK(c_first == 0);
  CHECK(c_spare == 0);
  CHECK_THAT(first.err(), Contains(" takes its place (ranks 2-3)"));
  CHECK_THAT(s.out(), Contains("joining without state"));
  CHECK_THAT(first.out(), Contains("re-form: generation 1, world 4 (lost slots -, new slots 2,3)"));
  CHECK_THAT(first.out(), Contains("after 6 epochs, 96 steps, 1 re-forms, 0 restarts"));
}

TEST_CASE(
    "ddprun etcd: --on_failure=reform: in a job of nodes of 2, 2 and 1 workers a hot spare of 1 worker takes "
    "the lost 1-worker node's rank 4") {
  // Group ranks follow the arrivals: each agent starts once the one before it joined.
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto argv = [&](int nproc) { return reform_argv(dir, etcd, "mixed", "3:3", nproc); };
  const auto env = reform_env();
  const auto joined = [](Process& p) { return p.err().find("joined round") != std::string::npos; };
  Process a(argv(2), dir.path(), env, "agent-a");
  REQUIRE(wait_until([&] { return joined(a); }, 30s));
  Process c(argv(2), dir.path(), env, "agent-c");
  REQUIRE(wait_until([&] { return joined(c); }, 30s));
  Process b(argv(1), dir.path(), env, "agent-b");
  REQUIRE(wait_until([&] { return b.out().find("start: rank 4 of 5") != std::string::npos; }, 60s));
  Process s(argv(1), dir.path(), env, "agent-s");
  REQUIRE(wait_until([&] { return s.err().find("hot spare: round 0 runs") != std::string::npos; }, 30s));
  b.signal(SIGKILL);
  const auto ca = a.wait(90s), cc = c.wait(90s), cs = s.wait(90s);
  INFO("a:\n" << a.err() << a.out() << "\nc:\n" << c.err() << "\nspare:\n" << s.err() << s.out());
  CHECK(ca == 0);
  CHECK(cc == 0);
  CHECK(cs == 0);
  CHECK_THAT(a.err(), Contains("(group rank 2) lost; hot spare ") && Contains(" takes its place (ranks 4)"));
  CHECK_THAT(s.out(), Contains("start: rank 4 of 5, generation 1, joining without state"));
  CHECK_THAT(a.out() + c.out() + s.out(),
             Contains("re-form: generation 1, world 5 (lost slots -, new slots 4)"));
  CHECK_THAT(a.out() + c.out() + s.out(), Contains("1 re-forms, 0 restarts"));
}

TEST_CASE(
    "ddprun etcd: --on_failure=reform: a node lost with no spare in a job at its maximum is given up, and a "
    "node that joins later grows the job again") {
  // --nnodes=2:3, three agents: the round closes at MAX. Group rank 1 (not 0,
  // whose node hosts the workers' store) is lost and given up; the fourth
  // agent finds a place given up and grows the job with ranks 6-7.
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto argv = [&] {
    auto a = reform_argv(dir, etcd, "regrow", "2:3", 2);
    const auto at = std::find(a.begin(), a.end(), "--epochs");
    REQUIRE(at + 1 < a.end());
    *(at + 1) = "40";  // long enough for the loss and the newcomer
    return a;
  };
  const auto env = reform_env();
  const auto joined = [](Process& p) { return p.err().find("joined round") != std::string::npos; };
  Process a(argv(), dir.path(), env, "agent-a");
  REQUIRE(wait_until([&] { return joined(a); }, 30s));
  Process b(argv(), dir.path(), env, "agent-b");
  REQUIRE(wait_until([&] { return joined(b); }, 30s));
  Process c(argv(), dir.path(), env, "agent-c");
  REQUIRE(wait_until([&] { return b.out().find("start: rank 2 of 6") != std::string::npos; }, 60s));
  b.signal(SIGKILL);
  const auto out = [&] { return a.out() + c.out(); };
  // INFO copies its text when it runs: each is written after its wait so that
  // a failure shows the agents' output as it was at the failure.
  const bool lost = wait_until(
      [&] { return out().find("world 4 (lost slots 2,3, new slots -)") != std::string::npos; }, 60s);
  INFO("a:\n" << a.err() << a.out() << "\nc:\n" << c.err() << c.out());
  REQUIRE(lost);
  Process d(argv(), dir.path(), env, "agent-d");
  const bool grown = wait_until(
      [&] { return out().find("world 6 (lost slots -, new slots 6,7)") != std::string::npos; }, 60s);
  INFO("after the growth, a:\n"
       << a.err() << a.out() << "\nc:\n"
       << c.err() << c.out() << "\nd:\n"
       << d.err() << d.out());
  REQUIRE(grown);
  const auto ca = a.wait(120s), cc = c.wait(120s), cd = d.wait(120s);
  CHECK(ca == 0);
  CHECK(cc == 0);
  CHECK(cd == 0);
  CHECK_THAT(d.err(), Contains("this node grows the running job: ranks 6-7 join its workers"));
  CHECK_THAT(out(), Contains("2 re-forms, 0 restarts"));
}

TEST_CASE("ddprun etcd: a node gone between its arrival and its record costs the round no close_timeout") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  const auto script = write_worker(dir);
  {
    // The gone node: arrival 1 of round 0 (its arrival key and, in the same
    // txn, its marker under its lease), no record; then its lease ends.
    ddp::store::EtcdStore s(etcd.options("/ddp"));
    const auto lease = s.lease_grant(10s);
    const auto round0 = ddp::store::keys::round_prefix("job1", 0);
    s.create(round0 + "arrive/2/gone.0000000000000001", "gone", 0, {round0 + "arrive/"},
             {ddp::store::BatchOp::set(ddp::store::keys::joining_key(round0, "gone"), "", lease)});
    REQUIRE(s.list(ddp::store::keys::joining_prefix(round0)).kvs.size() == 1);
    s.lease_revoke(lease);
  }
  // A close_timeout of 60 s: waiting for the gone node's record would outlast the agents' wait.
  std::vector<std::string> extra{"--max_restarts=0"};
  auto argv = agent_argv(etcd.endpoints_text(), script, extra);
  for (auto& arg : argv)
    if (arg.rfind("--rdzv_conf=", 0) == 0) arg += ",close_timeout=60";
  Process a(argv, dir.path(), worker_env(dir), "agent-a");
  Process b(argv, dir.path(), worker_env(dir), "agent-b");
  check_both_exit_0(a, b);
  CHECK(count_files(dir, "done_0_") == 4);
  CHECK_THAT(a.err() + b.err(), Contains("1 node(s) left before round 0 closed"));
}
