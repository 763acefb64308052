// In-process re-form for torch (label torchreform): python/examples/reform_ddp.py,
// the torch DDP trainer on ddprun.elastic, under a real ddprun
// --on_failure=reform with 4 Gloo ranks. A SIGKILLed rank is replaced while the
// others keep their processes and end at the loss of a run without the kill;
// torch 1.13, and a script that catches MembershipChanged but never re-forms,
// fall back to restart with one line each (docs/reform.md, "Python trainers").
// A node killed (kill -9 of its agent) on two nodes: a hot spare takes its
// ranks, or the other node goes on alone (docs/reform.md, "A lost node").
// python/examples/reform_fsdp.py, the FSDP2 trainer: the survivors re-form,
// shard the model anew and load the last checkpoint in process. Without ddprun
// (the test plays the agents, reform_connect.py the ranks): a peer that dies
// while generation 0 connects leaves the others waiting for the next one.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "test_support.hpp"
#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

// The final losses of a kill and a no-kill run may differ in the last digits:
// after a re-form DDP is wrapped anew, and its first step reduces the
// gradients in its initial bucket layout, where the run without a kill had
// already rebuilt its buckets (docs/reform.md, "Python trainers").
constexpr double kLossTolerance = 1e-6;

struct Run {
  RunResult r;
  std::string all;                // stdout and stderr
  std::vector<std::string> left;  // the example's files left in its workers' TMPDIR
};

// An FSDP run with a rank killed and replaced does the steps since the last
// checkpoint again, on the same data, the same shards and the checkpoint's
// exact fp32 state: its final loss is the no-kill run's, to the last printed
// digit (docs/reform.md, "FSDP").
constexpr double kFsdpLossTolerance = 0.0;
// With a node lost and no spare, 2 ranks go on from the checkpoint with half
// the global batch: a different run, which has seen fewer samples by its end.
// Its loss over the data set was 0.01364 against 0.01101 without the kill
// (the data's noise floor is 0.01).
constexpr double kShrinkLossTolerance = 0.5;  // relative

