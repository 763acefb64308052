// ddp::init(): env -> Context with a connected store.
#include "ddp/init.hpp"

#include <cstdlib>
#include <sstream>

#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp {
namespace {

// Keeps rank 0's embedded server alive as long as anyone holds the store.
// Members are destroyed in reverse order: the client before the server.
struct HostedStore {
  std::unique_ptr<store::StoreServer> server;
  std::shared_ptr<store::TcpStore> client;
};

std::string read_token() {
  const char* path = std::getenv("DDP_TOKEN_FILE");
  if (path == nullptr || *path == '\0') return {};
  return read_token_file(path, "DDP_TOKEN_FILE");
}

std::chrono::milliseconds connect_timeout(const InitOptions& options) {
  const char* v = std::getenv("DDP_INIT_TIMEOUT");
  if (v == nullptr || *v == '\0') return options.connect_timeout;
  const auto timeout = parse_duration_or_throw(v, TimeUnit::kSeconds, "DDP_INIT_TIMEOUT");
  if (timeout.count() == 0) {
    throw ConfigError(std::string("DDP_INIT_TIMEOUT: '") + v + "' is not a positive number of seconds");
  }
  return timeout;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

}  // namespace

Context init(InitOptions options) {
  Context ctx = parse_env();
  const auto timeout = connect_timeout(options);
  const std::string token = read_token();
  const bool from_launcher =
      std::getenv("DDP_STORE_ENDPOINT") != nullptr && *std::getenv("DDP_STORE_ENDPOINT");
  Endpoint endpoint =
      parse_endpoint(ctx.store_endpoint, from_launcher ? "DDP_STORE_ENDPOINT" : "MASTER_ADDR:MASTER_PORT");
  auto log = log::get("sdk");

  auto hosted = std::make_shared<HostedStore>();
  if (!from_launcher && ctx.rank == 0) {
    store::StoreServerOptions server_options;
    server_options.host = "0.0.0.0";
    server_options.port = endpoint.port;
    server_options.token = token;
    hosted->server = std::make_unique<store::StoreServer>(server_options);
    try {
      hosted->server->start();
    } catch (const std::exception& e) {
      throw NetworkError("rank 0 cannot host the store on port " + std::to_string(endpoint.port) +
                         " (MASTER_PORT): " + e.what() + "; choose a free MASTER_PORT");
    }
    log->info("hosting store port={}", endpoint.port);
    endpoint.host = "127.0.0.1";
  }

  store::TcpStoreOptions client_options;
  client_options.endpoint = endpoint;
  client_options.token = token;
  client_options.connect_timeout = timeout;
  try {
    hosted->client = std::make_shared<store::TcpStore>(client_options);
  } catch (const store::AuthError& e) {
    throw ConfigError(std::string("the store at ") + ctx.store_endpoint +
                      " rejected this worker: " + e.what() + "; check DDP_TOKEN_FILE");
  } catch (const NetworkError& e) {
    const std::string source = from_launcher ? "DDP_STORE_ENDPOINT=" + ctx.store_endpoint
                                             : "MASTER_ADDR:MASTER_PORT=" + ctx.store_endpoint;
    const std::string hint = from_launcher ? "is the ddprun agent (or ddp-rendezvousd) still running?"
                                           : "check MASTER_ADDR and MASTER_PORT, and that rank 0 is running";
    throw NetworkError("rank " + std::to_string(ctx.rank) + " cannot reach the store at " + source +
                       " within " + seconds_text(timeout) + ": " + e.what() + "; " + hint);
  }
  ctx.store = std::shared_ptr<store::Store>(hosted, hosted->client.get());
  log->info("init rank={} world_size={} local_rank={} store={} prefix={}", ctx.rank, ctx.world_size,
            ctx.local_rank, ctx.store_endpoint, ctx.store_prefix);
  return ctx;
}

}  // namespace ddp
