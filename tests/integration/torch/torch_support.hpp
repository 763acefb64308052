// What the torch integration tests share: the python they run (Debian's
// python3 with torch 1.13, or DDP_TEST_PYTHON: the torch2 label sets it to
// scripts/setup.sh's .venv), whether it has torch, and the scripts here.
#pragma once

#include <map>
#include <optional>
#include <string>

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

}  // namespace ddp::test::torch
