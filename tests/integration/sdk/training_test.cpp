// DDP's promise, checked end to end with ddp-example-train: world 4 x batch B
// trains to the same parameters as world 1 x batch 4B.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "sdk_job.hpp"

using namespace ddp::test;

namespace {

std::vector<double> load_params(const fs::path& path) {
  std::istringstream in(read_file(path));
  std::vector<double> out;
  for (double v; in >> v;) out.push_back(v);
  return out;
}

// Largest difference relative to the parameter scale.
double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
  return worst;
}

std::vector<std::string> train_args(const SdkJob& job, const std::string& tag, int batch,
                                    std::vector<std::string> more = {}) {
  std::vector<std::string> argv{bin("ddp-example-train").string(), "--epochs", "2", "--dataset-size", "1024",
                                "--hidden", "24", "--lr", "0.3", "--batch-size", std::to_string(batch),
                                // Several small buckets, so a mis-sized or misordered bucket shows.
                                "--bucket-cap-kb", "1", "--first-bucket-cap-kb", "1", "--checkpoint",
                                (job.dir() / (tag + ".ckpt")).string(), "--dump-params",
                                (job.dir() / (tag + ".txt")).string()};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

std::vector<double> train(SdkJob& job, const std::string& tag, int world, int batch,
                          std::vector<std::string> more = {}) {
  const auto results = job.run(train_args(job, tag, batch, std::move(more)), world);
  INFO(describe(results));
  for (const auto& r : results) REQUIRE(r.code == 0);
  return load_params(job.dir() / (tag + ".txt"));
}

}  // namespace

TEST_CASE("world 4 x batch B gives the same parameters as world 1 x batch 4B") {
  SdkJob job;
  const auto one = train(job, "w1", 1, 32);
  const auto four = train(job, "w4", 4, 8);
  const auto four_after_backward = train(job, "w4-no-overlap", 4, 8, {"--no-overlap"});
  CHECK(max_difference(four, one) < 1e-4);
  CHECK(max_difference(four_after_backward, one) < 1e-4);
  // The comparison is sensitive: one epoch less is far away.
  SdkJob other;
  const auto fewer = train(other, "w1-short", 1, 32, {"--epochs", "1"});
  CHECK(max_difference(fewer, one) > 1e-3);
}

TEST_CASE("gradient accumulation under no_sync matches one large batch") {
  SdkJob job;
  const auto one = train(job, "w1", 1, 64);
  const auto accumulated = train(job, "w4-accum", 4, 8, {"--grad-accum", "2"});
  CHECK(max_difference(accumulated, one) < 1e-4);
}

TEST_CASE("after a failure every rank resumes from rank 0's checkpoint") {
  SdkJob job;
  const auto first = job.run(train_args(job, "restart", 8, {"--epochs", "3", "--fail-at-epoch", "1"}), 2);
  INFO(describe(first));
  CHECK(first[1].code == 1);  // the injected failure
  CHECK_THAT(first[1].err, Catch::Contains("injected failure after epoch 1"));
  CHECK(first[0].code != 0);  // stopped, as the agent would
  const auto second =
      job.run(train_args(job, "restart", 8, {"--epochs", "3"}), 2, {{"TORCHELASTIC_RESTART_COUNT", "1"}});
  INFO(describe(second));
  CHECK(second[0].code == 0);
  CHECK(second[1].code == 0);
  CHECK_THAT(second[0].out, Catch::Contains("resuming from"));
  CHECK_THAT(second[0].out, Catch::Contains("after epoch 1 (restart 1)"));
  CHECK_THAT(second[0].out, !Catch::Contains("epoch 1/3"));
  CHECK_THAT(second[0].out, Catch::Contains("epoch 3/3"));
}

TEST_CASE("without ddprun, rank 0 hosts the store on MASTER_PORT") {
  TempDir dir;
  // A port that was free a moment ago; the window until rank 0 binds it is tiny.
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Process>> procs;
  for (int r = 0; r < 2; ++r) {
    procs.push_back(std::make_unique<Process>(
        std::vector<std::string>{bin("ddp-example-train").string(), "--epochs", "1", "--dataset-size", "256",
                                 "--checkpoint", (dir / "m.ckpt").string()},
        dir.path(),
        std::map<std::string, std::optional<std::string>>{{"RANK", std::to_string(r)},
                                                          {"WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                          {"MASTER_PORT", port},
                                                          {"DDP_STORE_ENDPOINT", std::nullopt}},
        "rank" + std::to_string(r)));
  }
  for (auto& p : procs) {
    const auto code = p->wait(std::chrono::seconds(60));
    INFO(p->out() << p->err());
    CHECK(code == 0);
  }
  CHECK_THAT(procs[0]->out(), Catch::Contains("epoch 1/1 loss"));
}
