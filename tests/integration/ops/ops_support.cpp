#include "ops_support.hpp"

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

std::unique_ptr<store::TcpStore> store_client(int port) {
  store::TcpStoreOptions o;
  o.endpoint.host = "127.0.0.1";
  o.endpoint.port = static_cast<std::uint16_t>(port);
  o.connect_timeout = std::chrono::seconds(10);
  return std::make_unique<store::TcpStore>(o);
}

}  // namespace ddp::test