// ddprun over 4 local ranks running the example with `args`; its output.
Run reform_run(std::vector<std::string> args, Env extra = {}, const std::string& example = "reform_ddp.py") {
  TempDir dir;
  std::vector<std::string> argv = {"--standalone", "--nproc_per_node=4", "--on_failure=reform",
                                   "--max_restarts=3", (source_dir() / "python/examples" / example).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto own = extra.find("PYTHONPATH");
  extra["PYTHONPATH"] = (own != extra.end() && own->second ? *own->second + ":" : std::string()) +
                        (source_dir() / "python").string();
  const auto tmp = dir / "tmp";
  std::filesystem::create_directory(tmp);
  extra["TMPDIR"] = tmp.string();
  Run run_out;
  run_out.r = run(ddprun(argv), dir.path(), worker_env(extra), 200s);
  run_out.all = run_out.r.out + run_out.r.err;
  for (const auto& e : std::filesystem::directory_iterator(tmp)) {
    if (e.path().filename().string().rfind("reform_ddp", 0) == 0) run_out.left.push_back(e.path().string());
  }
  return run_out;
}

double final_loss(const std::string& out) {
  std::smatch m;
  static const std::regex re("final loss ([0-9.]+)");
  return std::regex_search(out, m, re) ? std::stod(m[1].str()) : -1.0;
}

// reform_fsdp.py's loss over the whole data set at the end.
double data_set_loss(const std::string& out) {
  std::smatch m;
  static const std::regex re("loss over the data set ([0-9.]+)");
  return std::regex_search(out, m, re) ? std::stod(m[1].str()) : -1.0;
}

// rank -> pids of its "started" lines, in order.
std::map<int, std::vector<std::string>> started(const std::string& out) {
  std::map<int, std::vector<std::string>> pids;
  static const std::regex re("rank ([0-9]+) pid ([0-9]+): started");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    pids[std::stoi((*it)[1].str())].push_back((*it)[2].str());
  return pids;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// What a run with rank 2 SIGKILLed and replaced shows: the agent's line, no
// fallback, ranks 0, 1 and 3 in their first processes (each reporting the
// kill's cost as a survivor) and rank 2's second process as the replacement.
void check_rank2_replaced(const std::string& all) {
  CHECK_THAT(all, Catch::Contains("reform: rank 2 lost (signal SIGKILL); starting a replacement (1/3)"));
  CHECK_THAT(all, !Catch::Contains("falling back") && !Catch::Contains("restarting workers"));
  const auto pids = started(all);
  REQUIRE(pids.size() == 4);
  for (int rank : {0, 1, 3}) {
    REQUIRE(pids.at(rank).size() == 1);
    CHECK_THAT(all, Catch::Contains("rank " + std::to_string(rank) + " pid " + pids.at(rank)[0] +
                                    " (survivor): kill to next completed step"));
  }
  REQUIRE(pids.at(2).size() == 2);
  CHECK_THAT(all, Catch::Contains("rank 2 pid " + pids.at(2)[1] + " (replacement)"));
}

// Ranks 1 and 2 each started twice; 0 and 3 kept their one process.
void check_ranks_1_2_replaced(const std::string& all) {
  const auto pids = started(all);
  REQUIRE(pids.size() == 4);
  CHECK(pids.at(0).size() == 1);
  CHECK(pids.at(3).size() == 1);
  CHECK(pids.at(1).size() == 2);
  CHECK(pids.at(2).size() == 2);
}

// Two nodes of 2 torch ranks each (c10d, --nnodes=1:2) on a daemon, and with
// `spare` a third node waiting as a hot spare; kill -9 of the second node's
// agent once every rank has started. The outputs of the nodes left.
struct NodeKill {
  TempDir dir;
  Daemon daemon{dir};
  std::string a, spare;  // stdout and stderr
  std::optional<int> a_code, spare_code;

  std::string nnodes = "1:2";
  std::string last_call = "60";
  std::string example = "reform_ddp.py";

  std::vector<std::string> node(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "--nnodes=" + nnodes,
        "--nproc_per_node=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=" + daemon.endpoint(),
        "--rdzv_id=torchnode",
        "--rdzv_conf=join_timeout=120,last_call_timeout=" + last_call + ",keep_alive_interval=0.5",
        "--local_addr=" + name,
        "--on_failure=reform",
        "--max_restarts=0",
        (source_dir() / "python/examples" / example).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return ddprun(argv);
  }

  NodeKill() = default;
  // `kill_after`: a line to wait for (too) before the kill.
  NodeKill(bool with_spare, const std::vector<std::string>& args, const std::string& script = "reform_ddp.py",
           const std::string& kill_after = "")
      : example(script) {
    const Env env = worker_env({{"PYTHONPATH", (source_dir() / "python").string()}});
    Process pa(node("nodea", args), dir.path(), env, "nodea");
    Process pb(node("nodeb", args), dir.path(), env, "nodeb");
    REQUIRE(wait_until([&] { return count(pa.out() + pb.out(), ": started, rank") == 4; }, 180s));
    if (!kill_after.empty())
      REQUIRE(wait_until([&] { return count(pa.out() + pb.out(), kill_after) > 0; }, 180s));
    std::optional<Process> ps;
    if (with_spare) {
      ps.emplace(node("nodes", args), dir.path(), env, "nodes");
      REQUIRE(
          wait_until([&] { return count(ps->err(), "hot spare: round 0 runs with the maximum") > 0; }, 60s));
    }
    pb.signal(SIGKILL);
    a_code = pa.wait(240s);
    a = pa.out() + pa.err();
    if (ps) {
      spare_code = ps->wait(240s);
      spare = ps->out() + ps->err();
    }
  }
};

}  // namespace

TEST_CASE("torch re-form: kill -9 of a node's agent, a hot spare takes its ranks", "[node-spare]") {
  if (!have_torch()) return;
  const auto base = reform_run({"--steps", "400", "--step-sleep-ms", "15"});
  REQUIRE(base.r.code == 0);
  NodeKill k(/*with_spare=*/true, {"--steps", "400", "--step-sleep-ms", "15"});
  INFO("node a:\n" << k.a << "\nspare:\n" << k.spare);
  CHECK(k.a_code == std::optional<int>(0));
  CHECK(k.spare_code == std::optional<int>(0));
  // Node a's two ranks kept their processes; the spare's two joined the running job.
  CHECK(count(k.a, ": started, rank") == 2);
  CHECK(count(k.spare, ": started, rank") == 2);
  CHECK_THAT(k.a, Catch::Contains(" takes its place (ranks "));
  CHECK_THAT(k.spare, Catch::Contains("this hot spare takes its place: ranks "));
  CHECK_THAT(k.a + k.spare, !Catch::Contains("falling back") && !Catch::Contains("restarting workers"));
  const double clean = final_loss(base.all), got = final_loss(k.a + k.spare);
  CHECK(clean > 0);
  CHECK(std::fabs(clean - got) <= kLossTolerance);
}

TEST_CASE("torch re-form: kill -9 of a node's agent with no spare, the other node goes on with 2 ranks",
          "[node-shrink]") {
  if (!have_torch()) return;
  NodeKill k(/*with_spare=*/false, {"--steps", "400", "--step-sleep-ms", "15"});
  INFO("node a:\n" << k.a);
  CHECK(k.a_code == std::optional<int>(0));
  CHECK(count(k.a, ": started, rank") == 2);
  CHECK_THAT(k.a, Catch::Contains("no hot spare: the job goes on without ranks ") &&
                      Catch::Contains("world size 2"));
  CHECK_THAT(k.a, !Catch::Contains("falling back"));
  CHECK(final_loss(k.a) > 0);
}

TEST_CASE("torch re-form: a node joining a running job of 2 of 3 nodes grows its world in place",
          "[node-grow]") {
  if (!have_torch()) return;
  NodeKill k;  // only its daemon and argv
  k.nnodes = "1:3";
  k.last_call = "3";
  // Long enough (30 s at the least) that the third node, whose workers import torch on a loaded
  // machine, joins while the others still train, not as they finish.
  const std::vector<std::string> args = {"--steps", "2000", "--step-sleep-ms", "15"};
  // Under load, about one grow in 20-40 leaves an original rank in a Gloo send that its transport
  // never fails (docs/reform.md, "A Gloo operation the release cannot end"): that rank exits 5 s
  // after the release, and with --max_restarts=0 the job goes on without it (world 5, not 6). The stall
  // timeout is set past the group's 2-minute timeout, so that only that exit, not the others naming the rank,
  // can end such a wait.
  const Env env =
      worker_env({{"PYTHONPATH", (source_dir() / "python").string()}, {"DDP_REFORM_STALL_TIMEOUT", "150"}});
  Process a(k.node("nodea", args), k.dir.path(), env, "nodea");
  Process b(k.node("nodeb", args), k.dir.path(), env, "nodeb");
  REQUIRE(wait_until([&] { return count(a.out() + b.out(), ": started, rank") == 4; }, 180s));
  Process c(k.node("nodec", args), k.dir.path(), env, "nodec");
  const auto ca = a.wait(360s), cb = b.wait(360s), cc = c.wait(360s);
  const std::string all = a.out() + a.err() + b.out() + b.err() + c.out() + c.err();
  INFO(all);
  CHECK(ca == std::optional<int>(0));
  CHECK(cb == std::optional<int>(0));
  CHECK(cc == std::optional<int>(0));
  CHECK(count(a.out() + b.out(), ": started, rank") == 4);
  // The third node's two ranks joined the running world: 6 ranks, or 5 when
  // an original rank left such a Gloo wait and its place was given up.
  const bool wedged = all.find("Exiting so that ddprun replaces this rank") != std::string::npos;
  CHECK_THAT(c.out(), Catch::Contains(wedged ? " of 5" : ": started, rank 4 of 6"));
  CHECK(count(c.out(), ": started, rank") == 2);
  CHECK_THAT(all, !Catch::Contains("falling back") && !Catch::Contains("re-forming the group"));
  CHECK(final_loss(all) > 0);
}

TEST_CASE("torch re-form: a SIGKILLed rank is replaced, the others keep their pids and the loss", "[kill]") {
  if (!have_torch()) return;
  const auto base = reform_run({});
  INFO("no kill:\n" << base.all);
  REQUIRE(base.r.code == 0);
  const auto kill = reform_run({"--kill-rank", "2", "--kill-step", "40"});
  INFO("kill:\n" << kill.all);
  REQUIRE(kill.r.code == 0);
  check_rank2_replaced(kill.all);
  CHECK_THAT(kill.all, Catch::Contains("steps lost 0"));
  // The kill's time, left by the killed rank for the others, is gone at the end.
  CHECK_THAT(kill.left, Catch::Matchers::Equals(std::vector<std::string>{}));
  const double a = final_loss(base.all), b = final_loss(kill.all);
  CHECK(a > 0);
  CHECK(std::fabs(a - b) <= kLossTolerance);
}

TEST_CASE("torch re-form: a survivor stopped instead of re-forming is named, killed and replaced",
          "[stall]") {
  if (!have_torch()) return;
  // Rank 2 dies; rank 1 stops where it would re-form. The others name the
  // generation stalled after 10 s (longer than rank 2's replacement takes to
  // import torch on a loaded machine: a slot still starting would be named
  // too), and rank 1's agent replaces it.
  const auto run_out = reform_run({"--kill-rank", "2", "--kill-step", "40", "--stop-rank", "1"},
                                  {{"DDP_REFORM_STALL_TIMEOUT", "10"}});
  INFO(run_out.all);
  REQUIRE(run_out.r.code == 0);
  CHECK_THAT(run_out.all, Catch::Contains("rank 1 pid") && Catch::Contains("SIGSTOP instead of re-forming"));
  CHECK_THAT(run_out.all,
             Catch::Contains("reform: generation 1 waited 10 s (DDP_REFORM_STALL_TIMEOUT); slot(s) 1 "
                             "never joined"));
  CHECK_THAT(run_out.all, Catch::Contains("reform: rank 1 lost (hung, reform not joined (generation 1"));
  check_ranks_1_2_replaced(run_out.all);
  CHECK(final_loss(run_out.all) > 0);
}

TEST_CASE(
    "torch re-form: a survivor whose step stays blocked in torch after its generation ended exits and is "
    "replaced",
    "[wedge]") {
  if (!have_torch()) return;
  // Rank 2 dies at step 40 while rank 1 is blocked in its step, idle, in torch
  // code that the release of its connections cannot end (as a Gloo send its
  // transport never fails, docs/reform.md). The stall timeout is off: without
  // rank 1's own exit the others would wait for it until DDP_REFORM_TIMEOUT
  // (300 s), past this run's limit.
  const auto r = reform_run({"--kill-rank", "2", "--kill-step", "40", "--wedge-rank", "1"},
                            {{"DDP_REFORM_STALL_TIMEOUT", "0"}});
  INFO(r.all);
  REQUIRE(r.r.code == 0);
  CHECK_THAT(r.all, Catch::Contains("blocked in its step at step 40"));
  CHECK_THAT(r.all,
             Catch::Contains("ended 5 s ago and this rank's step is still blocked in torch, every "
                             "connection of its Gloo group closed and the process idle") &&
                 Catch::Contains("Exiting so that ddprun replaces this rank; main thread in barrier ("));
  CHECK_THAT(r.all, Catch::Contains("reform: rank 1 lost (exit code 1: ddprun.elastic: generation 0 ended"));
  check_ranks_1_2_replaced(r.all);
  CHECK(final_loss(r.all) > 0);
}

namespace {

// The connect cases play the agents, as tests/integration/sdk/elastic_test.cpp
// does for the C++ SDK: a store, member entries written for slots that are
// late or gone, reform_connect.py workers, and the generation moved by hand.
class ConnectJob {
 public:
  ConnectJob() : server_(server_options()) {
    server_.start();
    endpoint_ = "127.0.0.1:" + std::to_string(server_.port());
    ddp::store::TcpStoreOptions client;
    client.endpoint = ddp::parse_endpoint(endpoint_, "test store");
    store_ = std::make_unique<ddp::store::TcpStore>(client);
  }
  ddp::store::TcpStore& store() { return *store_; }
  const std::string root = ddp::store::keys::reform_prefix("/job/");
  // Generation 0's torch group keys (_reform_keys.reform_pg_prefix).
  const std::string pg = ddp::store::keys::reform_generation_prefix(root, 0) + "pg/";

  // `slots` joined generation 0 as far as the others can tell.
  void joined(const std::string& members, int count) {
    store_->append(ddp::store::keys::reform_members_key(root, 0), members);
    store_->add(ddp::store::keys::reform_joined_key(root, 0), count);
  }
  void start(int slot, int world, int timeout_s, std::map<std::string, std::optional<std::string>> env = {}) {
    env.insert({{"PYTHONPATH", (source_dir() / "python").string()},
                {"RANK", std::to_string(slot)},
                {"WORLD_SIZE", std::to_string(world)},
                {"LOCAL_RANK", std::to_string(slot)},
                {"LOCAL_WORLD_SIZE", std::to_string(world)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(server_.port())},
                {"DDP_STORE_ENDPOINT", endpoint_},
                {"DDP_STORE_PREFIX", "/job/"},
                {"DDP_REFORM", "1"},
                {"TEST_PG_TIMEOUT_S", std::to_string(timeout_s)},
                {"TORCHELASTIC_ERROR_FILE", error_file(slot).string()}});
    procs_[slot] = std::make_unique<Process>(std::vector<std::string>{python(), script("reform_connect.py")},
                                             dir_.path(), worker_env(env), "slot" + std::to_string(slot));
  }
  Process& proc(int slot) { return *procs_.at(slot); }
  std::filesystem::path error_file(int slot) const {
    return dir_ / ("error_" + std::to_string(slot) + ".json");
  }
  // The agents' move to the next generation after `lost` slots were lost.
  void move_on(int lost) {
    store_->add(ddp::store::keys::reform_size_key(root), -lost);
    store_->add(ddp::store::keys::reform_generation_key(root), 1);
  }
  // Waits until generation 0's group prefix holds at least `n` keys.
  bool pg_keys(std::size_t n, std::chrono::seconds limit = 60s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (store_->list(pg).kvs.size() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    return store_->list(pg).kvs.size() >= n;
  }
  std::string describe() {
    std::string text = "keys:\n";
    for (const auto& kv : store_->list(root).kvs) text += kv.key + "\n";
    for (auto& [slot, p] : procs_)
      text += "slot " + std::to_string(slot) + ":\n" + p->out() + p->err() + "\n";
    return text;
  }

 private:
  static ddp::store::StoreServerOptions server_options() {
    ddp::store::StoreServerOptions options;
    options.host = "127.0.0.1";
    return options;
  }
  ddp::store::StoreServer server_;
  std::string endpoint_;
  std::unique_ptr<ddp::store::TcpStore> store_;
  TempDir dir_;
  std::map<int, std::unique_ptr<Process>> procs_;
};

}  // namespace

TEST_CASE(
    "torch re-form: a peer that dies while generation 0 connects makes the others wait for the next "
    "generation, not exit",
    "[connect]") {
  // Slot 1 is late (its member entry written for it, its process started
  // once generation 1 begins, as a spare's would); slot 2 starts to form the
  // group and dies, so slot 0 cannot connect. The generation moves on only
  // once slot 0 said it failed, as it does when an agent learns of a lost
  // node from its lease.
  if (!have_torch()) return;
  ConnectJob job;
  job.joined("1:1,", 1);
  job.start(0, 3, 3);
  job.start(2, 3, 3);
  // Both are in init_process_group once generation 0's group prefix holds keys of each.
  const bool forming = job.pg_keys(2);
  INFO(job.describe());
  REQUIRE(forming);
  job.proc(2).signal(SIGKILL);
  job.proc(2).wait(10s);
  const std::string failed = "could not connect generation 0";
  const auto seen_until = std::chrono::steady_clock::now() + 60s;
  // Slot 0 fails to connect, and must wait for the generation rather than exit.
  const auto said = [&] { return job.proc(0).err().find(failed) != std::string::npos; };
  while (!said() && job.proc(0).running() && std::chrono::steady_clock::now() < seen_until)
    std::this_thread::sleep_for(20ms);
  INFO(job.describe());
  REQUIRE(said());
  job.move_on(1);
  // Slot 1 starts now and joins generation 1 first: its group is the first
  // its torch makes, while slot 0's torch counted the one that failed.
  job.start(1, 3, 3);
  const auto c0 = job.proc(0).wait(90s), c1 = job.proc(1).wait(90s);
  INFO(job.describe());
  CHECK(c0 == 0);
  CHECK(c1 == 0);
  CHECK_THAT(job.proc(0).out(), Catch::Contains("final gen=1 rank=0 size=2 sum=2"));
  CHECK_THAT(job.proc(1).out(), Catch::Contains("final gen=1 rank=1 size=2 sum=2"));
}

TEST_CASE(
    "torch re-form: a peer lost before its group published anything while generation 0 forms holds the "
    "others only until the generation moves on",
    "[connect-lost]") {
  // Slot 2 joined generation 0 (its member entry written for it) and died
  // before its process group wrote a key; slots 0 and 1 wait for its keys in
  // torch's store wait, with the group's 60 s timeout. The watcher shuts
  // their sockets once the generation moves on, from the first generation
  // on, so they form generation 1 at once instead of after those 60 s.
  if (!have_torch()) return;
  ConnectJob job;
  job.joined("2:1,", 1);
  job.start(0, 3, 60);
  job.start(1, 3, 60);
  const bool forming = job.pg_keys(2);
  INFO(job.describe());
  REQUIRE(forming);
  std::this_thread::sleep_for(1s);  // in the wait for slot 2's keys
  job.move_on(1);
  const auto c0 = job.proc(0).wait(30s), c1 = job.proc(1).wait(30s);
  INFO(job.describe());
  CHECK(c0 == 0);
  CHECK(c1 == 0);
  CHECK_THAT(job.proc(0).out(), Catch::Contains("formed gen=1 rank=0 size=2"));
  CHECK_THAT(job.proc(1).out(), Catch::Contains("final gen=1 rank=1 size=2 sum=2"));
}

namespace {

// One run of [connect-listen]: how many of the 5 survivors exited from
// generation 0's connect (0 when none had the listening end).
int connect_listen_run() {
  ConnectJob job;
  job.joined("0:1,1:1,2:1,3:1,4:1,", 5);
  const std::map<std::string, std::optional<std::string>> env{{"DDP_REFORM_STALL_TIMEOUT", "8"}};
  job.start(5, 6, 120, env);
  bool forming = job.pg_keys(1);
  std::this_thread::sleep_for(500ms);  // all of slot 5's keys written; it waits for slot 0's
  INFO(job.describe());
  REQUIRE(forming);
  job.proc(5).signal(SIGSTOP);
  const std::size_t alone = job.store().list(job.pg).kvs.size();
  for (int s = 0; s < 5; ++s) job.start(s, 6, 120, env);
  forming = job.pg_keys(alone * 6);
  INFO(job.describe());
  REQUIRE(forming);
  std::this_thread::sleep_for(2s);  // connecting, or formed
  job.proc(5).signal(SIGKILL);
  job.proc(5).wait(10s);
  job.move_on(1);
  // Each survivor either joined generation 1 (and waits there for the
  // others) or exited saying why.
  const std::string line = "while this rank was still connecting its Gloo group";
  const auto in_generation_1 = [&](int s) {
    const auto members = job.store().multi_get({ddp::store::keys::reform_members_key(job.root, 1)})[0];
    return members && ("," + *members).find("," + std::to_string(s) + ":") != std::string::npos;
  };
  const auto settled = [&](int s) { return !job.proc(s).running() || in_generation_1(s); };
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (int s = 0; s < 5; ++s)
    while (!settled(s) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  INFO(job.describe());
  int exited = 0;
  for (int s = 0; s < 5; ++s) {
    INFO("slot " << s);
    REQUIRE(settled(s));
    if (in_generation_1(s)) continue;
    CHECK(job.proc(s).wait(1s) == 1);
    CHECK_THAT(job.proc(s).err(),
               Catch::Contains(line) && Catch::Contains("Exiting so that ddprun replaces"));
    // An error file (an uncaught MembershipChanged's) would make its agent
    // fall back to restart instead of replacing it.
    CHECK_FALSE(std::filesystem::exists(job.error_file(s)));
    ++exited;
  }
  // The agents take the exits in: the rest form the generation after.
  INFO(exited << " of 5 survivors exited from generation 0's connect");
  if (exited > 0) job.move_on(exited);
  const std::string final_gen = "final gen=" + std::to_string(exited > 0 ? 2 : 1);
  for (int s = 0; s < 5; ++s) {
    if (!in_generation_1(s)) continue;
    INFO("slot " << s);
    CHECK(job.proc(s).wait(60s) == 0);
    CHECK_THAT(job.proc(s).out(),
               Catch::Contains(final_gen) && Catch::Contains(" size=" + std::to_string(5 - exited)));
  }
  return exited;
}

}  // namespace

TEST_CASE(
    "torch re-form: a survivor left in Gloo's connect by a peer lost before it connected exits at once "
    "with one line for its agent to replace it",
    "[connect-listen]") {
  // Slot 5 gets as far as writing its Gloo addresses for generation 0 and
  // stops (the others' entries written for them, so that it is first). A
  // survivor that connects to it is answered by the kernel; one whose end is
  // the listening one waits in Gloo's connect, which only the group's 120 s
  // timeout ends (ports decide which: about half of them). Once the
  // generation moved on, those exit 1 saying why; the others form generation
  // 1, and generation 2 once the agents (the test) took the exits in.
  // With none of the five on the listening end (1 run in 32) the exit is
  // not exercised: the job runs again, up to 3 times.
  if (!have_torch()) return;
  int exited = 0;
  for (int run = 0; run < 3 && exited == 0; ++run) exited = connect_listen_run();
  CHECK(exited > 0);
}

TEST_CASE("torch re-form: torch 1.13 says so in one line and the job falls back to restart", "[torch1]") {
  // Debian's torch 1.13, whatever python the label chose for the others.
  ::unsetenv("DDP_TEST_PYTHON");
  if (!have_torch()) return;
  const auto kill = reform_run({"--kill-rank", "1", "--kill-step", "20", "--steps", "40"});
  INFO(kill.all);
  CHECK(kill.r.code == 0);
  CHECK_THAT(kill.all, Catch::Contains("ddprun.elastic: torch 1.13"));
  CHECK_THAT(kill.all,
             Catch::Contains("not re-forming in process; ddprun falls back to --on_failure=restart"));
  CHECK_THAT(kill.all, Catch::Contains("falling back to --on_failure=restart for this run"));
  CHECK(final_loss(kill.all) > 0);
}

TEST_CASE("torch re-form: a script that catches MembershipChanged but never re-forms falls back to restart",
          "[catch]") {
  if (!have_torch()) return;
  const auto kill = reform_run({"--kill-rank", "1", "--kill-step", "20", "--steps", "40", "--catch-only"},
                               {{"DDP_REFORM_ABANDON", "2"}});
  INFO(kill.all);
  CHECK(kill.r.code == 0);
  CHECK_THAT(kill.all,
             Catch::Contains("this script never called ElasticGroup.reform(): exiting so that ddprun "
                             "falls back to --on_failure=restart"));
  CHECK_THAT(kill.all,
             Catch::Contains("did not catch ddp::MembershipChanged: falling back to --on_failure=restart"));
  CHECK(final_loss(kill.all) > 0);
}

TEST_CASE("torch re-form: FSDP, a SIGKILLed rank is replaced, the others reload the checkpoint in process",
          "[fsdp]") {
  if (!have_torch()) return;
  TempDir ckpt;
  const auto base = reform_run({"--ckpt-dir", (ckpt.path() / "base").string()}, {}, "reform_fsdp.py");
  INFO("no kill:\n" << base.all);
  REQUIRE(base.r.code == 0);
  const auto kill =
      reform_run({"--kill-rank", "2", "--kill-step", "50", "--ckpt-dir", (ckpt.path() / "kill").string()},
                 {{"PYTHONPATH", script("exit_threads")}}, "reform_fsdp.py");
  INFO("kill:\n" << kill.all);
  REQUIRE(kill.r.code == 0);
  check_rank2_replaced(kill.all);  // the steps since the checkpoint of step 40 are done again
  // The survivors' groups of generation 0 are gone by the end of their
  // ElasticGroup's close(), not left to the interpreter's teardown: each
  // holds as many Gloo groups at exit as the replacement, which never had one.
  const std::string replacement = "exit threads: rank 2 gloo groups ";
  const auto at = kill.all.find(replacement);
  REQUIRE(at != std::string::npos);
  const std::string held = kill.all.substr(at + replacement.size(), 1);
  for (int r : {0, 1, 3})
    CHECK(count(kill.all, "exit threads: rank " + std::to_string(r) + " gloo groups " + held + "\n") == 1);
  CHECK(count(kill.all, "steps lost 10;") == 4);
  const double a = final_loss(base.all), b = final_loss(kill.all);
  CHECK(a > 0);
  CHECK(std::fabs(a - b) <= kFsdpLossTolerance);

  // Killed as the others save the checkpoint of step 60: theirs fails in DCP's collectives, `latest`
  // still names step 40, and the 20 steps since are done again.
  const auto in_save = reform_run({"--kill-rank", "2", "--kill-step", "60", "--kill-in-save", "--ckpt-dir",
                                   (ckpt.path() / "in_save").string()},
                                  {}, "reform_fsdp.py");
  INFO("kill in the save:\n" << in_save.all);
  REQUIRE(in_save.r.code == 0);
  CHECK_THAT(in_save.all, !Catch::Contains("falling back") && !Catch::Contains("restarting workers"));
  CHECK(count(in_save.all, "loaded the checkpoint of step 40, rank ") == 3);
  CHECK(count(in_save.all, "steps lost 20;") == 4);
  CHECK(std::fabs(a - final_loss(in_save.all)) <= kFsdpLossTolerance);
}

TEST_CASE("torch re-form: FSDP, kill -9 of a node's agent with no spare, 2 ranks reload the checkpoint",
          "[fsdp-shrink]") {
  if (!have_torch()) return;
  const std::vector<std::string> args = {"--steps", "300", "--step-sleep-ms", "15", "--ckpt-every", "10"};
  TempDir ckpt;
  auto with_dir = [&](const std::string& name) {
    auto a = args;
    a.insert(a.end(), {"--ckpt-dir", (ckpt.path() / name).string()});
    return a;
  };
  const auto base = reform_run(with_dir("base"), {}, "reform_fsdp.py");
  INFO("no kill:\n" << base.all);
  REQUIRE(base.r.code == 0);
  NodeKill k(/*with_spare=*/false, with_dir("shrink"), "reform_fsdp.py", "saved the checkpoint of step 30");
  INFO("node a:\n" << k.a);
  CHECK(k.a_code == std::optional<int>(0));
  CHECK(count(k.a, ": started, rank") == 2);  // node a's ranks kept their processes
  CHECK_THAT(k.a, Catch::Contains("no hot spare: the job goes on without ranks ") &&
                      Catch::Contains("world size 2"));
  // The checkpoint of 4 shards, loaded by 2 (a later one than the kill waited for, or that one).
  CHECK_THAT(k.a, Catch::Contains(": loaded the checkpoint of step ") && Catch::Contains(", rank 1 of 2"));
  CHECK_THAT(k.a, !Catch::Contains("falling back"));
  // The rest of the run with half the global batch: the loss over the data set, steadier than the
  // last step's.
  const double clean = data_set_loss(base.all), got = data_set_loss(k.a);
  CHECK(clean > 0);
  CHECK(std::fabs(clean - got) <= kShrinkLossTolerance * clean);
}

TEST_CASE("torch re-form: a rank whose step is held up after its generation ended says where, once",
          "[held]") {
  if (!have_torch()) return;
  TempDir dir;
  const std::vector<std::string> argv = {"--standalone", "--nproc_per_node=2", "--on_failure=reform",
                                         "--max_restarts=1",
                                         (source_dir() / "tests/integration/torch/held_step.py").string()};
  const auto r =
      run(ddprun(argv), dir.path(), worker_env({{"PYTHONPATH", (source_dir() / "python").string()}}), 200s);
  const std::string all = r.out + r.err;
  INFO(all);
  CHECK(r.code == 0);
  CHECK(count(all, "but its step has not returned; main thread in held_up (held_step.py:") == 1);
  CHECK_THAT(all, Catch::Contains("ended 10 s ago and this rank shut its"));
  CHECK(count(all, "done at generation 1") == 2);
}
