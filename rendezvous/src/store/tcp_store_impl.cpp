// TcpStore's connection: callers' requests, the read loop and reply dispatch.
#include "tcp_store_impl.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::store {

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
// How long a writer blocked on a full socket buffer sleeps before re-checking
// whether the I/O thread declared the connection dead.
constexpr int kWritePollMs = 200;
// A deferred frame (a watch cancel) waits at most this long for a request to
// share its write: the caller that cancels a watch usually sends one at once.
constexpr std::chrono::milliseconds kDeferredFlush{5};

// The one retry rule, for call() and call_batch() alike. A write that fails is
// sent again on a new connection (once) only when the server cannot hold any
// of its requests whole: the bytes that left stop short of the end of the
// first frame. The server applies a frame only once it has all of it, so a
// cut inside the first frame applied nothing; a whole frame may have been
// applied, and an ADD, APPEND, QUEUE_PUSH or BARRIER applied twice is wrong.
// A request that went out whole is never sent again: at most once.
bool may_resend(std::size_t sent, std::size_t first_frame_bytes) { return sent < first_frame_bytes; }

// Requests whose second application changes neither the state nor the answer.
// For the others a lost answer is reported as "may have been applied".
bool is_idempotent(Op op) {
  if (is_read_only(op)) return true;
  switch (op) {
    case Op::kSet:
    case Op::kMultiSet:
    case Op::kLeaseKeepAlive:
    case Op::kQueueLen:
    case Op::kWatch:
    case Op::kCancel:
    case Op::kHello:
      return true;
    default:
      return false;
  }
}
}  // namespace

void PendingCall::complete(Response r) {
  {
    std::lock_guard<std::mutex> lk(mu);
    response = std::move(r);
    done = true;
  }
  cv.notify_one();
}

void PendingCall::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lk(mu);
    error = std::move(e);
    done = true;
  }
  cv.notify_one();
}

TcpStore::Impl::Impl(TcpStoreOptions options)
    : options_(std::move(options)),
      work_(asio::make_work_guard(io_)),
      socket_(io_),
      resolver_(io_),
      connect_timer_(io_),
      backoff_timer_(io_),
      handshake_timer_(io_),
      deferred_timer_(io_),
      backoff_(std::chrono::milliseconds(20), std::chrono::milliseconds(1000)),
      rbuf_(kReadChunk) {}

TcpStore::Impl::~Impl() { shutdown(); }

void TcpStore::Impl::start() {
  thread_ = std::thread([this] {
    try {
      io_.run();
    } catch (const std::exception& e) {
      // Handlers catch their own errors; reaching here is a bug worth a log line.
      log::get("store.client")->error("store client I/O thread stopped: {}", e.what());
    }
  });
  ensure_connected();
}

void TcpStore::Impl::shutdown() {
  std::vector<std::shared_ptr<WatchState>> watches;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, w] : watches_) watches.push_back(w);
    watches_.clear();
  }
  for (auto& w : watches) w->cancelled = true;
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    ++attempt_seq_;
    cycle_active_ = false;
    connect_timer_.cancel();
    backoff_timer_.cancel();
    deferred_timer_.cancel();
    resolver_.cancel();
    on_broken("the store client was closed");
    io_.stop();
  });
  work_.reset();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // destroyed from a watch callback: see TcpStore's contract
  } else {
    thread_.join();
  }
  connect_cv_.notify_all();
}

void TcpStore::Impl::ensure_connected() {
  std::unique_lock<std::mutex> lk(mu_);
  if (connected_) return;
  if (stopping_) throw NetworkError("store client for " + where() + " is closed");
  const auto epoch = connect_epoch_;
  if (!connecting_) {
    connecting_ = true;
    asio::post(io_, [this] { begin_connect(); });
  }
  connect_cv_.wait(lk, [&] { return connected_ || connect_epoch_ != epoch || stopping_; });
  if (connected_) return;
  if (connect_error_) std::rethrow_exception(connect_error_);
  throw NetworkError("store client for " + where() + " is closed");
}

