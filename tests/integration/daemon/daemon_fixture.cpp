#include "daemon_fixture.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

namespace ddp::test {

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

std::string preamble() { return std::string(store::kPreamble, sizeof store::kPreamble); }

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

std::size_t unread_bytes_at(int port) {
  // Lines: "sl local_address rem_address st tx_queue:rx_queue ...", addresses
  // and queues in hex; state 01 is ESTABLISHED.
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  std::size_t unread = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues;
    if (!(f >> sl >> local >> remote >> state >> queues) || state != "01") continue;
    const auto colon = local.find(':');
    if (colon == std::string::npos || std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
    unread += std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16);
  }
  return unread;
}

std::optional<store::Status> try_handshake(RawClient& c, const std::string& token,
                                           std::chrono::milliseconds timeout) {
  c.send_preamble();
  c.send(make_request(store::Op::kHello, {}, {token}, store::kProtocolVersion, 0, 1));
  auto r = c.recv(timeout);
  return r ? std::optional<store::Status>(r->status) : std::nullopt;
}

bool raise_nofile(std::size_t want) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_max < want) return false;
  if (r.rlim_cur >= want) return true;
  r.rlim_cur = want;
  return ::setrlimit(RLIMIT_NOFILE, &r) == 0;
}

}  // namespace ddp::test
