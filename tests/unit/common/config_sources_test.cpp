#include "ddp/common/config_sources.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using ddp::ConfigSources;
using ddp::SourcedValue;
using ddp::SourceKind;
using Map = std::map<std::string, std::string>;

namespace {

// A source holding `values`, each named "<name> <key>".
ConfigSources::Lookup from(const Map& values, const std::string& name) {
  return [values, name](const std::string& key) -> std::optional<SourcedValue> {
    const auto it = values.find(key);
    if (it == values.end()) return std::nullopt;
    return SourcedValue{it->second, name + " " + key};
  };
}

}  // namespace

TEST_CASE("the first source that has a key gives its value, its name and its kind") {
  ConfigSources s;
  s.add(SourceKind::kFlag, from({{"port", "1"}}, "flag"));
  s.add(SourceKind::kFile, from({{"port", "2"}, {"host", "h"}}, "file"));
  s.add(SourceKind::kEnv, from({{"port", "3"}, {"host", "e"}, {"dir", "/d"}}, "env"));
  const auto r = s.resolve({"port", "host", "dir", "unset"});
  CHECK(r.at("port").value == "1");
  CHECK(r.at("port").source == "flag port");
  CHECK(r.at("host").value == "h");
  CHECK(r.at("host").source == "file host");
  CHECK(r.at("dir").source == "env dir");
  CHECK(r.count("unset") == 0);
  CHECK(r.at("port").kind == SourceKind::kFlag);
  CHECK(r.at("host").kind == SourceKind::kFile);
  CHECK(r.at("dir").kind == SourceKind::kEnv);
}

TEST_CASE("an empty value is a value: it still hides the sources below") {
  ConfigSources s;
  s.add(SourceKind::kFile, from({{"token_file", ""}}, "file"));
  s.add(SourceKind::kEnv, from({{"token_file", "/etc/token"}}, "env"));
  CHECK(s.resolve({"token_file"}).at("token_file").value.empty());
}

TEST_CASE("a source added later only fills what the sources above left unset") {
  ConfigSources s;
  Map derived;
  Map seen_above;
  s.add(SourceKind::kFlag, from({{"nnodes", "4"}}, "flag"));
  s.add(SourceKind::kScheduler, from(derived, "slurm"),
        [&seen_above](const std::map<std::string, SourcedValue>& above) {
          for (const auto& [k, v] : above) seen_above[k] = v.source;
        });
  s.add(SourceKind::kDefault, from({{"nnodes", "1"}, {"node_rank", "0"}}, "default"));
  const auto r = s.resolve({"nnodes", "node_rank"});
  CHECK(seen_above == Map{{"nnodes", "flag nnodes"}});
  CHECK(r.at("nnodes").value == "4");
  CHECK(r.at("node_rank").source == "default node_rank");
}

TEST_CASE("a prepare hook can compute its values from what is set above") {
  ConfigSources s;
  auto derived = std::make_shared<Map>();
  s.add(SourceKind::kFlag, from({{"standalone", "true"}}, "flag"));
  s.add(
      SourceKind::kScheduler,
      [derived](const std::string& key) -> std::optional<SourcedValue> {
        const auto it = derived->find(key);
        if (it == derived->end()) return std::nullopt;
        return SourcedValue{it->second, "slurm"};
      },
      [derived](const std::map<std::string, SourcedValue>& above) {
        derived->clear();
        derived->emplace("nproc_per_node", "8");
        if (above.count("standalone") == 0) derived->emplace("master_addr", "node1");
      });
  const auto r = s.resolve({"standalone", "nproc_per_node", "master_addr"});
  CHECK(r.at("nproc_per_node").source == "slurm");
  CHECK(r.count("master_addr") == 0);
}

TEST_CASE("a source's error reaches the caller") {
  ConfigSources s;
  s.add(SourceKind::kEnv, [](const std::string& key) -> std::optional<SourcedValue> {
    throw ddp::ConfigError("env DDP_" + key + " is broken");
  });
  CHECK_THROWS_WITH(s.resolve({"port"}), "env DDP_port is broken");
  CHECK(s.resolve({}).empty());
}
