#include "torch_support.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>

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
                  << (debian ? "apt install python3-torch" : "scripts/setup.sh creates .venv with torch 2.x")
                  << ")");
  }
  return ok;
}

std::string script(const std::string& name) {
  return (source_dir() / "tests/integration/torch" / name).string();
}

}  // namespace ddp::test::torch
