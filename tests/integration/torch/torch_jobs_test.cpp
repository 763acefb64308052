// Torch workers' store namespaces (docs/rendezvous.md, "Torch workers' store"):
// several torch jobs started together on one ddp-rendezvousd, a running torch
// job scaled up and down, and a --hosts job on the launcher's store, each rank
// checking a job-specific all_reduce.
// Real python3 + torch 1.13 workers (gloo); label torch.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <regex>

#include "etcd_cluster.hpp"
#include "test_support.hpp"
#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

// One ddprun node of job `id` running job_allreduce.py with 1 worker, on the
// daemon at `endpoint` (or etcd members with backend "etcd").
std::unique_ptr<Process> node(const TempDir& dir, const std::string& endpoint, const std::string& id,
                              const std::string& nnodes, int value, const std::string& name, Env extra = {},
                              const std::string& backend = "c10d",
                              const std::vector<std::string>& flags = {}) {
  Env env = {{"OMP_NUM_THREADS", std::nullopt}, {"PET_NPROC_PER_NODE", std::nullopt},
             {"PET_NNODES", std::nullopt},      {"PET_STANDALONE", std::nullopt},
             {"PYTHONUNBUFFERED", "1"},         {"JOB_VALUE", std::to_string(value)}};
  for (auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> argv{bin("ddprun").string(),
                                "--python",
                                python(),
                                "--nnodes=" + nnodes,
                                "--nproc_per_node=1",
                                "--rdzv_backend=" + backend,
                                "--rdzv_endpoint=" + endpoint,
                                "--rdzv_id=" + id,
                                "--max_restarts=0",
                                "--rdzv_conf=last_call_timeout=0.5,keep_alive_interval=1,join_timeout=60"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back((source_dir() / "tests/integration/torch/job_allreduce.py").string());
  return std::make_unique<Process>(argv, dir.path(), env, name);
}

// Lines "allreduce job=ID world=W rank=R sum=S restart=N ok" in `out`, as "W/R/S/N".
std::vector<std::string> results(const std::string& out, const std::string& id) {
  std::vector<std::string> found;
  static const std::regex re(
      "allreduce job=([^ ]+) world=([0-9]+) rank=([0-9]+) sum=(-?[0-9]+) restart=([0-9]+) ok");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    if ((*it)[1] == id)
      found.push_back((*it)[2].str() + "/" + (*it)[3].str() + "/" + (*it)[4].str() + "/" + (*it)[5].str());
  }
  return found;
}

// Waits for the two nodes of job `id`, each of which must exit 0, and returns
// their results.
std::vector<std::string> results_of_both(Process& a, Process& b, const std::string& id) {
  const auto ca = a.wait(150s);
  const auto cb = b.wait(150s);
  INFO(a.out() << a.err() << b.out() << b.err());
  CHECK(ca == 0);
  CHECK(cb == 0);
  return results(a.out() + b.out(), id);
}

std::size_t count(const std::vector<std::string>& v, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& s : v) n += s.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

// Starts `jobs` two-node jobs together on one daemon, `reps` times; every rank
// of every job must see its own job's sum.
void run_concurrent_jobs(int jobs, int reps) {
  TempDir dir;
  Daemon d(dir);
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::unique_ptr<Process>> nodes;
    for (int j = 0; j < jobs; ++j) {
      const std::string id = "job" + std::to_string(j) + "-rep" + std::to_string(rep);
      const int value = 100 * (j + 1) + rep;  // world 2: sum = 3 * value
      for (int n = 0; n < 2; ++n)
        nodes.push_back(node(dir, d.endpoint(), id, "2", value, id + "-node" + std::to_string(n)));
    }
    for (int j = 0; j < jobs; ++j) {
      const std::string id = "job" + std::to_string(j) + "-rep" + std::to_string(rep);
      const std::string sum = std::to_string(3 * (100 * (j + 1) + rep));
      auto& a = *nodes[static_cast<std::size_t>(2 * j)];
      auto& b = *nodes[static_cast<std::size_t>(2 * j + 1)];
      const auto ca = a.wait(150s);
      const auto cb = b.wait(150s);
      INFO("job " << id << "\n" << a.out() << a.err() << b.out() << b.err());
      CHECK(ca == 0);
      CHECK(cb == 0);
      const auto got = results(a.out() + b.out(), id);
      CHECK(count(got, "2/0/" + sum + "/0") == 1);
      CHECK(count(got, "2/1/" + sum + "/0") == 1);
    }
  }
  // Each job's torch keys sit under its own run id and round (torch 1.x adds
  // its per-attempt prefix below that, torch 2.x does not).
  auto keys =
      run({bin("ddp-store").string(), "--endpoint", d.endpoint(), "list", "/job0-rep0/worker/"}, dir.path());
  CHECK_THAT(keys.out, Catch::StartsWith("/job0-rep0/worker/round_0/"));
}

}  // namespace

