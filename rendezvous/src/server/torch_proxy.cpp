#include "ddp/store/torch_proxy.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

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

namespace {

constexpr std::chrono::milliseconds kAcceptRetry{100};

}  // namespace

// The connections of one client process (a local rank) and its generation.
struct Lane {
  std::unordered_map<ProxyConnection*, std::shared_ptr<ProxyConnection>> open;
  std::shared_ptr<const TorchProxyTarget> target;  // the target of its last connection
  std::int64_t generation = 0;
};

class TorchStoreProxy::Impl {
 public:
  explicit Impl(TorchProxyOptions options)
      : options_(std::move(options)), acceptor_(io_), accept_retry_(io_) {
    if (!options_.lane_of && !options_.lane_env.empty()) {
      options_.lane_of = [env = options_.lane_env, self = ::getpid(), this](std::uint16_t client_port) {
        const auto pid = server::loopback_peer_pid(port_.load(), client_port, self);
        return pid ? server::process_env(*pid, env, self) : std::nullopt;
      };
    }
  }
  ~Impl() { stop(); }

  void start() {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) return;
    error_code ec;
    const auto address = asio::ip::make_address(options_.host, ec);
    const std::string where = Endpoint{options_.host, options_.port}.to_string();
    if (ec) throw NetworkError("torch store proxy: '" + options_.host + "' is not an IP address");
    const tcp::endpoint ep(address, options_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw NetworkError("torch store proxy: cannot listen on " + where + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    started_ = true;
    thread_ = std::thread([this] { run(); });
    ddp::log::get("store.proxy")->debug("listening host={} port={}", options_.host, port_.load());
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
    asio::post(io_, [this, next] {
      std::vector<std::shared_ptr<ProxyConnection>> old;
      for (auto& [ptr, conn] : connections_) {
        if (conn->target() != next) old.push_back(conn);
      }
      for (auto& conn : old) conn->close("round over");
    });
  }

  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    asio::post(io_, [this] {
      error_code ec;
      acceptor_.close(ec);
      accept_retry_.cancel();
      auto all = connections_;
      for (auto& [ptr, conn] : all) conn->close("proxy stopping");
      io_.stop();
    });
    thread_.join();
  }

  std::uint16_t port() const { return port_.load(); }

  std::map<std::string, std::int64_t> stats() const {
    return {{"connections", open_.load()},
            {"accepted", counters_.accepted.load()},
            {"requests", counters_.requests.load()},
            {"failed_connects", counters_.failed_connects.load()},
            {"generations", generations_.load()}};
  }

 private:
  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        ddp::log::get("store.proxy")
            ->warn("accept failed error=\"{}\"; retrying in {} ms", ec.message(), kAcceptRetry.count());
        accept_retry_.expires_after(kAcceptRetry);
        accept_retry_.async_wait([this](error_code wec) {
          if (!wec) accept();
        });
        return;
      }
      // Whatever admitting this one does, the next accept is armed.
      try {
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
        } else {
          admit(std::move(socket), std::move(target));
        }
      } catch (const std::exception& e) {
        ddp::log::get("store.proxy")
            ->error("accepting a torch client failed; accepting goes on error=\"{}\"", e.what());
      } catch (...) {
        ddp::log::get("store.proxy")->error("accepting a torch client failed; accepting goes on");
      }
      accept();
    });
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
        std::make_shared<ProxyConnection>(io_, std::move(socket), std::move(target), std::move(prefix),
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

  void run() {
    // Handlers contain their own failures; one that still escapes is a bug,
    // and the loop goes on serving the other clients rather than end.
    ddp::log::run_surviving([this] { io_.run(); }, "store.proxy", "proxy");
  }

  TorchProxyOptions options_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::unordered_map<ProxyConnection*, std::shared_ptr<ProxyConnection>> connections_;  // loop only
  std::unordered_map<std::string, Lane> lanes_;                                         // loop only
  server::ProxyCounters counters_;
  std::atomic<std::int64_t> open_{0};
  std::atomic<std::int64_t> generations_{0};
  std::atomic<std::uint16_t> port_{0};
  std::mutex target_mu_;
  std::shared_ptr<const TorchProxyTarget> target_;
  std::mutex mu_;
  bool started_ = false;
  bool stopped_ = false;
  std::thread thread_;
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
