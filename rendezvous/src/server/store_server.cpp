#include "ddp/store/store_server.hpp"

#include <future>

#include "accept_loop.hpp"
#include "ddp/common/endpoint.hpp"
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

}  // namespace

class StoreServer::Impl {
 public:
  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)),
        loop_({.logger = "store.server",
               .name = "store",
               .loop = "server",
               .accepted = "a connection",
               .reuse_address = true,
               .no_fds_hint = "; raise LimitNOFILE (ulimit -n) or lower max_connections"},
              {.admit = [this](tcp::socket socket) { admit(std::move(socket)); },
               .make_room = [this] { return make_room("out of descriptors"); },
               .stopping = [this] { dispatcher_->shutdown([this] { loop_.io().stop(); }); }}),
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
    const bool started = loop_.start([this] {
      dispatcher_ = std::make_unique<server::Dispatcher>(loop_.io(), options_);
      session_options_.preauth = &dispatcher_->preauth();
      session_options_.ack_gate = &dispatcher_->ack_gate();
      session_options_.reply_budget = &dispatcher_->reply_budget();
      dispatcher_->open_persistence();
      loop_.listen(endpoint(), Endpoint{options_.host, options_.port}.to_string());
    });
    if (!started) return;
    ddp::log::get("store.server")
        ->info("listening host={} port={} data_dir={}{} auth={} max_connections={}", options_.host, port(),
               options_.data_dir.empty() ? "none" : options_.data_dir,
               options_.data_dir.empty()                     ? ""
               : options_.fsync == store::FsyncMode::kAlways ? " fsync=always"
                                                             : " fsync=never",
               options_.token.empty() ? "off" : "on", options_.max_connections);
  }

  void stop() {
    if (loop_.stop()) ddp::log::get("store.server")->info("stopped port={}", port());
  }

  std::uint16_t port() const { return loop_.port(); }
  bool saved() const { return dispatcher_ == nullptr || dispatcher_->saved(); }

  std::map<std::string, std::int64_t> stats() {
    return loop_.on_loop([this] { return dispatcher_->stats(); }, StoreServer::kLoopAnswerTimeout);
  }
  std::map<std::string, std::int64_t> metrics() {
    return loop_.on_loop([this] { return dispatcher_->metrics(); }, StoreServer::kLoopAnswerTimeout);
  }

  JobsReport jobs(const JobQuery& query) {
    // Shared: the loop may answer after this caller gave up.
    auto answer = std::make_shared<std::promise<JobsReport>>();
    auto f = answer->get_future();
    // 0: the server has not started (on_loop's default); 1: queued; 2: refused.
    const int queued = loop_.on_loop(
        [this, query, answer] {
          const bool ok = dispatcher_->jobs(query, [answer](const JobsReport* r) {
            if (r != nullptr) return answer->set_value(*r);
            answer->set_exception(std::make_exception_ptr(StoreError("the store server is stopping")));
          });
          return ok ? 1 : 2;
        },
        StoreServer::kLoopAnswerTimeout);
    if (queued == 0) return {};
    if (queued == 2) throw StoreError("too many job listings in progress; try again");
    if (f.wait_for(StoreServer::kJobsTimeout) != std::future_status::ready) {
      throw TimeoutError("the job listing did not finish within " +
                         std::to_string(StoreServer::kJobsTimeout.count()) + " ms");
    }
    return f.get();
  }

 private:
  tcp::endpoint endpoint() {
    error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) {
      tcp::resolver resolver(loop_.io());
      auto results = resolver.resolve(options_.host, std::to_string(options_.port), ec);
      if (ec || results.empty())
        throw NetworkError("cannot resolve host '" + options_.host + "': " + ec.message());
      address = results.begin()->endpoint().address();
    }
    return {address, options_.port};
  }

  // Closing an unauthenticated connection to make room for a new one is only
  // fair when a token is required: without one, a silent connection may be a
  // torch 1.x client's (it opens one that never sends), as good as any other.
  bool make_room(const char* why) {
    return !options_.token.empty() && dispatcher_->preauth().close_oldest(why);
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

  StoreServerOptions options_;
  server::SessionOptions session_options_;
  server::AcceptLoop loop_;
  std::string read_buffer_;
  std::size_t buffered_request_bytes_ = 0;  // all sessions' incomplete requests (loop thread)
  // Last: its timers and sessions go before the loop's io_context.
  std::unique_ptr<server::Dispatcher> dispatcher_;
};

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
StoreServer::~StoreServer() = default;
void StoreServer::start() { impl_->start(); }
void StoreServer::stop() { impl_->stop(); }
bool StoreServer::saved() const { return impl_->saved(); }
std::uint16_t StoreServer::port() const { return impl_->port(); }
std::map<std::string, std::int64_t> StoreServer::stats() const { return impl_->stats(); }
std::map<std::string, std::int64_t> StoreServer::metrics() const { return impl_->metrics(); }
JobsReport StoreServer::jobs(const JobQuery& query) const { return impl_->jobs(query); }

}  // namespace ddp::store
