#include "ops_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

namespace ddp::test {

std::vector<std::string> unit_exec_start(const std::string& unit) {
  const auto text = read_file(fs::path(DDP_UNIT_TEST_DIR) / unit);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("ExecStart=", 0) != 0) continue;
    std::istringstream words(line.substr(10));
    std::vector<std::string> argv;
    for (std::string w; words >> w;) argv.push_back(w);
    return argv;
  }
  return {};
}

HttpReply http_get(int port, const std::string& path) {
  HttpReply reply;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return reply;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const auto req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string raw;
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<std::size_t>(n));
      if (raw.rfind("HTTP/1.", 0) == 0 && raw.size() > 12) reply.status = std::stoi(raw.substr(9, 3));
      if (auto p = raw.find("\r\n\r\n"); p != std::string::npos) reply.body = raw.substr(p + 4);
    }
  }
  ::close(fd);
  return reply;
}

std::unique_ptr<store::TcpStore> store_client(int port) {
  store::TcpStoreOptions o;
  o.endpoint.host = "127.0.0.1";
  o.endpoint.port = static_cast<std::uint16_t>(port);
  o.connect_timeout = std::chrono::seconds(10);
  return std::make_unique<store::TcpStore>(o);
}

}  // namespace ddp::test
