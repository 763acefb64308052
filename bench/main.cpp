// ddp-bench: benchmarks that print figures (never asserts). Wiring only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include "bench.hpp"

namespace ddp::bench {
namespace {
struct Entry {
  std::string summary;
  SubcommandFn fn;
};
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;
  return r;
}
}  // namespace

bool register_subcommand(const std::string& name, const std::string& summary, SubcommandFn fn) {
  registry()[name] = Entry{summary, std::move(fn)};
  return true;
}

LatencySummary summarize_latencies(const std::vector<std::vector<std::int64_t>>& per_thread_ns) {
  std::vector<std::int64_t> all;
  for (const auto& l : per_thread_ns) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  LatencySummary s;
  s.count = all.size();
  auto pct = [&](double p) {
    if (all.empty()) return 0.0;
    const auto idx = std::min(all.size() - 1, static_cast<std::size_t>(p * static_cast<double>(all.size())));
    return static_cast<double>(all[idx]) / 1000.0;
  };
  s.p50_us = pct(0.50);
  s.p99_us = pct(0.99);
  return s;
}

std::size_t raise_fd_limit(std::size_t want) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur >= want) return rl.rlim_cur;
  rlimit up = rl;
  up.rlim_cur = want;
  if (up.rlim_max < want) up.rlim_max = want;  // needs CAP_SYS_RESOURCE
  if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
    up.rlim_cur = rl.rlim_max;
    up.rlim_max = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &up);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur;
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double cpu_ms(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // state .. cmajflt: fields 3-13
  long utime = 0;
  long stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool bind_spread_loopback(int fd, int index) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) != 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl((127u << 24) | (1u << 8) | (1u + static_cast<unsigned>(index) % 250u));
  return ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
}

}  // namespace ddp::bench

int main(int argc, char** argv) {
  auto& reg = ddp::bench::registry();
  auto usage = [&](FILE* out) {
    std::fprintf(out,
                 "usage: ddp-bench SUBCOMMAND [options]   (ddp-bench SUBCOMMAND --help)\n\nsubcommands:\n");
    for (const auto& [name, e] : reg) std::fprintf(out, "  %-12s %s\n", name.c_str(), e.summary.c_str());
  };
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto it = reg.find(argv[1]);
  if (it == reg.end()) {
    std::fprintf(stderr, "ddp-bench: unknown subcommand '%s'; run 'ddp-bench --help' for the list\n",
                 argv[1]);
    return 2;
  }
  try {
    return it->second.fn(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-bench %s: %s\n", argv[1], e.what());
    return 1;
  }
}