void TcpStore::Impl::write_frame(const std::string& frame, std::size_t* sent) {
  std::lock_guard<std::mutex> lk(write_mu_);
  if (write_fd_ < 0) throw NetworkError("connection to store at " + where() + " was lost");
  std::string joined;
  const std::string* out = &frame;
  std::size_t ahead = 0;  // deferred bytes in front of `frame`
  if (!deferred_.empty()) {
    joined.swap(deferred_);
    ahead = joined.size();
    joined += frame;
    out = &joined;
  }
  std::size_t off = 0;
  auto report = [&] {
    if (sent != nullptr) *sent = off > ahead ? off - ahead : 0;
  };
  while (off < out->size()) {
    const auto n = ::send(write_fd_, out->data() + off, out->size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (write_broken_) break;
      pollfd p{write_fd_, POLLOUT, 0};
      ::poll(&p, 1, kWritePollMs);
      continue;
    }
    report();
    throw NetworkError("cannot send to store at " + where() + ": " + errno_text(err));
  }
  report();
  if (off < out->size()) throw NetworkError("connection to store at " + where() + " was lost");
}

void TcpStore::Impl::defer_frame(const std::string& frame) {
  {
    std::lock_guard<std::mutex> lk(write_mu_);
    if (write_fd_ < 0) return;  // the server forgets the connection's watches with it
    deferred_ += frame;
    if (deferred_armed_) return;
    deferred_armed_ = true;
  }
  asio::post(io_, [this] { arm_deferred_flush(); });
}

void TcpStore::Impl::arm_deferred_flush() {
  deferred_timer_.expires_after(kDeferredFlush);
  deferred_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) {
      std::lock_guard<std::mutex> lk(write_mu_);
      deferred_armed_ = false;
      return;
    }
    if (flush_deferred()) arm_deferred_flush();
  });
}

bool TcpStore::Impl::flush_deferred() {
  // This thread also reads the replies: it must never wait for the socket to
  // take bytes (a server that stops reading until its replies are read would
  // wait for us in turn). What does not go now goes on the next attempt, or in
  // front of the next request's bytes.
  std::lock_guard<std::mutex> lk(write_mu_);
  if (write_fd_ >= 0 && !deferred_.empty()) {
    const auto n = ::send(write_fd_, deferred_.data(), deferred_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      deferred_.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      deferred_.clear();  // the read side sees the break and reconnects; the watches went with it
    }
  }
  deferred_armed_ = write_fd_ >= 0 && !deferred_.empty();
  return deferred_armed_;
}

void TcpStore::Impl::refuse_on_io_thread(const char* what) const {
  // Replies are read by this very thread: waiting for one here would hang forever.
  if (std::this_thread::get_id() == thread_.get_id()) {
    throw StoreError(std::string("TcpStore ") + what + " called from a watch callback of the same store " +
                     where() + "; a blocking call there would deadlock: hand the work to another thread");
  }
}

Response TcpStore::Impl::call(Request req, std::chrono::milliseconds reply_timeout) {
  // A batch of one: one retry rule for both (may_resend).
  std::vector<Request> one;
  one.push_back(std::move(req));
  return std::move(call_batch(one, reply_timeout).front());
}

Response TcpStore::Impl::await_reply(const std::shared_ptr<PendingCall>& pending, std::uint32_t id, Op op,
                                     std::chrono::milliseconds reply_timeout) {
  std::unique_lock<std::mutex> lk(pending->mu);
  const auto deadline = reply_timeout.count() < 0 ? Deadline::never() : Deadline::after(reply_timeout);
  if (!wait_within(pending->cv, lk, deadline, [&] { return pending->done; })) {
    lk.unlock();
    {
      std::lock_guard<std::mutex> mlk(mu_);
      pending_.erase(id);
    }
    lk.lock();
    if (!pending->done) {
      throw TimeoutError("store at " + where() + " did not answer " + op_name(op) + " within " +
                         std::to_string(reply_timeout.count()) + " ms");
    }
  }
  if (pending->error) {
    if (is_idempotent(op)) std::rethrow_exception(pending->error);
    try {
      std::rethrow_exception(pending->error);
    } catch (const NetworkError& e) {
      // The request went out whole and its answer was lost: the store may
      // have applied it. Sending it again could apply it twice; say so.
      throw NetworkError(std::string(e.what()) + "; the " + op_name(op) +
                         " was sent and may have been applied, so it is not sent again (at most once)");
    }
  }
  return std::move(pending->response);
}

