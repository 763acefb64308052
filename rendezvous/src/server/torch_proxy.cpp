#include "ddp/store/torch_proxy.hpp"

#include <algorithm>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "proxy_connection.hpp"

namespace ddp::store {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using server::ProxyConnection;

namespace {

constexpr std::chrono::milliseconds kAcceptRetry{100};

}  // namespace

// One listening port and the connections accepted on it.
struct Lane {
  explicit Lane(asio::io_context& io) : acceptor(io), accept_retry(io) {}
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::uint16_t port = 0;
  std::unordered_map<ProxyConnection*, std::shared_ptr<ProxyConnection>> open;
  std::shared_ptr<const TorchProxyTarget> target;  // the target of its last connection
  std::int64_t generation = 0;
};

class TorchStoreProxy::Impl {
 public:
  explicit Impl(TorchProxyOptions options) : options_(std::move(options)) {
    if (options_.lanes == 0) options_.lanes = 1;
    for (std::size_t i = 0; i < options_.lanes; ++i) lanes_.push_back(std::make_unique<Lane>(io_));
  }
  ~Impl() { stop(); }

  void start() {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) return;
    error_code ec;
    const auto address = asio::ip::make_address(options_.host, ec);
    if (ec) throw NetworkError("torch store proxy: '" + options_.host + "' is not an IP address");
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      // A fixed port can serve one lane only; the others take free ones.
      const std::uint16_t want = i == 0 ? options_.port : 0;
      const std::string where = Endpoint{options_.host, want}.to_string();
      const tcp::endpoint ep(address, want);
      auto& acceptor = lanes_[i]->acceptor;
      acceptor.open(ep.protocol(), ec);
      if (!ec) acceptor.bind(ep, ec);
      if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
      if (ec) throw NetworkError("torch store proxy: cannot listen on " + where + ": " + ec.message());
      lanes_[i]->port = acceptor.local_endpoint().port();
      accept(*lanes_[i]);
    }
    started_ = true;
    thread_ = std::thread([this] { run(); });
    ddp::log::get("store.proxy")->debug("listening host={} port={} lanes={}", options_.host, lanes_[0]->port,
                                        lanes_.size());
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
      for (auto& lane : lanes_) {
        std::vector<std::shared_ptr<ProxyConnection>> old;
        for (auto& [ptr, conn] : lane->open) {
          if (conn->target() != next) old.push_back(conn);
        }
        for (auto& conn : old) conn->close("round over");
      }
    });
  }

  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    asio::post(io_, [this] {
      for (auto& lane : lanes_) {
        error_code ec;
        lane->acceptor.close(ec);
        lane->accept_retry.cancel();
        auto all = lane->open;
        for (auto& [ptr, conn] : all) conn->close("proxy stopping");
      }
      io_.stop();
    });
    thread_.join();
  }

  std::uint16_t port(std::size_t lane) const { return lane < lanes_.size() ? lanes_[lane]->port : 0; }

  std::map<std::string, std::int64_t> stats() const {
    return {{"connections", open_.load()},
            {"accepted", counters_.accepted.load()},
            {"requests", counters_.requests.load()},
            {"failed_connects", counters_.failed_connects.load()},
            {"generations", generations_.load()}};
  }

 private:
  void accept(Lane& lane) {
    lane.acceptor.async_accept([this, &lane](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !lane.acceptor.is_open()) return;
      if (ec) {
        ddp::log::get("store.proxy")
            ->warn("accept failed error=\"{}\"; retrying in {} ms", ec.message(), kAcceptRetry.count());
        lane.accept_retry.expires_after(kAcceptRetry);
        lane.accept_retry.async_wait([this, &lane](error_code wec) {
          if (!wec) accept(lane);
        });
        return;
      }
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
        admit(lane, std::move(socket), std::move(target));
      }
      accept(lane);
    });
  }

  void admit(Lane& lane, tcp::socket socket, std::shared_ptr<const TorchProxyTarget> target) {
    // A client that closed its last connection and connects again has let
    // its process group go. The loop may not have read that end yet (nor the
    // requests before it, which still go through), so ask the socket.
    const bool still_open = std::any_of(lane.open.begin(), lane.open.end(),
                                        [](const auto& entry) { return !entry.second->client_gone(); });
    if (lane.target != target) {
      lane.target = target;
      lane.generation = 0;
    } else if (!still_open) {
      ++lane.generation;
      ++generations_;
    }
    std::string prefix = target->key_prefix;
    if (lane.generation > 0) prefix += "gen_" + std::to_string(lane.generation) + "/";
    auto conn = std::make_shared<ProxyConnection>(io_, std::move(socket), std::move(target), std::move(prefix),
                                                  options_, counters_, [this, &lane](ProxyConnection* c) {
                                                    lane.open.erase(c);
                                                    --open_;
                                                  });
    lane.open[conn.get()] = conn;
    ++open_;
    conn->start();
  }

  void run() {
    try {
      io_.run();
    } catch (const std::exception& e) {
      ddp::log::get("store.proxy")->error("proxy loop failed error=\"{}\"", e.what());
    }
  }

  TorchProxyOptions options_;
  asio::io_context io_{1};
  std::vector<std::unique_ptr<Lane>> lanes_;  // loop only, after start()
  server::ProxyCounters counters_;
  std::atomic<std::int64_t> open_{0};
  std::atomic<std::int64_t> generations_{0};
  std::mutex target_mu_;
  std::shared_ptr<const TorchProxyTarget> target_;
  std::mutex mu_;
  bool started_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

TorchStoreProxy::TorchStoreProxy(TorchProxyOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TorchStoreProxy::~TorchStoreProxy() = default;
void TorchStoreProxy::start() { impl_->start(); }
void TorchStoreProxy::stop() { impl_->stop(); }
std::uint16_t TorchStoreProxy::port(std::size_t lane) const { return impl_->port(lane); }
void TorchStoreProxy::set_target(TorchProxyTarget target) { impl_->set_target(std::move(target)); }
std::map<std::string, std::int64_t> TorchStoreProxy::stats() const { return impl_->stats(); }

}  // namespace ddp::store
