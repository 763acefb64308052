#include "ddp/store/store_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <mutex>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "dispatcher.hpp"
#include "failpoints.hpp"
#include "session.hpp"

namespace ddp::store {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// One read buffer for the loop; 64 KiB keeps syscalls per byte low.
constexpr std::size_t kReadBufferBytes = 64 * 1024;
// After accept() fails (EMFILE, ...) wait before retrying instead of spinning.
constexpr std::chrono::milliseconds kAcceptRetry{100};

std::string host_port(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

class StoreServer::Impl {
 public:
  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)),
        acceptor_(io_),
        accept_retry_(io_),
        read_buffer_(kReadBufferBytes, '\0') {
    session_options_.limits = options_.limits;
    session_options_.idle_frame_timeout = options_.idle_frame_timeout;
    session_options_.allow_torch = options_.token.empty();
    session_options_.torch_legacy_protocol = options_.torch_legacy_protocol;
    session_options_.max_buffered_request_bytes = options_.max_buffered_request_bytes;
    session_options_.buffered_total = &buffered_request_bytes_;
    session_options_.max_queued_bytes = options_.max_queued_bytes_per_connection != 0
                                            ? options_.max_queued_bytes_per_connection
                                            : std::size_t{options_.limits.max_frame_bytes} + (8u << 20);
  }

  ~Impl() { stop(); }