std::vector<Response> TcpStore::Impl::call_batch(std::vector<Request>& reqs,
                                                 std::chrono::milliseconds reply_timeout) {
  refuse_on_io_thread(reqs.size() == 1 ? op_name(reqs[0].op) : "batch");
  std::vector<std::shared_ptr<PendingCall>> pending(reqs.size());
  std::string frames;
  for (int attempt = 0;; ++attempt) {
    ensure_connected();
    std::uint64_t epoch = 0;
    {
      // Fresh calls per attempt, as in call().
      std::lock_guard<std::mutex> lk(mu_);
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].id = next_id_++;
        if (next_id_ == 0) next_id_ = 1;
        pending[i] = std::make_shared<PendingCall>();
        pending_[reqs[i].id] = pending[i];
      }
      epoch = connect_epoch_;
    }
    frames.clear();
    std::size_t first_frame = 0;
    for (const auto& req : reqs) {
      encode_request(req, frames);
      if (first_frame == 0) first_frame = frames.size();
    }
    std::size_t sent = 0;
    try {
      write_frame(frames, &sent);
      break;
    } catch (const NetworkError& e) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (const auto& req : reqs) pending_.erase(req.id);
      }
      if (attempt > 0 || !may_resend(sent, first_frame)) throw;
      retire_connection(epoch, e.what());
    }
  }
  const auto quiet = [&](std::size_t i) {
    return i + 1 < reqs.size() && reqs[i].op == Op::kSet && (reqs[i].b & kSetQuiet) != 0;
  };
  std::vector<Response> out(reqs.size());
  try {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (!quiet(i)) out[i] = await_reply(pending[i], reqs[i].id, reqs[i].op, reply_timeout);
    }
    // Every later request is answered: a quiet set that failed was answered
    // before them (in order), and one without an answer succeeded.
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (!quiet(i)) continue;
      std::lock_guard<std::mutex> lk(pending[i]->mu);
      if (pending[i]->done && !pending[i]->error) {
        out[i] = std::move(pending[i]->response);
        continue;
      }
      if (pending[i]->done) std::rethrow_exception(pending[i]->error);
      out[i].id = reqs[i].id;
      out[i].status = Status::kOk;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& req : reqs) pending_.erase(req.id);  // replies still to come are dropped
    throw;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (std::size_t i = 0; i < reqs.size(); ++i)
      if (quiet(i)) pending_.erase(reqs[i].id);  // never answered: nothing to wait for
  }
  return out;
}

void TcpStore::Impl::retire_connection(std::uint64_t epoch, const std::string& reason) {
  auto done = std::make_shared<std::promise<void>>();
  auto retired = done->get_future();
  asio::post(io_, [this, epoch, reason, done] {
    bool same = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      same = connected_ && connect_epoch_ == epoch;
    }
    if (same) on_broken(reason);
    done->set_value();
  });
  // Bounded: the I/O thread stops during shutdown and would never run this.
  retired.wait_for(std::chrono::seconds(2));
}

void TcpStore::Impl::read_more(std::uint64_t seq) {
  if (rbuf_.size() - rlen_ < kReadChunk / 4) rbuf_.resize(rbuf_.size() + kReadChunk);
  socket_.async_read_some(
      asio::buffer(rbuf_.data() + rlen_, rbuf_.size() - rlen_),
      [this, seq](const boost::system::error_code& ec, std::size_t n) {
        if (seq != attempt_seq_) return;
        if (ec) {
          const auto why =
              ec == asio::error::eof ? std::string("the server closed the connection") : ec.message();
          if (!handshake_done_ && !ever_connected_ && ec == asio::error::eof) {
            return not_a_store(rlen_ == 0
                                   ? "closed the connection without answering the handshake"
                                   : "answered '" + printable_prefix() + "' and closed the connection");
          }
          if (!handshake_done_) return on_attempt_failed(why);
          return on_broken(why);
        }
        rlen_ += n;
        on_bytes(seq);
      });
}

