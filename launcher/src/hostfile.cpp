// --hosts and --hostfile parsing.
#include "hostfile.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::launcher {
namespace {

int parse_slots(std::string_view text, const std::string& where, std::string_view key = "slots") {
  const auto v = parse_int<int>(text);
  if (!v || *v < 1)
    throw ConfigError(where + ": " + std::string(key) + " '" + std::string(text) +
                      "' is not a positive integer");
  return *v;
}

void check_name(const std::string& name, const std::string& where) {
  if (name.empty() || name.front() == '-' || name.find_first_of("'\"\\$`;&|<>() \t") != std::string::npos) {
    throw ConfigError(where + ": '" + name + "' is not a host name");
  }
}

void add(std::vector<RemoteHost>& hosts, std::set<std::string>& seen, RemoteHost host,
         const std::string& where) {
  if (!seen.insert(host.name).second) {
    throw ConfigError(where + ": host '" + host.name + "' is listed twice; give it once with all its slots");
  }
  hosts.push_back(std::move(host));
}

}  // namespace

std::vector<RemoteHost> parse_hosts(const std::string& text) {
  std::vector<RemoteHost> hosts;
  std::set<std::string> seen;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    RemoteHost h;
    const auto colon = item.find(':');
    h.name = item.substr(0, colon);
    check_name(h.name, "--hosts");
    if (colon != std::string::npos)
      h.slots = parse_slots(std::string_view(item).substr(colon + 1), "--hosts");
    add(hosts, seen, std::move(h), "--hosts");
  }
  if (hosts.empty()) throw ConfigError("--hosts: no host given; use --hosts h1,h2");
  return hosts;
}

std::vector<RemoteHost> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<RemoteHost> hosts;
  std::set<std::string> seen;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    RemoteHost h;
    if (!(words >> h.name)) continue;
    const std::string where = path + ":" + std::to_string(n);
    check_name(h.name, where);
    std::string word;
    int max_slots = 0;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0) {
        h.slots = parse_slots(std::string_view(word).substr(6), where);
      } else if (word.rfind("max_slots=", 0) == 0 || word.rfind("max-slots=", 0) == 0) {
        // Open MPI's cap on oversubscription: ddprun runs `slots` workers there.
        max_slots = parse_slots(std::string_view(word).substr(10), where, "max_slots");
      } else {
        throw ConfigError(where + ": '" + word +
                          "' is not understood; lines are `HOST slots=N [max_slots=M]`");
      }
    }
    if (max_slots > 0 && h.slots > max_slots) {
      throw ConfigError(where + ": slots=" + std::to_string(h.slots) +
                        " is more than max_slots=" + std::to_string(max_slots));
    }
    add(hosts, seen, std::move(h), where);
  }
  if (hosts.empty())
    throw ConfigError("--hostfile: " + path + " lists no host; lines are `HOST slots=N [max_slots=M]`");
  return hosts;
}

std::vector<RemoteHost> load_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--hostfile: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

}  // namespace ddp::launcher
