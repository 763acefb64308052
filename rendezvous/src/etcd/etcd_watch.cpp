#include "etcd_watch.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "etcd_codec.hpp"

namespace ddp::store::etcd {

using nlohmann::json;

namespace {
constexpr Millis kBackoffBase{50};
constexpr Millis kBackoffCap{1000};
}  // namespace

struct EtcdWatch::State {
  std::shared_ptr<EtcdClient> client;
  std::string key;
  std::string range_end;
  std::size_t strip = 0;
  WatchCallback on_event;
  WatchErrorCallback on_error;
  // Revision to (re)start from; 0 until the first creation when asked for "from now".
  Revision next_start = 0;
  bool established = false;  // the current attempt got etcd's "created"

  enum class Phase { kStarting, kRunning, kFailed, kDone };
  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kStarting;  // guarded by mu
  bool cancelled = false;          // guarded by mu
  HttpConnection* conn = nullptr;  // guarded by mu: what cancel() interrupts
  std::exception_ptr start_error;  // guarded by mu

  std::string describe() const { return "watch of '" + key.substr(std::min(strip, key.size())) + "'"; }

  bool is_cancelled() {
    std::lock_guard lock(mu);
    return cancelled;
  }

  // Ends the watch for good: before it started, the constructor rethrows;
  // afterwards on_error hears about it (unless the owner cancelled).
  void finish(std::exception_ptr error, const std::string& reason) {
    std::unique_lock lock(mu);
    if (phase == Phase::kStarting) {
      start_error = error ? std::move(error) : std::make_exception_ptr(StoreError(reason));
      phase = Phase::kFailed;
      cv.notify_all();
      return;
    }
    phase = Phase::kDone;
    if (cancelled) return;
    lock.unlock();
    log::get("store.etcd")->warn("etcd watch ended key={} reason=\"{}\"", key, reason);
    if (on_error) on_error(reason);
  }

  void mark_created(Revision header_revision) {
    established = true;
    if (next_start == 0) next_start = header_revision + 1;
    std::lock_guard lock(mu);
    if (phase == Phase::kStarting) phase = Phase::kRunning;
    cv.notify_all();
  }

  // One connection's life. Returns when the watch is over (cancelled, or
  // ended by etcd); throws EndpointFailure when another member should be tried.
  void session(std::size_t index) {
    auto owned = client->connect(index);
    {
      std::lock_guard lock(mu);
      if (cancelled) return;
      conn = owned.get();
    }
    struct Release {
      State& st;
      ~Release() {
        std::lock_guard lock(st.mu);
        st.conn = nullptr;
      }
    } release{*this};

    json create = {{"key", base64_encode(key)}};
    if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
    if (next_start > 0) create["start_revision"] = std::to_string(next_start);
    const json request = {{"create_request", create}};
    const auto where = owned->where();
    const int status =
        owned->open_stream("/v3/watch", request.dump(), Deadline::after(client->options().request_timeout));
    if (status >= 500)
      throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + " answered HTTP " +
                                                                std::to_string(status) + " to /v3/watch");
    if (status != 200)
      throw ConfigError(where + " is not an etcd v3 endpoint (HTTP " + std::to_string(status) +
                        " on /v3/watch)");

    for (;;) {
      const auto line = owned->read_line();
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      WatchMessage m;
      try {
        m = decode_watch_message(line, strip);
      } catch (const ProtocolError& e) {
        throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + " " + e.what());
      }
      if (!m.error.empty())
        throw EndpointFailure(EndpointFailure::Kind::kBroken,
                              "etcd at " + where + " broke the watch stream: " + m.error);
      if (!m.has_result) continue;
      if (m.created) mark_created(m.header_revision);
      if (m.compact_revision > 0) {
        const auto why = describe() + " from revision " + std::to_string(next_start) +
                         " failed: etcd compacted its history up to revision " +
                         std::to_string(m.compact_revision);
        finish(std::make_exception_ptr(CompactedError(why)), why);
        return;
      }
      if (m.canceled) {
        finish(nullptr, "etcd cancelled the " + describe() + ": " +
                            (m.cancel_reason.empty() ? std::string("no reason") : m.cancel_reason));
        return;
      }
      for (const auto& out : m.events) {
        if (is_cancelled()) return;
        try {
          on_event(out);
        } catch (const std::exception& e) {
          log::get("store.etcd")->warn("etcd watch callback threw key={} error=\"{}\"", out.key, e.what());
        }
        next_start = std::max(next_start, out.revision + 1);
      }
    }
  }

  void run() {
    const auto n = client->endpoint_count();
    std::size_t index = client->preferred();
    Backoff backoff(kBackoffBase, kBackoffCap);
    std::vector<std::string> failures(n);
    auto give_up = Deadline::after(client->options().connect_timeout);
    std::size_t tried = 0;
    for (;;) {
      established = false;
      try {
        try {
          session(index);
          return;
        } catch (const EndpointFailure& f) {
          client->diagnose(index, f);
          failures[index] = f.what();
        }
      } catch (const Error& e) {
        // ConfigError (not etcd, TLS mismatch), ProtocolError: another member will not help.
        finish(std::current_exception(), e.what());
        return;
      }
      if (is_cancelled()) return;
      if (established) {
        // The connection worked for a while: a fresh outage starts now.
        log::get("store.etcd")
            ->info("etcd watch reconnecting key={} from_revision={} reason=\"{}\"", key, next_start,
                   failures[index]);
        give_up = Deadline::after(client->options().connect_timeout);
        backoff.reset();
        tried = 0;
      }
      index = (index + 1) % n;
      if (++tried < n) continue;
      tried = 0;
      if (give_up.expired()) {
        try {
          client->throw_unreachable(failures);
        } catch (const NetworkError& e) {
          finish(std::current_exception(), describe() + " lost: " + e.what());
        }
        return;
      }
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::min(backoff.next(), give_up.remaining()), [&] { return cancelled; });
      if (cancelled) return;
    }
  }
};

EtcdWatch::EtcdWatch(std::shared_ptr<EtcdClient> client, std::string key, std::string range_end,
                     Revision from_revision, std::size_t strip, WatchCallback on_event,
                     WatchErrorCallback on_error)
    : state_(std::make_shared<State>()) {
  auto& st = *state_;
  st.client = std::move(client);
  st.key = std::move(key);
  st.range_end = std::move(range_end);
  st.strip = strip;
  st.on_event = std::move(on_event);
  st.on_error = std::move(on_error);
  st.next_start = std::max<Revision>(from_revision, 0);
  thread_ = std::thread([state = state_] { state->run(); });
  std::unique_lock lock(st.mu);
  st.cv.wait(lock, [&] { return st.phase != State::Phase::kStarting; });
  if (st.phase == State::Phase::kFailed) {
    auto error = st.start_error;
    lock.unlock();
    thread_.join();
    std::rethrow_exception(error);
  }
}

EtcdWatch::~EtcdWatch() { cancel(); }

void EtcdWatch::cancel() {
  {
    std::lock_guard lock(state_->mu);
    state_->cancelled = true;
    if (state_->conn != nullptr) state_->conn->interrupt();
  }
  state_->cv.notify_all();
  if (!thread_.joinable()) return;
  if (std::this_thread::get_id() == thread_.get_id())
    thread_.detach();
  else
    thread_.join();
}

}  // namespace ddp::store::etcd