  void start() {
    std::lock_guard<std::mutex> lk(mu_);
    if (started_) return;
    dispatcher_ = std::make_unique<server::Dispatcher>(io_, options_);
    session_options_.preauth = &dispatcher_->preauth();
    dispatcher_->open_persistence();
    listen();
    accept();
    started_ = true;
    thread_ = std::thread([this] { run(); });
    ddp::log::get("store.server")
        ->info("listening host={} port={} data_dir={} auth={} max_connections={}", options_.host,
               port_.load(), options_.data_dir.empty() ? "none" : options_.data_dir,
               options_.token.empty() ? "off" : "on", options_.max_connections);
  }

  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_ || stopped_) return;
    stopped_ = true;
    asio::post(io_, [this] {
      error_code ec;
      acceptor_.close(ec);
      accept_retry_.cancel();
      dispatcher_->shutdown([this] { io_.stop(); });
    });
    thread_.join();
    ddp::log::get("store.server")->info("stopped port={}", port_.load());
  }

  std::uint16_t port() const { return port_.load(); }
  bool saved() const { return dispatcher_ == nullptr || dispatcher_->saved(); }

  std::map<std::string, std::int64_t> stats() {
    return on_loop([this] { return dispatcher_->stats(); });
  }
  std::map<std::string, std::int64_t> metrics() {
    return on_loop([this] { return dispatcher_->metrics(); });
  }

 private:
  // Runs `read` on the loop thread (or here once the loop has joined).
  template <typename F>
  std::map<std::string, std::int64_t> on_loop(F read) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!started_) return {};
    if (stopped_) return read();  // loop joined: safe to read here
    // Shared: a caller that gave up must not leave the loop a dangling promise.
    auto p = std::make_shared<std::promise<std::map<std::string, std::int64_t>>>();
    auto f = p->get_future();
    asio::post(io_, [p, read] {
      try {
        p->set_value(read());
      } catch (...) {
        p->set_exception(std::current_exception());
      }
    });
    lk.unlock();
    if (f.wait_for(StoreServer::kLoopAnswerTimeout) != std::future_status::ready)
      throw TimeoutError("the store's loop thread did not answer within " +
                         std::to_string(StoreServer::kLoopAnswerTimeout.count()) + " ms");
    return f.get();
  }

  void listen() {
    error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) {
      tcp::resolver resolver(io_);
      auto results = resolver.resolve(options_.host, std::to_string(options_.port), ec);
      if (ec || results.empty())
        throw NetworkError("cannot resolve host '" + options_.host + "': " + ec.message());
      address = results.begin()->endpoint().address();
    }
    const tcp::endpoint ep(address, options_.port);
    const auto where = host_port(options_.host, options_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw NetworkError("cannot listen on " + where + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
  }

  void accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      auto log = ddp::log::get("store.server");
      if (ec) return accept_failed(ec);
      if (accept_failures_ > 0) {
        log->info("accepting again after {} failed accepts", accept_failures_);
        accept_failures_ = 0;
      }
      // Whatever admitting this one does, the next accept is armed: a handler
      // that throws must not leave a daemon that accepts no one.
      try {
        admit(std::move(socket));
      } catch (const std::exception& e) {
        log->error("accepting a connection failed; accepting goes on error=\"{}\"", e.what());
      } catch (...) {
        log->error("accepting a connection failed with a non-standard exception; accepting goes on");
      }
      accept();
    });
  }

  // Closing an unauthenticated connection to make room for a new one is only
  // fair when a token is required: without one, a silent connection may be a
  // torch 1.x client's (it opens one that never sends), as good as any other.
  bool make_room(const char* why) {
    return !options_.token.empty() && dispatcher_->preauth().close_oldest(why);
  }

  void accept_failed(error_code ec) {
    auto log = ddp::log::get("store.server");
    const bool no_fds =
        ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
    // One line per streak: at EMFILE this runs ten times a second.
    if (accept_failures_++ == 0) {
      log->warn("accept failed error=\"{}\"; retrying every {} ms{}", ec.message(), kAcceptRetry.count(),
                no_fds ? "; raise LimitNOFILE (ulimit -n) or lower max_connections" : "");
    }
    // The descriptor of the oldest connection still in its handshake goes to
    // the one waiting: a flood of them cannot lock authenticated clients out.
    if (no_fds && make_room("out of descriptors")) return accept();
    accept_retry_.expires_after(kAcceptRetry);
    accept_retry_.async_wait([this](error_code wec) {
      if (!wec) accept();
    });
  }

  void admit(tcp::socket socket) {
    server::failpoints::maybe_throw("server.accept");
    auto log = ddp::log::get("store.server");
    if (dispatcher_->connections() >= options_.max_connections && !make_room("max_connections reached")) {
      error_code pec;
      auto peer = socket.remote_endpoint(pec);
      log->warn("closing connection: max_connections={} reached peer={}:{}", options_.max_connections,
                pec ? "unknown" : peer.address().to_string(), pec ? 0 : peer.port());
      socket.close(pec);
      return;
    }
    auto session =
        std::make_shared<server::Session>(std::move(socket), *dispatcher_, session_options_, &read_buffer_);
    dispatcher_->add_session(session);
    log->debug("connection accepted peer={}", session->peer());
    session->start();
  }

  void run() {
    // Handlers contain their own failures; an exception reaching here is a bug,
    // and the loop goes on serving rather than leave a daemon that answers nothing.
    ddp::log::run_surviving([this] { io_.run(); }, "store.server", "server");
  }

  StoreServerOptions options_;
  server::SessionOptions session_options_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::string read_buffer_;
  std::size_t buffered_request_bytes_ = 0;  // all sessions' incomplete requests (loop thread)
  std::uint64_t accept_failures_ = 0;       // in a row (loop thread)
  std::unique_ptr<server::Dispatcher> dispatcher_;
  std::atomic<std::uint16_t> port_{0};
  std::mutex mu_;
  bool started_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
StoreServer::~StoreServer() = default;
void StoreServer::start() { impl_->start(); }
void StoreServer::stop() { impl_->stop(); }
bool StoreServer::saved() const { return impl_->saved(); }
std::uint16_t StoreServer::port() const { return impl_->port(); }
std::map<std::string, std::int64_t> StoreServer::stats() const { return impl_->stats(); }
std::map<std::string, std::int64_t> StoreServer::metrics() const { return impl_->metrics(); }

}  // namespace ddp::store
