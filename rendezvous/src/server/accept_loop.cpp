#include "accept_loop.hpp"

#include "contained.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::store::server {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// After accept() fails (EMFILE, ...) wait before retrying instead of spinning.
constexpr std::chrono::milliseconds kAcceptRetry{100};

}  // namespace

AcceptLoop::AcceptLoop(Options options, Hooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)), acceptor_(io_), accept_retry_(io_) {}

AcceptLoop::~AcceptLoop() { stop(); }

bool AcceptLoop::start(const std::function<void()>& open) {
  std::lock_guard<std::mutex> lk(mu_);
  if (started_) return false;
  open();
  accept();
  started_ = true;
  thread_ = std::thread([this] { run(); });
  return true;
}

void AcceptLoop::listen(const tcp::endpoint& ep, const std::string& where) {
  error_code ec;
  acceptor_.open(ep.protocol(), ec);
  if (!ec && options_.reuse_address) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw NetworkError(options_.error_prefix + "cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
}

bool AcceptLoop::stop() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!started_ || stopped_) return false;
  stopped_ = true;
  asio::post(io_, [this] {
    error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    hooks_.stopping();
  });
  thread_.join();
  return true;
}

void AcceptLoop::accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) return accept_failed(ec);
    if (accept_failures_ > 0) {
      ddp::log::get(options_.logger)->info("accepting again after {} failed accepts", accept_failures_);
      accept_failures_ = 0;
    }
    // Whatever admitting this one does, the next accept is armed: a handler
    // that throws must not leave a server that accepts no one.
    run_contained([&] { hooks_.admit(std::move(socket)); },
                  [&](const std::string& error) {
                    ddp::log::get(options_.logger)
                        ->error("accepting {} failed; accepting goes on{}", options_.accepted, error);
                  });
    accept();
  });
}

void AcceptLoop::accept_failed(error_code ec) {
  const bool no_fds =
      ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
  // One line per streak: at EMFILE this runs ten times a second.
  if (accept_failures_++ == 0) {
    ddp::log::get(options_.logger)
        ->warn("accept failed error=\"{}\"; retrying every {} ms{}", ec.message(), kAcceptRetry.count(),
               no_fds ? options_.no_fds_hint : "");
  }
  // The descriptor of the oldest connection still in its handshake goes to
  // the one waiting: a flood of them cannot lock authenticated clients out.
  if (no_fds && hooks_.make_room && hooks_.make_room()) return accept();
  accept_retry_.expires_after(kAcceptRetry);
  accept_retry_.async_wait([this](error_code wec) {
    if (!wec) accept();
  });
}

void AcceptLoop::run() {
  // Handlers contain their own failures; an exception reaching here is a bug,
  // and the loop goes on serving rather than leave a server that answers nothing.
  ddp::log::run_surviving([this] { io_.run(); }, options_.logger, options_.loop);
}

}  // namespace ddp::store::server