TEST_CASE("two torch jobs started together on one daemon each all_reduce their own values, three times") {
  if (!have_torch()) return;
  run_concurrent_jobs(2, 3);
}

TEST_CASE("three torch jobs started together on one daemon each all_reduce their own values, three times") {
  if (!have_torch()) return;
  run_concurrent_jobs(3, 3);
}

TEST_CASE("a running torch job scales from 2 to 3 nodes and back without spending a restart") {
  if (!have_torch()) return;
  TempDir dir;
  Daemon d(dir);
  const Env hold = {{"HOLD_FILE", (dir / "release").string()}};
  auto a = node(dir, d.endpoint(), "elastic", "2:3", 7, "nodeA", hold);
  auto b = node(dir, d.endpoint(), "elastic", "2:3", 7, "nodeB", hold);
  auto outputs = [&](std::initializer_list<Process*> ps) {
    std::string all;
    for (auto* p : ps) all += p->out();
    return results(all, "elastic");
  };
  // world 2: 7 * (1 + 2) = 21; world 3: 7 * 6 = 42.
  const bool both = wait_until([&] { return count(outputs({a.get(), b.get()}), "2/") == 2; }, 120s);
  INFO(a->out() << a->err() << b->out() << b->err());
  REQUIRE(both);

  auto c = node(dir, d.endpoint(), "elastic", "2:3", 7, "nodeC", hold);
  const bool grew = wait_until([&] { return count(outputs({a.get(), b.get(), c.get()}), "3/") == 3; }, 120s);
  INFO(a->out() << a->err() << b->out() << b->err() << c->out() << c->err());
  REQUIRE(grew);
  auto got = outputs({a.get(), b.get(), c.get()});
  for (const char* rank : {"0", "1", "2"}) CHECK(count(got, std::string("3/") + rank + "/42/0") == 1);

  // A node dies (its lease goes with its connection): the others re-form at 2.
  c->signal(SIGKILL);
  CHECK(c->wait(30s).has_value());
  const bool shrank = wait_until([&] { return count(outputs({a.get(), b.get()}), "2/") == 4; }, 120s);
  INFO(a->out() << a->err() << b->out() << b->err());
  REQUIRE(shrank);
  got = outputs({a.get(), b.get()});
  CHECK(count(got, "2/0/21/0") == 2);
  CHECK(count(got, "2/1/21/0") == 2);

  // Every round's torch keys are the job's, each round under its own prefix;
  // round 0's were reclaimed by the daemon when round 2 closed (keep_rounds 2).
  auto status = run({bin("ddp-store").string(), "--endpoint", d.endpoint(), "status", "--rdzv_id", "elastic"},
                    dir.path());
  INFO(status.out << status.err);
  CHECK_THAT(status.out, Catch::Contains("WORKER_KEYS") && !Catch::Contains("/elastic/worker/round_0/") &&
                             Catch::Contains("/elastic/worker/round_1/") &&
                             Catch::Contains("/elastic/worker/round_2/"));

  write_file(dir / "release", "");
  const auto ca = a->wait(60s);
  const auto cb = b->wait(60s);
  INFO(a->out() << a->err() << b->out() << b->err());
  CHECK(ca == 0);
  CHECK(cb == 0);
  CHECK_THAT(a->err() + b->err(), !Catch::Contains("restarting workers"));
}

