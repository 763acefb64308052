// The hosts of a job started over SSH: `--hosts h1,h2` or a DeepSpeed/MPI
// hostfile (`host slots=N` per line, # comments).
#pragma once

#include <string>
#include <vector>

namespace ddp::launcher {

struct RemoteHost {
  std::string name;  // as ssh takes it: a name, an address, or a Host of ~/.ssh/config
  int slots = 0;     // workers on it; 0: --nproc_per_node
};

// "h1,h2" or "h1:4,h2:4" (slots after a colon). Throws ConfigError naming --hosts.
std::vector<RemoteHost> parse_hosts(const std::string& text);

// The text of a hostfile; `path` names it in errors ("FILE:LINE: ..."). Throws
// ConfigError on an unknown key, a bad slot count, a repeated host, or no host.
std::vector<RemoteHost> parse_hostfile(const std::string& text, const std::string& path);

// Reads and parses the file. Throws ConfigError naming --hostfile when unreadable.
std::vector<RemoteHost> load_hostfile(const std::string& path);

}  // namespace ddp::launcher
