// --numa_binding's CPU lists on synthetic hwloc topologies (no GPUs in them:
// the GPU path gets its GPU -> NUMA node mapping as an input).
#include "ddp/agent/numa_binding.hpp"

#include <catch2/catch.hpp>
#include <memory>

#include "ddp/common/error.hpp"

#ifdef DDP_HAVE_HWLOC
#include <hwloc.h>
#endif

using namespace ddp::agent;

TEST_CASE("parse_numa_binding accepts torch's strategies and names the flag otherwise", "[numa]") {
  CHECK(parse_numa_binding("") == NumaBinding::kNone);
  CHECK(parse_numa_binding("node") == NumaBinding::kNode);
  CHECK(parse_numa_binding("socket") == NumaBinding::kSocket);
  CHECK(parse_numa_binding("exclusive") == NumaBinding::kExclusive);
  CHECK(parse_numa_binding("core-complex") == NumaBinding::kCoreComplex);
  CHECK_THROWS_WITH(parse_numa_binding("numa"), Catch::Contains("--numa_binding") &&
                                                    Catch::Contains("node, socket, exclusive, core-complex"));
}

TEST_CASE("cpu_set_from_list reads a CPU list", "[numa]") {
  const cpu_set_t set = cpu_set_from_list("0-3,8,10-11");
  CHECK(CPU_COUNT(&set) == 7);
  CHECK(CPU_ISSET(8, &set));
  CHECK_FALSE(CPU_ISSET(9, &set));
}

#ifdef DDP_HAVE_HWLOC
namespace {
using Topology = std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)>;

Topology synthetic(const char* description) {
  hwloc_topology_t t = nullptr;
  REQUIRE(hwloc_topology_init(&t) == 0);
  Topology topo(t, hwloc_topology_destroy);
  REQUIRE(hwloc_topology_set_synthetic(t, description) == 0);
  REQUIRE(hwloc_topology_load(t) == 0);
  return topo;
}

using List = std::vector<std::string>;
// 2 packages x 2 NUMA nodes x 2 L3 x 4 cores x 2 PUs: NUMA node n holds PUs 16n..16n+15.
constexpr const char* kTwoSockets = "pack:2 numa:2 l3:2 core:4 pu:2";
}  // namespace

TEST_CASE("numa_binding node: without GPUs, local ranks go round-robin over NUMA nodes", "[numa]") {
  auto topo = synthetic(kTwoSockets);
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kNode, 4, {}) ==
        List{"0-15", "16-31", "32-47", "48-63"});
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kNode, 5, {}) ==
        List{"0-15", "16-31", "32-47", "48-63", "0-15"});
}

TEST_CASE("numa_binding node: each rank gets its GPU's NUMA node", "[numa]") {
  auto topo = synthetic(kTwoSockets);
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kNode, 4, {0, 0, 3, 3}) ==
        List{"0-15", "0-15", "48-63", "48-63"});
  CHECK_THROWS_WITH(compute_numa_binding(topo.get(), NumaBinding::kNode, 1, {4}),
                    Catch::Contains("NUMA node 4"));
}

TEST_CASE("numa_binding socket: all CPUs of the GPU's package", "[numa]") {
  auto topo = synthetic(kTwoSockets);
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kSocket, 3, {1, 2, 0}) ==
        List{"0-31", "32-63", "0-31"});
}

TEST_CASE("numa_binding exclusive: disjoint physical cores of the node, split evenly", "[numa]") {
  auto topo = synthetic(kTwoSockets);
  // NUMA node 1: 8 cores (PUs 16-31) for 3 ranks -> 3, 3 and 2 cores, both PUs of each.
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kExclusive, 3, {1, 1, 1}) ==
        List{"16-21", "22-27", "28-31"});
  // Ranks on different nodes do not share a node's cores.
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kExclusive, 3, {0, 2, 0}) ==
        List{"0-7", "32-47", "8-15"});
  auto small = synthetic("numa:1 core:2 pu:2");
  CHECK_THROWS_WITH(compute_numa_binding(small.get(), NumaBinding::kExclusive, 3, {}),
                    Catch::Contains("--numa_binding=exclusive") && Catch::Contains("2 physical cores for 3"));
}

TEST_CASE("numa_binding core-complex: one L3 domain, round-robin over the node's L3s", "[numa]") {
  auto topo = synthetic(kTwoSockets);
  CHECK(compute_numa_binding(topo.get(), NumaBinding::kCoreComplex, 4, {0, 0, 0, 3}) ==
        List{"0-7", "8-15", "0-7", "48-55"});
  // No L3 in the topology: the whole NUMA node.
  auto flat = synthetic("numa:2 core:2 pu:1");
  CHECK(compute_numa_binding(flat.get(), NumaBinding::kCoreComplex, 2, {}) == List{"0-1", "2-3"});
}
#endif
