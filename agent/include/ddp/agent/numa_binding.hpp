// --numa_binding: which CPUs each local rank may run on (torch 2.8's
// `torch.distributed.run --numa-binding` strategies), computed from an hwloc
// topology. Pure: nothing here changes the calling process. The hwloc part
// is a plugin, loaded on first use (numa_topology.cpp, numa_plugin.hpp).
#pragma once

#include <sched.h>

#include <optional>
#include <string>
#include <vector>

#include "ddp/agent/agent_config.hpp"

struct hwloc_topology;

namespace ddp::agent {

// Throws ConfigError naming --numa_binding and the accepted values.
NumaBinding parse_numa_binding(const std::string& value);
const char* numa_binding_name(NumaBinding b);

// Whether ddprun was built with hwloc (without it, any strategy is an error).
bool numa_binding_supported();

// Loads the hwloc plugin now, so that a missing one (or a missing hwloc) is
// reported while the options are read, before any rendezvous. Throws
// ConfigError naming --numa_binding and the file or library.
void require_numa_binding();

// The CPUs (OS indexes, as "0-3,8-11") of each local rank, in local rank order.
// `gpu_numa_node[lr]`: the logical index of the NUMA node closest to local
// rank lr's GPU; empty: no GPU, local ranks go round-robin over NUMA nodes.
std::vector<std::string> compute_numa_binding(hwloc_topology* topo, NumaBinding strategy,
                                              int local_world_size, const std::vector<int>& gpu_numa_node);

// For the real machine: loads the topology, maps each local rank to its GPU
// (CUDA_VISIBLE_DEVICES from `env`, else the local rank) and its GPU to a
// NUMA node. `notice` gets one line when there is no GPU (fallback used).
std::vector<std::string> machine_numa_binding(NumaBinding strategy, int local_world_size,
                                              const std::string& cuda_visible_devices, std::string* notice);

// "0-3,8-11" -> cpu_set_t (the parent prepares it; the child only applies it).
cpu_set_t cpu_set_from_list(const std::string& list);

}  // namespace ddp::agent
