#include "loopback_peer.hpp"

#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "ddp/common/parse.hpp"
#include "ddp/common/proc_file.hpp"

namespace ddp::store::server {

namespace {

// "0100007F:1F90" → port 0x1F90 of 127.0.0.1, as /proc/net/tcp prints it (the
// address as the kernel stores it, read as 32-bit words in host order), or
// "0000000000000000FFFF00000100007F:1F90" → ::ffff:127.0.0.1 in /proc/net/tcp6,
// which is where a client that connects through an IPv6 socket (torch's
// TCPStore does) appears. Both byte orders are accepted.
bool is_loopback_port(const std::string& field, std::uint16_t port) {
  const auto colon = field.find(':');
  if (colon == std::string::npos) return false;
  const std::string addr = field.substr(0, colon);
  if (addr != "0100007F" && addr != "7F000001" && addr != "0000000000000000FFFF00000100007F" &&
      addr != "000000000000000000000000FFFF7F000001" && addr != "0000000000000000FFFF00007F000001") {
    return false;
  }
  unsigned value = 0;
  // number-parse-ok: /proc/net/tcp writes the port in hex; parse_int reads decimal.
  const auto* first = field.data() + colon + 1;
  const auto [ptr, ec] = std::from_chars(first, field.data() + field.size(), value, 16);
  return ec == std::errc() && ptr != first && value == port;
}

std::optional<std::string> socket_inode(std::uint16_t server_port, std::uint16_t peer_port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const auto text = read_proc_file(table);
    if (!text) continue;
    std::istringstream in(*text);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::vector<std::string> f{std::istream_iterator<std::string>(fields),
                                 std::istream_iterator<std::string>()};
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
      if (f.size() < 10) continue;
      if (is_loopback_port(f[1], peer_port) && is_loopback_port(f[2], server_port)) return f[9];
    }
  }
  return std::nullopt;
}

std::vector<pid_t> descendants(pid_t ancestor) {
  std::multimap<pid_t, pid_t> children;
  if (DIR* d = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(d)) {
      const auto pid = parse_int<pid_t>(e->d_name);
      if (!pid || *pid <= 0) continue;
      if (auto ppid = proc_parent(*pid)) children.emplace(*ppid, *pid);
    }
    ::closedir(d);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo{ancestor};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

bool holds_socket(pid_t pid, const std::string& link) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  char target[64];
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = dir + "/" + e->d_name;
    const auto n = ::readlink(path.c_str(), target, sizeof target);
    if (n > 0 && std::string(target, static_cast<std::size_t>(n)) == link) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace

std::optional<pid_t> loopback_peer_pid(std::uint16_t server_port, std::uint16_t peer_port, pid_t ancestor) {
  const auto inode = socket_inode(server_port, peer_port);
  if (!inode || *inode == "0") return std::nullopt;
  const std::string link = "socket:[" + *inode + "]";
  for (pid_t pid : descendants(ancestor)) {
    if (holds_socket(pid, link)) return pid;
  }
  return std::nullopt;
}

std::optional<std::string> process_env(pid_t pid, const std::string& name, pid_t stop_at) {
  const std::string want = name + "=";
  std::set<pid_t> seen;
  for (std::optional<pid_t> p = pid; p && *p > 1 && *p != stop_at && seen.insert(*p).second;
       p = proc_parent(*p)) {
    const auto env_text = read_proc_file("/proc/" + std::to_string(*p) + "/environ");
    if (!env_text) continue;
    std::istringstream in(*env_text);
    std::string entry;
    while (std::getline(in, entry, '\0')) {
      if (entry.compare(0, want.size(), want) == 0) return entry.substr(want.size());
    }
  }
  return std::nullopt;
}

}  // namespace ddp::store::server