TEST_CASE("torch workers of a job on etcd all_reduce through group rank 0's store") {
  if (!have_torch()) return;
  if (EtcdCluster::binary().empty()) {
    WARN("SKIP: no etcd binary (apt install etcd-server, or set DDP_ETCD_BIN)");
    return;
  }
  TempDir dir;
  fs::create_directories(dir / "etcd");
  EtcdCluster etcd(dir / "etcd");
  auto a = node(dir, etcd.endpoints_text(), "etcdjob", "2", 5, "nodeA", {}, "etcd");
  auto b = node(dir, etcd.endpoints_text(), "etcdjob", "2", 5, "nodeB", {}, "etcd");
  const auto got = results_of_both(*a, *b, "etcdjob");
  CHECK(count(got, "2/0/15/0") == 1);
  CHECK(count(got, "2/1/15/0") == 1);
}

TEST_CASE("torch workers reach a daemon that requires a token, which TCPStore clients cannot present") {
  if (!have_torch()) return;
  TempDir dir;
  write_file(dir / "token", "s3cret\n");
  Daemon d(dir, {"--token-file", (dir / "token").string()});
  const std::vector<std::string> token = {"--token_file=" + (dir / "token").string()};
  auto a = node(dir, d.endpoint(), "tokenjob", "2", 4, "nodeA", {}, "c10d", token);
  auto b = node(dir, d.endpoint(), "tokenjob", "2", 4, "nodeB", {}, "c10d", token);
  const auto got = results_of_both(*a, *b, "tokenjob");
  CHECK(count(got, "2/0/12/0") == 1);
  CHECK(count(got, "2/1/12/0") == 1);
}

TEST_CASE(
    "torch workers of a --hosts job all_reduce through the launcher's store, ranks in the host list's "
    "order") {
  if (!have_torch()) return;
  TempDir dir;
  // A stand-in for ssh that runs the remote command here; the first host's
  // starts a second late, so that it arrives last.
  const auto ssh = dir / "ssh";
  write_file(ssh,
             "#!/bin/bash\n"
             "while [ \"$1\" != -- ]; do [ \"$1\" = localhost ] && sleep 1; shift; done\n"
             "exec bash -c \"$2\"\n");
  fs::permissions(ssh, fs::perms::owner_all);
  const Env env = {{"OMP_NUM_THREADS", std::nullopt}, {"PET_NPROC_PER_NODE", std::nullopt},
                   {"PET_NNODES", std::nullopt},      {"PET_STANDALONE", std::nullopt},
                   {"SLURM_JOB_ID", std::nullopt},    {"SLURM_JOBID", std::nullopt},
                   {"PYTHONUNBUFFERED", "1"},         {"JOB_VALUE", "6"},
                   {"DDP_SSH_COMMAND", ssh.string()}, {"DDP_SSH_ENV", "JOB_VALUE"}};
  Process job({bin("ddprun").string(), "--hosts", "localhost:1,127.0.0.1:2", "--local_addr=127.0.0.1",
               "--rdzv_id=hostsjob", "--python", python(),
               (source_dir() / "tests/integration/torch/job_allreduce.py").string()},
              dir.path(), env, "launcher");
  const auto code = job.wait(150s);
  INFO(job.out() << job.err());
  REQUIRE(code == 0);
  // World 3: sum = 6 * 3 * 4 / 2. Rank 0 on localhost, the first host.
  for (const auto& [host, rank] :
       std::vector<std::pair<std::string, int>>{{"localhost", 0}, {"127.0.0.1", 1}, {"127.0.0.1", 2}}) {
    CHECK_THAT(job.out(), Catch::Contains(host + ": [rank " + std::to_string(rank) +
                                          "]:allreduce job=hostsjob world=3 rank=" + std::to_string(rank) +
                                          " sum=36 restart=0 ok"));
  }
}
