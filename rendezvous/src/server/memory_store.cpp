#include "ddp/store/memory_store.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "store_core.hpp"
#include "watch_hub.hpp"

namespace ddp::store {

using server::StoreCore;
using server::WatchHub;
using server::WatchId;

namespace {

void throw_on_error(const Response& resp, Op op, const std::string& key) {
  if (resp.status == Status::kOk) return;
  std::string msg =
      std::string(op_name(op)) + (key.empty() ? "" : " '" + key + "'") + ": " + status_name(resp.status);
  if (!resp.message.empty()) msg += ": " + resp.message;
  throw StoreError(msg);
}

}  // namespace

class MemoryStore::Impl {
 public:
  Impl() {
    core_.set_sink([this](const server::Mutation& m) { on_commit(m); });
    thread_ = std::thread([this] { background(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    changed_.notify_all();
    thread_.join();
  }

  Response execute(const Request& req) {
    std::lock_guard<std::mutex> lk(mu_);
    return core_.execute(req, Clock::now());
  }

  Response execute_checked(Request req) {
    const auto op = req.op;
    auto resp = execute(req);
    throw_on_error(resp, op, req.keys.empty() ? std::string() : req.keys[0]);
    return resp;
  }

  // Blocks until `req` (a kGet or kWait) stops answering kNotFound.
  Response block(const Request& req, std::chrono::milliseconds timeout, const std::string& what) {
    // A timeout past the clock's range is forever too.
    const auto deadline = timeout.count() < 0 ? Deadline::never() : Deadline::after(timeout);
    const bool forever = deadline.is_never();
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      auto resp = core_.execute(req, Clock::now());
      if (resp.status != Status::kNotFound) return resp;
      if (stop_) throw StoreError(what + ": store is shutting down");
      if (forever) {
        changed_.wait(lk);
      } else if (changed_.wait_until(lk, deadline.at()) == std::cv_status::timeout && deadline.expired()) {
        throw TimeoutError(what + ": timed out after " + std::to_string(timeout.count()) + " ms");
      }
    }
  }

  struct Watch {
    WatchCallback on_event;
    WatchErrorCallback on_error;
    std::atomic<bool> cancelled{false};  // read by the delivery thread unlocked
  };

  WatchId add_watch(const std::string& prefix, Revision from, WatchCallback on_event,
                    WatchErrorCallback on_error) {
    std::lock_guard<std::mutex> lk(mu_);
    const auto id = next_watch_++;
    auto w = std::make_shared<Watch>();
    w->on_event = std::move(on_event);
    w->on_error = std::move(on_error);
    watches_[id] = w;
    if (from > 0) {
      auto past = core_.history_since(prefix, from);
      if (!past) {
        queue_.push_back({id,
                          w,
                          {},
                          "watch of '" + prefix + "' from revision " + std::to_string(from) +
                              ": revision compacted; list again and watch from its revision + 1"});
        watches_.erase(id);
        wake_.notify_all();
        return id;
      }
      if (!past->empty()) queue_.push_back({id, w, std::move(*past), std::nullopt});
    }
    // Registered under the same lock as the replay: no commit can fall between.
    hub_.add(id, prefix);
    wake_.notify_all();
    return id;
  }

  void cancel_watch(WatchId id) {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = watches_.find(id);
    if (it != watches_.end()) {
      it->second->cancelled = true;
      watches_.erase(it);
    }
    hub_.remove(id);
    // A callback must not run after cancel() returns, unless cancel() is called
    // from that very callback.
    if (std::this_thread::get_id() != thread_.get_id()) idle_.wait(lk, [&] { return delivering_ != id; });
  }

 private:
  struct Delivery {
    WatchId id;
    std::shared_ptr<Watch> watch;
    std::vector<WatchEvent> events;
    std::optional<std::string> error;
  };

  void on_commit(const server::Mutation& m) {
    for (auto& [id, events] : hub_.route(server::events_of(m))) {
      auto it = watches_.find(id);
      if (it != watches_.end()) queue_.push_back({id, it->second, std::move(events), std::nullopt});
    }
    changed_.notify_all();
    wake_.notify_all();
  }

  void background() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      core_.expire_leases(Clock::now());
      if (!queue_.empty()) {
        auto d = std::move(queue_.front());
        queue_.pop_front();
        if (d.watch->cancelled) continue;
        delivering_ = d.id;
        lk.unlock();
        try {
          if (d.error) {
            if (d.watch->on_error) d.watch->on_error(*d.error);
          } else {
            for (const auto& e : d.events) {
              if (d.watch->cancelled) break;
              d.watch->on_event(e);
            }
          }
        } catch (...) {
          // A throwing callback must not kill the store's thread; the watch goes on.
        }
        lk.lock();
        delivering_ = 0;
        idle_.notify_all();
        continue;
      }
      if (auto next = core_.next_lease_expiry())
        wake_.wait_until(lk, *next);
      else
        wake_.wait(lk);
    }
  }

