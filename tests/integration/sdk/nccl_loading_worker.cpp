// ddp_sdk_nccl_loading_worker: one rank that creates a process group with the
// backend named in argv[1] (gloo, nccl, auto), all-reduces one float, and
// prints the backend, the sum and which NCCL/CUDA runtime libraries ended up
// mapped into the process (from /proc/self/maps).
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ddp/sdk.hpp"

namespace {

std::string gpu_libraries_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libnccl") != std::string::npos || path.find("libcudart") != std::string::npos)
      found.insert(path);
  }
  std::string out;
  for (const auto& p : found) out += (out.empty() ? "" : " ") + p;
  return out.empty() ? "none" : out;
}

int scenario(int argc, char** argv) {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = argc > 1 ? argv[1] : "gloo";
  ddp::ProcessGroup pg(ctx, options);
  std::printf("backend=%s\n", std::string(pg.backend()).c_str());
  if (pg.backend() == "gloo") {
    std::vector<float> value{static_cast<float>(ctx.rank + 1)};
    pg.all_reduce(value, ddp::ReduceOp::kSum);
    std::printf("sum=%g\n", static_cast<double>(value[0]));
  }
  std::printf("gpu libraries mapped: %s\n", gpu_libraries_mapped().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddp::run(argc, argv, scenario); }
