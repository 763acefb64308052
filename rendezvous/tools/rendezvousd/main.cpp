// ddp-rendezvousd: parse flags, set up logging, run a StoreServer until SIGTERM
// or SIGINT, map the outcome to an exit code (0 ok, 1 failure, 2 usage/config).
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/store_server.hpp"

namespace {

constexpr const char* kProgram = "ddp-rendezvousd";

std::string read_token(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ddp::ConfigError("--token-file " + path + ": cannot read: " + ddp::errno_text(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  auto token = ss.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw ddp::ConfigError("--token-file " + path + ": file is empty; put the token in it");
  return token;
}

// "<port>\n" via a temp file and rename, so a reader never sees a partial number.
void write_port_file(const std::string& path, std::uint16_t port) {
  const auto tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) throw ddp::ConfigError("--port-file " + path + ": cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw ddp::ConfigError("--port-file " + path + ": cannot rename " + tmp + ": " + ddp::errno_text(errno));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddp-rendezvousd: rendezvous and key-value store daemon for ddprun jobs"};
  ddp::store::StoreServerOptions options;
  options.port = 29400;
  std::string port_file, token_file, log_level = "info";
  app.add_option("--host", options.host, "address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "TCP port; 0 picks a free one (see --port-file)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_option("--token-file", token_file, "require clients to present the token in this file");
  app.add_option("--data-dir", options.data_dir, "keep a snapshot and log here; restarts keep every key");
  app.add_option("--max-connections", options.max_connections, "refuse connections beyond this many")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  std::int64_t idle_ms = options.idle_frame_timeout.count();
  app.add_option("--idle-frame-timeout-ms", idle_ms,
                 "close clients that send no HELLO, or stall mid-frame, this long")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{24} * 3600 * 1000));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.set_version_flag("--version", std::string(kProgram) + " " + DDP_VERSION);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << kProgram << ": " << e.what() << "; see --help\n";
    return 2;
  }

  options.idle_frame_timeout = std::chrono::milliseconds(idle_ms);
  try {
    ddp::log::setup(log_level, kProgram);
    if (!token_file.empty()) options.token = read_token(token_file);

    // Blocked before the server's thread exists so that it inherits the mask and
    // only sigwait() below sees the signals.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    ddp::store::StoreServer server(options);
    server.start();
    if (!port_file.empty()) write_port_file(port_file, server.port());

    int sig = 0;
    sigwait(&signals, &sig);
    ddp::log::get("store.server")->info("received {}; stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.stop();
    spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
    return 0;
  } catch (const ddp::ConfigError& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return 2;
  } catch (const ddp::NetworkError& e) {
    // Port in use or an address we cannot bind: the user picks another --host/--port.
    std::cerr << kProgram << ": " << e.what() << "; pick another --host/--port\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return 1;
  }
}
