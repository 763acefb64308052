#include "ddp/store/torch_proxy.hpp"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "accept_loop.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "failpoints.hpp"
#include "loopback_peer.hpp"
#include "proxy_connection.hpp"

namespace ddp::store {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using server::ProxyConnection;

// The connections of one client process (a local rank) and its generation.
struct Lane {
  std::unordered_map<ProxyConnection*, std::shared_ptr<ProxyConnection>> open;
  std::shared_ptr<const TorchProxyTarget> target;  // the target of its last connection
  std::int64_t generation = 0;
};

class TorchStoreProxy::Impl {
 public:
  explicit Impl(TorchProxyOptions options)
      : options_(std::move(options)),
        loop_({.logger = "store.proxy",
               .name = "torch store proxy",
               .loop = "proxy",
               .accepted = "a torch client",
               .error_prefix = "torch store proxy: "},
              {.admit = [this](tcp::socket socket) { admit(std::move(socket)); },
               .stopping =
                   [this] {
                     auto all = connections_;
                     for (auto& [ptr, conn] : all) conn->close("proxy stopping");
                     loop_.io().stop();
                   }}) {
    if (!options_.lane_of && !options_.lane_env.empty()) {
      options_.lane_of = [env = options_.lane_env, self = ::getpid(), this](std::uint16_t client_port) {
        const auto pid = server::loopback_peer_pid(loop_.port(), client_port, self);
        return pid ? server::process_env(*pid, env, self) : std::nullopt;
      };
    }
  }
  ~Impl() { stop(); }

  void start() {
    const bool started = loop_.start([this] {
      error_code ec;
      const auto address = asio::ip::make_address(options_.host, ec);
      if (ec) throw NetworkError("torch store proxy: '" + options_.host + "' is not an IP address");
      loop_.listen({address, options_.port}, Endpoint{options_.host, options_.port}.to_string());
    });
    if (started) ddp::log::get("store.proxy")->debug("listening host={} port={}", options_.host, port());
  }

  void set_target(TorchProxyTarget target) {
    if (target.key_prefix.empty() || target.key_prefix.back() != '/') {
      throw ConfigError("torch store proxy: key prefix '" + target.key_prefix + "' must end with '/'");
    }
    auto next = std::make_shared<const TorchProxyTarget>(std::move(target));
    {
      std::lock_guard<std::mutex> lk(target_mu_);
      target_ = next;
    }
    // Connections of the old round, if any are left, go: their workers are gone.
    asio::post(loop_.io(), [this, next] {
      std::vector<std::shared_ptr<ProxyConnection>> old;
      for (auto& [ptr, conn] : connections_) {
        if (conn->target() != next) old.push_back(conn);
      }
      for (auto& conn : old) conn->close("round over");
    });
  }

  void stop() { loop_.stop(); }

  std::uint16_t port() const { return loop_.port(); }

  std::map<std::string, std::int64_t> stats() const {
    return {{"connections", open_.load()},
            {"accepted", counters_.accepted.load()},
            {"requests", counters_.requests.load()},
            {"failed_connects", counters_.failed_connects.load()},
            {"generations", generations_.load()}};
  }

 private:
  void admit(tcp::socket socket) {
    server::failpoints::maybe_throw("proxy.accept");
    ++counters_.accepted;
    std::shared_ptr<const TorchProxyTarget> target;
    {
      std::lock_guard<std::mutex> lk(target_mu_);
      target = target_;
    }
    if (!target) {
      // No round yet: no worker of this agent can be asking.
      ddp::log::get("store.proxy")->warn("closing a connection that came before any round");
      error_code ignored;
      socket.close(ignored);
      return;
    }
    admit(std::move(socket), std::move(target));
  }

  // The key prefix of a new connection: the round's, plus "gen_<g>/" once its
  // lane has let go of every earlier connection and come back.
  std::string prefix_for(Lane* lane, const std::shared_ptr<const TorchProxyTarget>& target) {
    if (!lane) return target->key_prefix;
    // The loop may not have read the end of an old connection yet (nor the
    // requests before it, which still go through), so ask the sockets.
    const bool still_open = std::any_of(lane->open.begin(), lane->open.end(),
                                        [](const auto& entry) { return !entry.second->client_gone(); });
    if (lane->target != target) {
      lane->target = target;
      lane->generation = 0;
    } else if (!still_open) {
      ++lane->generation;
      ++generations_;
    }
    if (lane->generation == 0) return target->key_prefix;
    return target->key_prefix + "gen_" + std::to_string(lane->generation) + "/";
  }

  void admit(tcp::socket socket, std::shared_ptr<const TorchProxyTarget> target) {
    Lane* lane = nullptr;
    std::optional<std::string> name;
    if (options_.lane_of) {
      error_code ec;
      const auto peer = socket.remote_endpoint(ec);
      try {
        if (!ec) name = options_.lane_of(peer.port());
      } catch (const std::exception& e) {
        // Never the end of the accept loop: without a lane the client keeps the round's prefix.
        ddp::log::get("store.proxy")->warn("cannot tell which local rank connected error=\"{}\"", e.what());
      }
      if (name) lane = &lanes_[*name];
    }
    std::string prefix = prefix_for(lane, target);
    ddp::log::get("store.proxy")
        ->debug("torch client admitted lane={} prefix={}", name.value_or("unknown"), prefix);
    auto conn =
        std::make_shared<ProxyConnection>(loop_.io(), std::move(socket), std::move(target), std::move(prefix),
                                          options_, counters_, [this, lane](ProxyConnection* c) {
                                            connections_.erase(c);
                                            if (lane) lane->open.erase(c);
                                            open_ = static_cast<std::int64_t>(connections_.size());
                                          });
    connections_[conn.get()] = conn;
    if (lane) lane->open[conn.get()] = conn;
    open_ = static_cast<std::int64_t>(connections_.size());
    conn->start();
  }

  TorchProxyOptions options_;
  server::AcceptLoop loop_;
  std::unordered_map<ProxyConnection*, std::shared_ptr<ProxyConnection>> connections_;  // loop only
  std::unordered_map<std::string, Lane> lanes_;                                         // loop only
  server::ProxyCounters counters_;
  std::atomic<std::int64_t> open_{0};
  std::atomic<std::int64_t> generations_{0};
  std::mutex target_mu_;
  std::shared_ptr<const TorchProxyTarget> target_;
};

TorchStoreProxy::TorchStoreProxy(TorchProxyOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TorchStoreProxy::~TorchStoreProxy() = default;
void TorchStoreProxy::start() { impl_->start(); }
void TorchStoreProxy::stop() { impl_->stop(); }
std::uint16_t TorchStoreProxy::port() const { return impl_->port(); }
void TorchStoreProxy::set_target(TorchProxyTarget target) { impl_->set_target(std::move(target)); }
std::map<std::string, std::int64_t> TorchStoreProxy::stats() const { return impl_->stats(); }

}  // namespace ddp::store