  std::mutex mu_;
  std::condition_variable changed_;  // any commit: blocked get/wait re-check
  std::condition_variable wake_;     // background thread: deliveries or a lease due
  std::condition_variable idle_;     // a callback returned
  StoreCore core_;
  WatchHub hub_;
  std::unordered_map<WatchId, std::shared_ptr<Watch>> watches_;
  std::deque<Delivery> queue_;
  WatchId next_watch_ = 1;
  WatchId delivering_ = 0;
  bool stop_ = false;
  std::thread thread_;  // started in the constructor body, once the sink is in place
};

namespace {

Request make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
             std::int64_t a = 0, std::int64_t b = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.a = a;
  r.b = b;
  return r;
}

}  // namespace

MemoryStore::MemoryStore() : impl_(std::make_shared<Impl>()) {}
MemoryStore::~MemoryStore() = default;

Revision MemoryStore::set(const std::string& key, std::string_view value, LeaseId lease) {
  return impl_->execute_checked(make(Op::kSet, {key}, {std::string(value)}, lease)).revision;
}

std::string MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto resp = impl_->block(make(Op::kGet, {key}), timeout, "get '" + key + "'");
  return std::move(resp.items.at(0).value);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key) {
  auto resp = impl_->execute(make(Op::kTryGet, {key}));
  if (resp.status == Status::kNotFound) return std::nullopt;
  throw_on_error(resp, Op::kTryGet, key);
  return std::move(resp.items.at(0).value);
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  return impl_->execute_checked(make(Op::kAdd, {key}, {}, 0, delta)).num;
}

std::string MemoryStore::compare_set(const std::string& key, std::string_view expected,
                                     std::string_view desired, LeaseId lease) {
  auto resp = impl_->execute_checked(
      make(Op::kCompareSet, {key}, {std::string(expected), std::string(desired)}, lease));
  return std::move(resp.items.at(0).value);
}

bool MemoryStore::remove(const std::string& key) {
  return impl_->execute_checked(make(Op::kDelete, {key})).num > 0;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  return impl_->execute_checked(make(Op::kCheck, keys)).num == 1;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string what = "wait for " + std::to_string(keys.size()) + " key(s)";
  if (!keys.empty()) what += " ('" + keys[0] + "'" + (keys.size() > 1 ? ", ...)" : ")");
  impl_->block(make(Op::kWait, keys), timeout, what);
}

std::vector<std::optional<std::string>> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  auto resp = impl_->execute_checked(make(Op::kMultiGet, keys));
  std::vector<std::optional<std::string>> out;
  out.reserve(resp.items.size());
  for (auto& item : resp.items) {
    if (item.kind == ItemKind::kPresent)
      out.emplace_back(std::move(item.value));
    else
      out.emplace_back(std::nullopt);
  }
  return out;
}

Revision MemoryStore::multi_set(const std::vector<std::pair<std::string, std::string>>& kvs, LeaseId lease) {
  Request req = make(Op::kMultiSet, {}, {}, lease);
  for (const auto& [k, v] : kvs) {
    req.keys.push_back(k);
    req.values.push_back(v);
  }
  return impl_->execute_checked(std::move(req)).revision;
}

std::int64_t MemoryStore::append(const std::string& key, std::string_view value) {
  return impl_->execute_checked(make(Op::kAppend, {key}, {std::string(value)})).num;
}

std::int64_t MemoryStore::num_keys() { return impl_->execute_checked(make(Op::kNumKeys)).num; }

ListResult MemoryStore::list(const std::string& prefix) {
  auto resp = impl_->execute_checked(make(Op::kList, {prefix}));
  ListResult out;
  out.revision = resp.revision;
  out.kvs.reserve(resp.items.size());
  for (auto& item : resp.items)
    out.kvs.push_back({std::move(item.key), std::move(item.value), item.revision});
  return out;
}

LeaseId MemoryStore::lease_grant(std::chrono::milliseconds ttl) {
  return impl_->execute_checked(make(Op::kLeaseGrant, {}, {}, 0, ttl.count())).num;
}

void MemoryStore::lease_keepalive(LeaseId lease) {
  impl_->execute_checked(make(Op::kLeaseKeepAlive, {}, {}, lease));
}

void MemoryStore::lease_revoke(LeaseId lease) {
  impl_->execute_checked(make(Op::kLeaseRevoke, {}, {}, lease));
}

std::unique_ptr<WatchHandle> MemoryStore::watch(const std::string& prefix, Revision from_revision,
                                                WatchCallback on_event, WatchErrorCallback on_error) {
  const auto id = impl_->add_watch(prefix, from_revision, std::move(on_event), std::move(on_error));
  // Weak: a handle that outlives the store cancels nothing.
  return make_watch_handle([weak = std::weak_ptr<Impl>(impl_), id] {
    if (auto impl = weak.lock()) impl->cancel_watch(id);
  });
}

}  // namespace ddp::store
