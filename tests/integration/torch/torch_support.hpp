// What the torch integration tests share: the python they run (Debian's
// python3 with torch 1.13, or DDP_TEST_PYTHON: the torch2 label sets it to
// scripts/setup.sh's .venv), whether it has torch, the scripts here, how
// ddprun runs them, ddp_train.py's reference result and a daemon.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test::torch {

using Env = std::map<std::string, std::optional<std::string>>;

// $DDP_TEST_PYTHON, or /usr/bin/python3.
std::string python();
// True when python() imports torch.distributed. Otherwise the test prints
// "SKIP: ..." with how to get torch and returns (ctest reports it skipped);
// under CI it fails instead.
bool have_torch();
// A script of tests/integration/torch, by name.
std::string script(const std::string& name);

// The test's environment minus what would change ddprun's behaviour behind its
// back (OMP_NUM_THREADS, PET_NPROC_PER_NODE, PET_NNODES, PET_STANDALONE,
// PET_PRELOAD), with PYTHONUNBUFFERED=1, plus `extra`.
Env worker_env(Env extra = {});
// ddprun's argv with python() as the workers' interpreter, then `args`.
std::vector<std::string> ddprun(std::vector<std::string> args);
// The checksum rank 0 of ddp_train.py prints last ("final params=..."), or "<none>".
std::string final_params(const std::string& out);

// The reference result: ddp_train.py with 2 workers under ddprun --standalone.
std::string run_reference();
// Where ctest's "reference run" test (a FIXTURES_SETUP of the torch tests)
// left the reference result, so that it is computed once per ctest run and not
// once per test process ($DDP_TORCH_REFERENCE); empty when run by hand.
std::string reference_file();
// The reference result from reference_file(), else run once in this process.
const std::string& reference_params();

// A ddp-rendezvousd on 127.0.0.1 with a free port (logging warnings only) and
// `extra` flags, its port file in `dir`.
struct Daemon {
  explicit Daemon(const TempDir& dir, const std::vector<std::string>& extra = {});
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
  Process proc;
  int port;
};

}  // namespace ddp::test::torch
