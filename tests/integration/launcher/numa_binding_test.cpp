// --numa_binding end to end: each worker's allowed CPUs (as the kernel reports
// them) are those computed from this machine's topology.
#include "ddp/agent/numa_binding.hpp"

#include <catch2/catch.hpp>
#include <map>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {
// "[rank N]:Cpus_allowed_list:\tLIST" lines -> {N: LIST}.
std::map<int, std::string> allowed_cpus(const std::string& out) {
  std::map<int, std::string> by_rank;
  std::istringstream lines(out);
  std::string line;
  const std::string key = "Cpus_allowed_list:";
  while (std::getline(lines, line)) {
    const auto at = line.find(key);
    if (line.rfind("[rank ", 0) != 0 || at == std::string::npos) continue;
    std::string list = line.substr(at + key.size());
    list.erase(0, list.find_first_not_of(" \t"));
    by_rank[std::stoi(line.substr(6))] = list;
  }
  return by_rank;
}
}  // namespace

TEST_CASE("ddprun --numa_binding binds each worker to the CPUs computed for this machine") {
  TempDir dir;
  if (!ddp::agent::numa_binding_supported()) {
    WARN("ddprun was built without hwloc: skipped");
    auto r = ddprun({"--standalone", "--numa_binding=node", "--no_python", "/bin/true"}, dir);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("built without hwloc"));
    return;
  }
  for (const std::string strategy : {"node", "socket", "exclusive", "core-complex"}) {
    INFO(strategy);
    const auto expected =
        ddp::agent::machine_numa_binding(ddp::agent::parse_numa_binding(strategy), 2, "", nullptr);
    auto r = ddprun({"--standalone", "--nproc_per_node=2", "--numa_binding=" + strategy, "--no_python",
                     "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"},
                    dir);
    REQUIRE(r.code == 0);
    const auto got = allowed_cpus(r.out);
    REQUIRE(got.size() == 2);
    CHECK(got.at(0) == expected.at(0));
    CHECK(got.at(1) == expected.at(1));
    if (strategy == "exclusive") {  // the two ranks share no CPU
      cpu_set_t a = ddp::agent::cpu_set_from_list(got.at(0));
      cpu_set_t b = ddp::agent::cpu_set_from_list(got.at(1));
      cpu_set_t both;
      CPU_AND(&both, &a, &b);
      CHECK(CPU_COUNT(&both) == 0);
    }
  }
}

TEST_CASE("ddprun --numa_binding with an unknown strategy exits 2 naming the accepted values") {
  TempDir dir;
  auto r = ddprun({"--standalone", "--numa_binding=numa", "--no_python", "/bin/true"}, dir);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err, "") == 1);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: --numa_binding") &&
                        Catch::Contains("node, socket, exclusive, core-complex"));
  // PET_NUMA_BINDING is read like the other torchrun flags.
  auto env = ddprun({"--standalone", "--no_python", "/bin/true"}, dir, {{"PET_NUMA_BINDING", "bogus"}});
  CHECK(env.code == 2);
  CHECK_THAT(env.err, Catch::Contains("--numa_binding"));
}

TEST_CASE("ddprun --numa_binding with its plugin cut to 4 KiB exits 2 naming the file, no SIGBUS") {
  if (!ddp::agent::numa_binding_supported()) {
    WARN("ddprun was built without hwloc: skipped");
    return;
  }
  const auto plugin = bin_dir().parent_path() / "lib" / "ddprun" / "libddp_numa.so";
  REQUIRE(fs::exists(plugin));
  // What an interrupted copy or a full disk leaves: the first 4 KiB.
  TempDir dir;
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "lib" / "ddprun");
  for (const char* f : {"ddprun", "ddp-guard"}) fs::copy_file(bin_dir() / f, dir / "bin" / f);
  const auto cut = dir / "lib" / "ddprun" / "libddp_numa.so";
  write_file(cut, read_file(plugin).substr(0, 4096));
  auto r = run(
      {(dir / "bin" / "ddprun").string(), "--standalone", "--numa_binding=node", "--no_python", "/bin/true"},
      dir.path(), clean_env({}));
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err, "") == 1);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: --numa_binding needs " + cut.string() +
                                      ", which is 4096 bytes, but its ELF headers place data up to byte"));
  CHECK_THAT(r.err, Catch::Contains("cut short") && Catch::Contains("reinstall ddprun"));
}

TEST_CASE("ddprun --numa_binding without its hwloc plugin exits 2 naming the flag and the plugin") {
  if (!ddp::agent::numa_binding_supported()) {
    WARN("ddprun was built without hwloc: skipped");
    return;
  }
  if (fs::exists("/usr/local/lib/ddprun/libddp_numa.so") || fs::exists("/usr/lib/ddprun/libddp_numa.so")) {
    WARN("an installed libddp_numa.so would be found: skipped");
    return;
  }
  // A ddprun (and its guard) copied where no lib/ddprun/ is beside its prefix.
  TempDir dir;
  fs::create_directories(dir / "bin");
  for (const char* f : {"ddprun", "ddp-guard"}) fs::copy_file(bin_dir() / f, dir / "bin" / f);
  auto r = run(
      {(dir / "bin" / "ddprun").string(), "--standalone", "--numa_binding=node", "--no_python", "/bin/true"},
      dir.path(), clean_env({}));
  CHECK(r.code == 2);
  CHECK(count_lines(r.err, "") == 1);
  CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: --numa_binding needs libddp_numa.so"));
  // Without the flag the plugin is never looked for.
  auto plain = run({(dir / "bin" / "ddprun").string(), "--standalone", "--no_python", "/bin/true"},
                   dir.path(), clean_env({}));
  CHECK(plain.code == 0);
}
