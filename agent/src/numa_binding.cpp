#include "ddp/agent/numa_binding.hpp"

#include <cstdlib>
#include <filesystem>

#include "ddp/common/error.hpp"

#ifdef DDP_HAVE_HWLOC
#include <dlfcn.h>
#include <unistd.h>

#include "ddp/common/installed_file.hpp"
#include "ddp/common/parse.hpp"
#include "numa_plugin.hpp"
#endif

namespace ddp::agent {

namespace {
constexpr const char* kAccepted = "node, socket, exclusive, core-complex";
}  // namespace

NumaBinding parse_numa_binding(const std::string& value) {
  if (value.empty()) return NumaBinding::kNone;
  if (value == "node") return NumaBinding::kNode;
  if (value == "socket") return NumaBinding::kSocket;
  if (value == "exclusive") return NumaBinding::kExclusive;
  if (value == "core-complex" || value == "core_complex") return NumaBinding::kCoreComplex;
  throw ConfigError("--numa_binding: unknown strategy '" + value + "'; use one of " + kAccepted);
}

const char* numa_binding_name(NumaBinding b) {
  switch (b) {
    case NumaBinding::kNode:
      return "node";
    case NumaBinding::kSocket:
      return "socket";
    case NumaBinding::kExclusive:
      return "exclusive";
    case NumaBinding::kCoreComplex:
      return "core-complex";
    case NumaBinding::kNone:
      break;
  }
  return "none";
}

cpu_set_t cpu_set_from_list(const std::string& list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::size_t pos = 0;
  while (pos < list.size()) {
    std::size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    const auto dash = item.find('-');
    // The list is the cpuset ddprun computed ("0-3,8"); an item it cannot read sets no CPU.
    const auto lo = parse_int<int>(std::string_view(item).substr(0, dash));
    const auto hi = dash == std::string::npos ? lo : parse_int<int>(std::string_view(item).substr(dash + 1));
    for (int c = lo.value_or(0); lo && hi && c >= 0 && c <= *hi && c < CPU_SETSIZE; ++c)
      CPU_SET(static_cast<std::size_t>(c), &set);
    pos = end + 1;
  }
  return set;
}

#ifdef DDP_HAVE_HWLOC

bool numa_binding_supported() { return true; }

namespace {

namespace fs = std::filesystem;

// The plugin's entry point, loaded at the first use: ddprun links no hwloc.
NumaPluginFn* load_numa_plugin() {
  const std::string path =
      find_installed(fs::path(DDP_NUMA_PLUGIN_DIR) / kNumaPluginFile, DDP_NUMA_PLUGIN_INSTALL_PATH, R_OK);
  if (path.empty()) {
    throw ConfigError(std::string("--numa_binding needs ") + kNumaPluginFile + ", found neither in " +
                      DDP_NUMA_PLUGIN_DIR + "/ under ddprun's prefix nor at " + DDP_NUMA_PLUGIN_INSTALL_PATH +
                      "; reinstall ddprun");
  }
  // A file cut short would be mapped and kill ddprun with SIGBUS.
  if (const auto damaged = elf_file_problem(path); !damaged.empty())
    throw ConfigError("--numa_binding needs " + path + ", which " + damaged + "; reinstall ddprun");
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    throw ConfigError("--numa_binding needs " + path + ", which cannot be loaded: " +
                      (why != nullptr ? why : "unknown error") + " (install hwloc, or reinstall ddprun)");
  }
  auto* fn = reinterpret_cast<NumaPluginFn*>(::dlsym(lib, kNumaPluginSymbol));
  if (fn == nullptr)
    throw ConfigError("--numa_binding: " + path + " has no " + kNumaPluginSymbol + "; reinstall ddprun");
  return fn;
}

NumaPluginFn* numa_plugin() {
  static NumaPluginFn* const fn = load_numa_plugin();  // a failed load throws, and is tried again next time
  return fn;
}

std::string take(char* s) {
  std::string out = s != nullptr ? s : "";
  std::free(s);
  return out;
}

}  // namespace

void require_numa_binding() { numa_plugin(); }

std::vector<std::string> machine_numa_binding(NumaBinding strategy, int local_world_size,
                                              const std::string& cuda_visible_devices, std::string* notice) {
  NumaPluginFn* const fn = numa_plugin();
  char* note = nullptr;
  char* error = nullptr;
  const std::string lists =
      take(fn(static_cast<int>(strategy), local_world_size, cuda_visible_devices.c_str(), &note, &error));
  const std::string why = take(error);
  const std::string told = take(note);
  if (!why.empty()) throw ConfigError(why);
  if (notice != nullptr && !told.empty())
    *notice = "--numa_binding=" + std::string(numa_binding_name(strategy)) + ": " + told;
  std::vector<std::string> out;
  for (std::size_t pos = 0, nl; (nl = lists.find('\n', pos)) != std::string::npos; pos = nl + 1)
    out.push_back(lists.substr(pos, nl - pos));
  return out;
}

#else  // !DDP_HAVE_HWLOC

bool numa_binding_supported() { return false; }

void require_numa_binding() {
  throw ConfigError("--numa_binding: ddprun was built without hwloc; install libhwloc-dev and rebuild");
}

std::vector<std::string> compute_numa_binding(hwloc_topology*, NumaBinding, int, const std::vector<int>&) {
  throw ConfigError("--numa_binding: ddprun was built without hwloc (install libhwloc-dev and rebuild)");
}

std::vector<std::string> machine_numa_binding(NumaBinding, int, const std::string&, std::string*) {
  throw ConfigError("--numa_binding: ddprun was built without hwloc (install libhwloc-dev and rebuild)");
}

#endif

}  // namespace ddp::agent
