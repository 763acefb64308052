// ddp-bench soak: many short jobs against one ddp-rendezvousd, to show that
// what finished jobs and old rounds leave behind is reclaimed. Each job is
// --nodes simulated agents (one TcpStore each) running --rounds rendezvous
// rounds with the keys ddprun writes (round pointer, arrivals, leased node
// records, the close record, worker bootstrap keys, agent status records),
// then revoking their leases and closing the job. Jobs run --parallel at a
// time; after every --jobs-per-cycle jobs the bench waits for the daemon to
// reclaim them (its `keys` stat back to where it started) and prints the
// daemon's RSS, the data dir's size and the reclaimed counters. Prints figures,
// asserts nothing (the CI test asserts the key count on a short run).
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string endpoint;
  int jobs = 1000;
  int jobs_per_cycle = 100;
  int rounds = 20;
  int nodes = 2;
  int parallel = 4;
  int server_pid = 0;
  std::string data_dir;
  double reclaim_timeout_s = 30;
};

long dir_bytes(const std::string& dir) {
  if (dir.empty()) return -1;
  std::error_code ec;
  long total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += static_cast<long>(e.file_size(ec));
  }
  return total;
}

store::TcpStoreOptions client_options(const Endpoint& where) {
  store::TcpStoreOptions o;
  o.endpoint = where;
  o.connect_timeout = std::chrono::seconds(10);
  o.request_timeout = std::chrono::seconds(10);
  o.bind_leases_to_connection = true;
  return o;
}

// One job from start to finish: the requests of ddprun's c10d rounds, minus the
// waiting (the nodes take turns on one thread).
void run_job(const Options& o, const Endpoint& where, const std::string& run) {
  std::vector<std::unique_ptr<store::TcpStore>> nodes;
  std::vector<store::LeaseId> leases;
  for (int i = 0; i < o.nodes; ++i) {
    nodes.push_back(std::make_unique<store::TcpStore>(client_options(where)));
    leases.push_back(nodes.back()->lease_grant(std::chrono::seconds(60)));
  }
  const std::string record = "{\"host\":\"127.0.0.1\",\"id\":\"node\",\"nproc\":8}";
  for (int r = 0; r < o.rounds; ++r) {
    const auto prefix = store::keys::round_prefix(run, r);
    const auto workers = store::keys::worker_prefix(run, r);
    for (int i = 0; i < o.nodes; ++i) {
      std::vector<store::BatchOp> ops;
      ops.push_back(store::BatchOp::set(store::keys::joining_key(prefix, "node" + std::to_string(i)), "",
                                        leases[static_cast<std::size_t>(i)]));
      ops.push_back(store::BatchOp::add(prefix + "seq", (std::int64_t{1} << 32) | 8));
      ops.push_back(
          store::BatchOp::set(store::keys::node_key(prefix, i), record, leases[static_cast<std::size_t>(i)]));
      ops.push_back(store::BatchOp::set(workers + "rank_" + std::to_string(i), "127.0.0.1:29500"));
      ops.push_back(store::BatchOp::set(store::keys::agent_status_key(run, "node" + std::to_string(i)),
                                        "{\"state\":\"running\",\"round\":" + std::to_string(r) + "}"));
      nodes[static_cast<std::size_t>(i)]->batch(ops);
      store::rethrow_first_error(ops);
    }
    auto& closer = *nodes.back();
    closer.compare_set(prefix + "closed", "",
                       std::to_string(o.nodes) + " " + std::to_string(8 * o.nodes) + " 0");
    closer.set(store::keys::round_pointer_key(run), std::to_string(r + 1));
    closer.add(workers + "init", 1);
  }
  for (int i = 0; i < o.nodes; ++i)
    nodes[static_cast<std::size_t>(i)]->lease_revoke(leases[static_cast<std::size_t>(i)]);
  nodes.front()->set(store::keys::rdzv_prefix(run) + "closed", "job finished");
}

std::int64_t stat_of(store::TcpStore& s, const std::string& name) {
  const auto st = s.stat();
  const auto it = st.find(name);
  return it == st.end() ? -1 : std::stoll(it->second);
}

int soak_main(int argc, char** argv) {
  Options o;
  CLI::App app{"Many short jobs against one daemon: are finished jobs' and old rounds' keys reclaimed?"};
  app.add_option("--endpoint", o.endpoint, "HOST:PORT of a ddp-rendezvousd (run with --reclaim-idle-jobs-ms)")
      ->required();
  app.add_option("--jobs", o.jobs, "jobs in all")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--jobs-per-cycle", o.jobs_per_cycle, "jobs between two measurements")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "rendezvous rounds per job")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--nodes", o.nodes, "agents per job")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--parallel", o.parallel, "jobs at a time")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--server-pid", o.server_pid, "the daemon's pid, for its RSS");
  app.add_option("--data-dir", o.data_dir, "the daemon's --data-dir, for its size");
  app.add_option("--reclaim-timeout-s", o.reclaim_timeout_s, "how long a cycle waits for reclamation")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const auto where = parse_endpoint(o.endpoint, "--endpoint");
  store::TcpStore control(client_options(where));
  const auto base_keys = stat_of(control, "keys");
  std::printf("ddp-bench soak: store=%s jobs=%d rounds=%d nodes=%d parallel=%d base_keys=%lld\n",
              where.to_string().c_str(), o.jobs, o.rounds, o.nodes, o.parallel,
              static_cast<long long>(base_keys));
  std::printf("%6s  %8s  %8s  %10s  %12s  %14s  %13s  %9s\n", "cycle", "jobs", "run_s", "reclaim_s",
              "rss_kib", "data_dir_bytes", "reclaimed_keys", "keys");
  std::fflush(stdout);
  const std::string tag = "soak" + std::to_string(::getpid());
  int started = 0;
  for (int cycle = 1; started < o.jobs; ++cycle) {
    const int upto = std::min(o.jobs, started + o.jobs_per_cycle);
    const auto t0 = Clock::now();
    std::atomic<int> next{started};
    std::atomic<int> failures{0};
    std::string first_error;
    std::mutex err_mu;
    std::vector<std::thread> threads;
    for (int t = 0; t < o.parallel; ++t) {
      threads.emplace_back([&] {
        for (int j = next++; j < upto; j = next++) {
          try {
            run_job(o, where, tag + "_" + std::to_string(j));
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lk(err_mu);
            if (failures++ == 0) first_error = e.what();
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    started = upto;
    if (failures > 0) {
      std::printf("FAILED: %d jobs, first error: %s\n", failures.load(), first_error.c_str());
      return 1;
    }
    const auto t1 = Clock::now();
    std::int64_t keys = stat_of(control, "keys");
    while (keys > base_keys && Clock::now() - t1 < std::chrono::duration<double>(o.reclaim_timeout_s)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      keys = stat_of(control, "keys");
    }
    const auto t2 = Clock::now();
    std::printf("%6d  %8d  %8.2f  %10.2f  %12ld  %14ld  %13lld  %9lld\n", cycle, started,
                std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(t2 - t1).count(),
                o.server_pid > 0 ? rss_kib(o.server_pid) : -1L, dir_bytes(o.data_dir),
                static_cast<long long>(stat_of(control, "reclaimed_keys")), static_cast<long long>(keys));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("soak", "many short jobs against one daemon: reclaimed keys, RSS, data dir", soak_main);

}  // namespace ddp::bench
