#include "torch_support.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <regex>

#include "test_support.hpp"

namespace ddp::test::torch {

std::string python() {
  const char* p = std::getenv("DDP_TEST_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

bool have_torch() {
  static const bool ok = [] {
    TempDir dir;
    return run({python(), "-c", "import torch.distributed"}, dir.path()).code == 0;
  }();
  if (!ok) {
    if (std::getenv("CI") != nullptr) FAIL(python() << " cannot import torch under CI; run scripts/setup.sh");
    const bool debian = python() == "/usr/bin/python3";
    WARN("SKIP: " << python() << " cannot import torch ("
                  << (debian ? "apt install python3-torch"
                             : "scripts/setup.sh --torch2 creates .venv with torch 2.x")
                  << ")");
  }
  return ok;
}

std::string script(const std::string& name) {
  return (source_dir() / "tests/integration/torch" / name).string();
}

Env worker_env(Env extra) {
  Env env = {{"OMP_NUM_THREADS", std::nullopt}, {"PET_NPROC_PER_NODE", std::nullopt},
             {"PET_NNODES", std::nullopt},      {"PET_STANDALONE", std::nullopt},
             {"PET_PRELOAD", std::nullopt},     {"PYTHONUNBUFFERED", "1"}};
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

std::vector<std::string> ddprun(std::vector<std::string> args) {
  args.insert(args.begin(), {bin("ddprun").string(), "--python", python()});
  return args;
}

std::string final_params(const std::string& out) {
  std::smatch m;
  static const std::regex re("final params=(-?[0-9.]+)");
  return std::regex_search(out, m, re) ? m[1].str() : std::string("<none>");
}

std::string run_reference() {
  TempDir dir;
  auto r =
      run(ddprun({"--standalone", "--nproc_per_node=2", script("ddp_train.py"), (dir / "ckpt").string()}),
          dir.path(), worker_env(), std::chrono::seconds(120));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return final_params(r.out);
}

std::string reference_file() {
  const char* f = std::getenv("DDP_TORCH_REFERENCE");
  return f ? f : "";
}

const std::string& reference_params() {
  static const std::string ref = [] {
    const auto file = reference_file();
    if (!file.empty() && fs::exists(file)) return read_file(file);
    return run_reference();
  }();
  return ref;
}

namespace {

std::vector<std::string> daemon_argv(const TempDir& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> a{
      bin("ddp-rendezvousd").string(), "--host",      "127.0.0.1", "--port", "0", "--port-file",
      (dir / "port").string(),         "--log-level", "warn"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

Daemon::Daemon(const TempDir& dir, const std::vector<std::string>& extra)
    : proc(daemon_argv(dir, extra), dir.path(), {}, "daemon"), port(wait_for_port_file(dir / "port")) {
  REQUIRE(port > 0);
}

}  // namespace ddp::test::torch
