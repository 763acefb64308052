// One etcd watch (POST /v3/watch, a chunked stream of JSON lines) on its own
// connection and thread, resumed on another member after a broken connection.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "ddp/store/store.hpp"
#include "etcd_client.hpp"

namespace ddp::store::etcd {

class EtcdWatch final : public WatchHandle {
 public:
  // Watches [key, range_end) (range_end empty: only `key`) from `from_revision`
  // (0: changes after the watch is created). Event keys lose their first
  // `strip` bytes (the store's prefix). Returns once etcd confirmed the watch,
  // so every change made after the constructor returns is delivered; throws
  // NetworkError/ConfigError like a request when no member accepts it.
  // Reconnects for up to connect_timeout per outage, resuming from the last
  // delivered revision + 1; then, or when etcd compacted the needed history,
  // on_error is called once and no events follow.
  EtcdWatch(std::shared_ptr<EtcdClient> client, std::string key, std::string range_end,
            Revision from_revision, std::size_t strip, WatchCallback on_event, WatchErrorCallback on_error);
  // Cancels and joins the thread (detaches it when called from a callback).
  ~EtcdWatch() override;
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  void cancel() override;

  struct State;  // defined in the .cpp, shared with the watch thread

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace ddp::store::etcd
