#include "ddp/agent/numa_binding.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <tuple>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

#ifdef DDP_HAVE_HWLOC
#include <hwloc.h>
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
    const int lo = std::stoi(item.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int c = lo; c <= hi && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<std::size_t>(c), &set);
    pos = end + 1;
  }
  return set;
}

#ifdef DDP_HAVE_HWLOC

bool numa_binding_supported() { return true; }

namespace {

std::string to_list(hwloc_const_bitmap_t set) {
  char* s = nullptr;
  hwloc_bitmap_list_asprintf(&s, set);
  std::string out = s != nullptr ? s : "";
  std::free(s);
  return out;
}

// The smallest `type` object containing `node`'s CPUs; null if there is none.
hwloc_obj_t covering(hwloc_topology_t topo, hwloc_obj_t node, hwloc_obj_type_t type) {
  const int n = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, static_cast<unsigned>(i));
    if (hwloc_bitmap_isincluded(node->cpuset, o->cpuset)) return o;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> compute_numa_binding(hwloc_topology* topo, NumaBinding strategy,
                                              int local_world_size, const std::vector<int>& gpu_numa_node) {
  const int nodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  // Each local rank's NUMA node, and its index among the ranks on that node.
  std::vector<int> node_of(static_cast<std::size_t>(local_world_size));
  std::vector<int> index_on_node(node_of.size());
  std::vector<int> ranks_on_node(static_cast<std::size_t>(nodes), 0);
  for (std::size_t lr = 0; lr < node_of.size(); ++lr) {
    const int n = gpu_numa_node.empty() ? static_cast<int>(lr) % nodes : gpu_numa_node.at(lr);
    if (n < 0 || n >= nodes) throw ConfigError("--numa_binding: no NUMA node " + std::to_string(n));
    node_of[lr] = n;
    index_on_node[lr] = ranks_on_node[static_cast<std::size_t>(n)]++;
  }

  std::vector<std::string> out;
  for (std::size_t lr = 0; lr < node_of.size(); ++lr) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node_of[lr]));
    if (node == nullptr) node = hwloc_get_root_obj(topo);
    hwloc_const_cpuset_t cpus = node->cpuset;
    std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)> owned(hwloc_bitmap_alloc(), hwloc_bitmap_free);
    if (strategy == NumaBinding::kSocket) {
      if (hwloc_obj_t pkg = covering(topo, node, HWLOC_OBJ_PACKAGE)) cpus = pkg->cpuset;
    } else if (strategy == NumaBinding::kExclusive) {
      const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE);
      const int share = ranks_on_node[static_cast<std::size_t>(node_of[lr])];
      if (cores < share) {
        throw ConfigError("--numa_binding=exclusive: NUMA node " + std::to_string(node_of[lr]) + " has " +
                          std::to_string(cores) + " physical cores for " + std::to_string(share) +
                          " local ranks; use --numa_binding=node or fewer ranks");
      }
      // An even split; the first `cores % share` ranks get one core more.
      const int k = index_on_node[lr];
      const int first = k * (cores / share) + std::min(k, cores % share);
      const int count = cores / share + (k < cores % share ? 1 : 0);
      for (int c = first; c < first + count; ++c) {
        hwloc_obj_t core =
            hwloc_get_obj_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE, static_cast<unsigned>(c));
        hwloc_bitmap_or(owned.get(), owned.get(), core->cpuset);
      }
      cpus = owned.get();
    } else if (strategy == NumaBinding::kCoreComplex) {
      const int l3s = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_L3CACHE);
      if (l3s > 0) {
        cpus = hwloc_get_obj_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_L3CACHE,
                                                   static_cast<unsigned>(index_on_node[lr] % l3s))
                   ->cpuset;
      }
    }
    out.push_back(to_list(cpus));
  }
  return out;
}

namespace {

// The logical index of the NUMA node closest to each NVIDIA GPU, in PCI bus order.
std::vector<int> gpu_nodes(hwloc_topology_t topo) {
  std::vector<std::tuple<unsigned, unsigned, unsigned, unsigned, int>> gpus;
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(topo, pci)) {
    const auto& a = pci->attr->pcidev;
    if (a.vendor_id != 0x10de || (a.class_id != 0x0300 && a.class_id != 0x0302)) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
    int node = 0;
    const int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nodes; ++i) {
      if (hwloc_bitmap_intersects(
              hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i))->cpuset,
              anc->cpuset)) {
        node = i;
        break;
      }
    }
    gpus.emplace_back(a.domain, a.bus, a.dev, a.func, node);
  }
  std::sort(gpus.begin(), gpus.end());
  std::vector<int> out;
  for (const auto& g : gpus) out.push_back(std::get<4>(g));
  return out;
}

}  // namespace

std::vector<std::string> machine_numa_binding(NumaBinding strategy, int local_world_size,
                                              const std::string& cuda_visible_devices, std::string* notice) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) throw ConfigError("--numa_binding: hwloc cannot initialise");
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(topo, hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0)
    throw ConfigError("--numa_binding: hwloc cannot read this machine's topology");

  const std::vector<int> gpus = gpu_nodes(topo);
  std::vector<int> rank_node;
  if (gpus.empty()) {
    if (notice != nullptr) {
      *notice = "--numa_binding=" + std::string(numa_binding_name(strategy)) +
                ": no GPU found, spreading the local ranks round-robin over the NUMA nodes";
    }
  } else {
    std::vector<std::string> visible;
    for (std::size_t pos = 0; !cuda_visible_devices.empty() && pos <= cuda_visible_devices.size();) {
      std::size_t end = cuda_visible_devices.find(',', pos);
      if (end == std::string::npos) end = cuda_visible_devices.size();
      visible.push_back(cuda_visible_devices.substr(pos, end - pos));
      pos = end + 1;
    }
    for (int lr = 0; lr < local_world_size; ++lr) {
      int gpu = lr;
      const std::string item =
          static_cast<std::size_t>(lr) < visible.size() ? visible[static_cast<std::size_t>(lr)] : "";
      if (!item.empty() && std::isdigit(static_cast<unsigned char>(item[0]))) {  // else a UUID, or none
        const auto index = parse_int<int>(item);
        if (!index) {
          throw ConfigError("--numa_binding: CUDA_VISIBLE_DEVICES entry '" + item +
                            "' is neither a GPU index nor a GPU UUID; fix CUDA_VISIBLE_DEVICES");
        }
        gpu = *index;
      }
      if (gpu >= static_cast<int>(gpus.size())) {
        throw ConfigError("--numa_binding: local rank " + std::to_string(lr) + " would use GPU " +
                          std::to_string(gpu) + " but this machine has " + std::to_string(gpus.size()) +
                          " (check --nproc_per_node and CUDA_VISIBLE_DEVICES)");
      }
      rank_node.push_back(gpus[static_cast<std::size_t>(gpu)]);
    }
  }
  return compute_numa_binding(topo, strategy, local_world_size, rank_node);
}

#else  // !DDP_HAVE_HWLOC

bool numa_binding_supported() { return false; }

std::vector<std::string> compute_numa_binding(hwloc_topology*, NumaBinding, int, const std::vector<int>&) {
  throw ConfigError("--numa_binding: ddprun was built without hwloc (install libhwloc-dev and rebuild)");
}

std::vector<std::string> machine_numa_binding(NumaBinding, int, const std::string&, std::string*) {
  throw ConfigError("--numa_binding: ddprun was built without hwloc (install libhwloc-dev and rebuild)");
}

#endif

}  // namespace ddp::agent