void TcpStore::Impl::on_bytes(std::uint64_t seq) {
  std::size_t pos = 0;
  while (rlen_ - pos >= 4) {
    const auto len = decode_frame_length(std::string_view(rbuf_.data() + pos, 4));
    if (len > limits_.max_frame_bytes) {
      if (!handshake_done_ && !ever_connected_) return not_a_store("answered '" + printable_prefix() + "'");
      return on_broken("protocol error: reply frame of " + std::to_string(len) + " bytes exceeds the limit");
    }
    if (rlen_ - pos - 4 < len) {
      if (rbuf_.size() - pos < len + 4u) rbuf_.resize(pos + len + 4u + kReadChunk);
      break;
    }
    Response resp;
    try {
      resp = decode_response(std::string_view(rbuf_.data() + pos + 4, len), limits_);
    } catch (const ProtocolError& e) {
      if (!handshake_done_ && !ever_connected_) return not_a_store("answered '" + printable_prefix() + "'");
      return on_broken(std::string("protocol error: ") + e.what());
    }
    pos += 4u + len;
    dispatch(std::move(resp));
    if (seq != attempt_seq_) return;  // the reply ended this connection (handshake refused)
  }
  if (pos > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + pos, rlen_ - pos);
    rlen_ -= pos;
  }
  read_more(seq);
}

void TcpStore::Impl::dispatch(Response resp) {
  if (!handshake_done_) return on_handshake_reply(resp);
  std::shared_ptr<PendingCall> pending;
  std::shared_ptr<WatchState> watch;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = pending_.find(resp.id); it != pending_.end()) {
      pending = std::move(it->second);
      pending_.erase(it);
    } else if (auto wit = watches_.find(resp.id); wit != watches_.end()) {
      watch = wit->second;
    }
  }
  if (pending) return pending->complete(std::move(resp));
  if (!watch) return;  // the reply to a call that timed out, or to a cancelled watch
  on_watch_reply(watch, std::move(resp));
}

void TcpStore::Impl::on_broken(const std::string& reason) {
  ++attempt_seq_;
  handshake_done_ = false;
  write_broken_ = true;
  {
    // shutdown() first wakes a writer blocked in poll(); only then can we take
    // write_mu_ and retire the fd.
    if (socket_.is_open()) ::shutdown(socket_.native_handle(), SHUT_RDWR);
    std::lock_guard<std::mutex> lk(write_mu_);
    write_fd_ = -1;
    deferred_.clear();
  }
  boost::system::error_code ignored;
  socket_.close(ignored);

  std::unordered_map<std::uint32_t, std::shared_ptr<PendingCall>> pending;
  std::vector<std::shared_ptr<WatchState>> unacked;
  bool reconnect = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const bool was_connected = connected_;
    connected_ = false;
    pending.swap(pending_);
    for (auto it = watches_.begin(); it != watches_.end();) {
      if (it->second->ack) {
        unacked.push_back(it->second);
        it = watches_.erase(it);
      } else {
        ++it;
      }
    }
    // Watches must resume without waiting for the next call.
    reconnect = was_connected && !watches_.empty() && !stopping_ && !connecting_;
    if (reconnect) connecting_ = true;
  }
  auto error =
      std::make_exception_ptr(NetworkError("connection to store at " + where() + " lost: " + reason));
  for (auto& [id, p] : pending) p->fail(error);
  for (auto& w : unacked) std::exchange(w->ack, nullptr)->fail(error);
  if (reconnect) {
    log::get("store.client")
        ->info("store connection lost, reconnecting endpoint={} reason={}", where(), reason);
    begin_connect();
  }
}

}  // namespace ddp::store
