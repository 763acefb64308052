// --numa_binding's hwloc half: the CPU lists from the machine's topology. It
// is built into the plugin libddp_numa.so (numa_plugin.hpp), which ddprun loads
// only for --numa_binding: linked into ddprun, hwloc and libudev cost every
// launch ~1 ms of start-up (docs/data/performance-history.md, "Launch floor").
#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>

#include "ddp/agent/numa_binding.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "numa_plugin.hpp"

namespace ddp::agent {

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

namespace {

// machine_numa_binding's work, on the machine's topology.
std::vector<std::string> topology_numa_binding(NumaBinding strategy, int local_world_size,
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
    // machine_numa_binding puts the flag and strategy before it.
    if (notice != nullptr)
      *notice = "no GPU found, spreading the local ranks round-robin over the NUMA nodes";
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

char* copy_out(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

}  // namespace ddp::agent

extern "C" char* ddp_numa_binding_v1(int strategy, int local_world_size, const char* cuda_visible_devices,
                                     char** notice, char** error) {
  using namespace ddp::agent;
  try {
    std::string note;
    const auto lists = topology_numa_binding(static_cast<NumaBinding>(strategy), local_world_size,
                                             cuda_visible_devices, &note);
    std::string joined;
    for (const auto& l : lists) joined += l + "\n";
    if (!note.empty()) *notice = copy_out(note);
    return copy_out(joined);
  } catch (const std::exception& e) {
    *error = copy_out(e.what());
    return nullptr;
  }
}
