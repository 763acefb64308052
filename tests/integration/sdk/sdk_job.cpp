#include "sdk_job.hpp"

#include <signal.h>
#include <unistd.h>

namespace ddp::test {

SdkJob::SdkJob() {
  store::StoreServerOptions options;
  options.host = "127.0.0.1";
  server_ = std::make_unique<store::StoreServer>(options);
  server_->start();
}

SdkJob::~SdkJob() { server_->stop(); }

std::string SdkJob::endpoint() const { return "127.0.0.1:" + std::to_string(server_->port()); }

std::vector<RankResult> SdkJob::run(const std::vector<std::string>& argv, int world,
                                    std::map<std::string, std::optional<std::string>> extra_env,
                                    std::chrono::milliseconds timeout) {
  const std::string prefix = "job" + std::to_string(job_++) + "/";
  std::vector<std::unique_ptr<Process>> procs;
  for (int r = 0; r < world; ++r) {
    auto env = extra_env;
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(world);
    env["LOCAL_RANK"] = std::to_string(r);
    env["LOCAL_WORLD_SIZE"] = std::to_string(world);
    env["DDP_STORE_ENDPOINT"] = endpoint();
    env["DDP_STORE_PREFIX"] = prefix;
    if (!extra_env.count("TORCHELASTIC_ERROR_FILE")) env["TORCHELASTIC_ERROR_FILE"] = std::nullopt;
    procs.push_back(std::make_unique<Process>(
        argv, dir_.path(), env, prefix.substr(0, prefix.size() - 1) + "_rank" + std::to_string(r)));
  }
  // Like ddprun's agent: once a rank fails, the others get a grace period and
  // are then stopped (a rank blocked in a collective with a live but idle peer
  // would otherwise wait out its timeout).
  std::vector<std::optional<int>> codes(procs.size());
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  wait_until(
      [&] {
        bool all_done = true;
        for (std::size_t i = 0; i < procs.size(); ++i) {
          if (!codes[i] && !procs[i]->running()) codes[i] = procs[i]->wait(std::chrono::milliseconds(0));
          all_done = all_done && codes[i].has_value();
          if (codes[i] && *codes[i] != 0 && !kill_at)
            kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        }
        if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
          for (auto& p : procs) p->signal(SIGKILL);
        }
        return all_done;
      },
      timeout);
  std::vector<RankResult> results;
  for (std::size_t i = 0; i < procs.size(); ++i) {
    results.push_back({codes[i].value_or(-1), procs[i]->out(), procs[i]->err()});
  }
  return results;
}

std::string describe(const std::vector<RankResult>& results) {
  std::string s;
  for (std::size_t r = 0; r < results.size(); ++r) {
    s += "rank " + std::to_string(r) + " exit " + std::to_string(results[r].code) + "\n--- stdout\n" +
         results[r].out + "--- stderr\n" + results[r].err + "\n";
  }
  return s;
}

}  // namespace ddp::test
