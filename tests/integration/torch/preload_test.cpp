// ddprun --preload torch with Debian's python3-torch: workers forked from the
// per-node zygote give the same parameters as exec'd ones (also across a
// restart), see exactly what `python3 -u script.py` would, fall back to a
// normal start when the zygote would be unsound to fork, and a killed zygote
// is replaced. Skipped (SKIP:) without torch, failed under CI=true.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <regex>
#include <set>

#include "test_support.hpp"
#include "torch_support.hpp"

using namespace ddp::test;
using namespace ddp::test::torch;
using namespace std::chrono_literals;

namespace {

// Every "FACTS {...}" line, by rank prefix, as printed.
std::set<std::string> facts(const std::string& out) {
  std::set<std::string> lines;
  static const std::regex re(R"((\[rank [0-9]+\]:FACTS .*))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    lines.insert((*it)[1].str());
  return lines;
}

const char* kReady = "preload zygote ready";
const char* kFallback = "workers start normally";

}  // namespace

TEST_CASE("with --preload torch, the torch DDP script gives the reference parameters, also after a restart") {
  if (!have_torch()) return;
  const auto ref = reference_params();
  TempDir dir;
  auto r = run(ddprun({"--standalone", "--nproc_per_node=2", "--max_restarts=1", "--stop_timeout=5",
                       "--preload", "torch", script("ddp_train.py"), (dir / "ckpt").string()}),
               dir.path(), worker_env({{"FAIL_EPOCH", "2"}, {"FAIL_RANK", "1"}}), 120s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains(kReady) && !Catch::Contains(kFallback));
  CHECK_THAT(r.err + r.out, Catch::Contains("injected failure at epoch 2"));
  CHECK_THAT(r.out, Catch::Contains("resumed from epoch 1 restart=1"));
  CHECK(final_params(r.out) == ref);
}

TEST_CASE(
    "with --preload torch, a forked worker sees what `python3 -u script.py` would, sys.exit(3) included") {
  if (!have_torch()) return;
  TempDir dir;
  fs::create_directories(dir / "plain");
  fs::create_directories(dir / "forked");
  const std::vector<std::string> cmd = {script("preload/semantics.py"), "exit3", "two words"};
  auto base_args = std::vector<std::string>{"--standalone", "--nproc_per_node=2", "--stop_timeout=5"};
  auto plain_args = base_args;
  plain_args.insert(plain_args.end(), cmd.begin(), cmd.end());
  auto preload_args = base_args;
  preload_args.insert(preload_args.end(), {"--preload", "torch"});
  preload_args.insert(preload_args.end(), cmd.begin(), cmd.end());

  const auto env = [&](const char* marks) {
    return worker_env({{"PRELOAD_TEST_VAR", "from the user"}, {"MARKS", (dir / marks).string()}});
  };
  auto plain = run(ddprun(plain_args), dir.path(), env("plain"), 60s);
  auto forked = run(ddprun(preload_args), dir.path(), env("forked"), 60s);
  INFO("plain:\n" << plain.out << plain.err << "\npreload:\n" << forked.out << forked.err);
  CHECK_THAT(forked.err, Catch::Contains(kReady) && !Catch::Contains(kFallback));
  CHECK_THAT(forked.out, Catch::Contains("rank 0 torch preloaded=True"));
  CHECK_THAT(plain.out, Catch::Contains("rank 0 torch preloaded=False"));
  // __name__, __file__, argv, sys.path[0], the sibling import, env (Python's
  // and the C library's), cwd, signal dispositions and mask, process group,
  // open fds, stdio: the same line for each rank either way.
  CHECK(facts(forked.out).size() == 2);
  CHECK(facts(forked.out) == facts(plain.out));
  // rank 1's sys.exit(3): the same outcome, reported with the worker's own pid.
  CHECK(plain.code == 1);
  CHECK(forked.code == 1);
  CHECK_THAT(forked.err, Catch::Contains("exit code 3"));
  std::smatch m;
  REQUIRE(std::regex_search(forked.out, m, std::regex("rank 1 torch preloaded=True pid=([0-9]+)")));
  CHECK_THAT(forked.err, Catch::Contains("pid        : " + m[1].str()));
}

TEST_CASE("with --preload torch, an exception in the script is reported with the script's traceback") {
  if (!have_torch()) return;
  TempDir dir;
  auto r = run(ddprun({"--standalone", "--nproc_per_node=2", "--stop_timeout=5", "--preload", "torch",
                       script("preload/semantics.py"), "raise"}),
               dir.path(), worker_env(), 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(kReady));
  CHECK_THAT(r.err, Catch::Contains("ValueError: raised by the script on rank 0"));
  CHECK_THAT(r.err, Catch::Contains("semantics.py\", line"));
  CHECK_THAT(r.err, !Catch::Contains("ddp_zygote.py"));  // no launcher frames in the user's traceback
}

TEST_CASE(
    "with --preload of a module that initialised CUDA or started a thread: a warning, and a normal start") {
  if (!have_torch()) return;
  const auto [module, why] = GENERATE(table<std::string, std::string>({
      {"fake_cuda_init", "a preloaded module initialised CUDA (torch.cuda.is_initialized())"},
      {"starts_thread", "a preloaded module started 1 Python thread(s) (import-time-poller)"},
  }));
  INFO("module=" << module);
  TempDir dir;
  auto r = run(ddprun({"--standalone", "--nproc_per_node=2", "--preload", "torch," + module,
                       script("preload/semantics.py"), "ok"}),
               dir.path(), worker_env({{"PYTHONPATH", script("preload")}}), 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("--preload torch," + module + ": " + why));
  CHECK_THAT(r.err, Catch::Contains(kFallback));
  CHECK_THAT(r.err, !Catch::Contains(kReady));
  CHECK_THAT(r.out, Catch::Contains("rank 0 torch preloaded=False") &&
                        Catch::Contains("rank 1 torch preloaded=False"));
}

TEST_CASE(
    "with --preload of a module that started a native thread: a warning that names OMP_NUM_THREADS unless it "
    "is 1") {
  if (!have_torch()) return;
  // ddprun sets OMP_NUM_THREADS=1 itself only with more than one worker per node.
  const int nproc = GENERATE(1, 2);
  INFO("nproc_per_node=" << nproc);
  TempDir dir;
  auto r = run(ddprun({"--standalone", "--nproc_per_node=" + std::to_string(nproc), "--preload",
                       "starts_native_thread", script("preload/semantics.py"), "ok"}),
               dir.path(), worker_env({{"PYTHONPATH", script("preload")}}), 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("--preload starts_native_thread: a preloaded module started 1 native "
                                    "thread(s), which a fork does not copy"));
  CHECK_THAT(r.err, Catch::Contains(kFallback));
  const std::string hint = "set OMP_NUM_THREADS=1 (ddprun sets it itself only with --nproc_per_node > 1)";
  if (nproc == 1) {
    CHECK_THAT(r.err, Catch::Contains(hint));
  } else {
    CHECK_THAT(r.err, !Catch::Contains(hint));
  }
}

TEST_CASE(
    "with --preload torch, a killed zygote is replaced and the restarted workers are forked from the new "
    "one") {
  if (!have_torch()) return;
  TempDir dir;
  Process agent(ddprun({"--standalone", "--nproc_per_node=2", "--max_restarts=1", "--stop_timeout=5",
                        "--preload", "torch", script("preload/until_killed.py")}),
                dir.path(), worker_env({{"MARKS", dir.path().string()}}), "ddprun");
  REQUIRE(wait_until([&] { return fs::exists(dir / "waiting_0") && fs::exists(dir / "waiting_1"); }, 60s));
  std::smatch m;
  const std::string err = agent.err();
  REQUIRE(std::regex_search(err, m, std::regex("preload zygote ready pid=([0-9]+)")));
  ::kill(std::stoi(m[1].str()), SIGKILL);
  const auto code = agent.wait(60s);
  INFO(agent.out() << agent.err());
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_THAT(agent.err(), Catch::Contains("pid=" + m[1].str() + " exited (SIGKILL)") &&
                              Catch::Contains("starting a new one"));
  CHECK_THAT(agent.out(), Catch::Contains("rank 0 restart=1 torch preloaded=True") &&
                              Catch::Contains("rank 1 restart=1 torch preloaded=True"));
}
