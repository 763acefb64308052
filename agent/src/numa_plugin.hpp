// The --numa_binding plugin's interface: libddp_numa.so (numa_topology.cpp,
// linked with hwloc) exports one C function, which machine_numa_binding loads
// with dlopen on its first call. A C signature and malloc'd strings: nothing
// of C++ (no exception, no std::string) crosses between the two.
#pragma once

namespace ddp::agent {

inline constexpr const char* kNumaPluginFile = "libddp_numa.so";
inline constexpr const char* kNumaPluginSymbol = "ddp_numa_binding_v1";

// (strategy: a NumaBinding, local_world_size, CUDA_VISIBLE_DEVICES, notice, error)
// -> each local rank's CPU list followed by '\n', or null with *error set.
// *notice, when set, is machine_numa_binding's notice line. The caller frees
// what it gets with free().
using NumaPluginFn = char*(int, int, const char*, char**, char**);

}  // namespace ddp::agent
