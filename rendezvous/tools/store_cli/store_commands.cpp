#include "store_commands.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::store_cli {

namespace {

using std::chrono::milliseconds;

milliseconds to_ms(const std::optional<double>& seconds) {
  if (!seconds) return store::kNoTimeout;
  return milliseconds(static_cast<std::int64_t>(*seconds * 1000.0));
}

void print_value(const std::string& value) {
  std::fwrite(value.data(), 1, value.size(), stdout);
  std::fputc('\n', stdout);
}

int watch(store::TcpStore& store, const Command& cmd) {
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t seen = 0;
  std::optional<std::string> failure;
  auto handle = store.watch(
      cmd.args.at(0), cmd.from_revision,
      [&](const store::WatchEvent& ev) {
        if (ev.type == store::EventType::kPut) {
          std::printf("PUT %s %s\n", ev.key.c_str(), ev.value.c_str());
        } else {
          std::printf("DELETE %s\n", ev.key.c_str());
        }
        std::fflush(stdout);  // a watcher reads events as they happen
        std::lock_guard<std::mutex> lk(mu);
        ++seen;
        cv.notify_one();
      },
      [&](const std::string& reason) {
        std::lock_guard<std::mutex> lk(mu);
        failure = reason;
        cv.notify_one();
      });
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return failure || (cmd.count > 0 && seen >= cmd.count); });
  lk.unlock();
  handle.reset();
  if (failure) throw NetworkError(*failure);
  return kExitOk;
}

}  // namespace

int run_command(store::TcpStore& store, const Command& cmd) {
  const auto& a = cmd.args;
  const auto& n = cmd.name;
  if (n == "set") {
    store.set(a.at(0), a.at(1));
    return kExitOk;
  }
  if (n == "get") {
    // Without --timeout, get answers at once: an operator asks what is there now.
    if (!cmd.wait_seconds) {
      auto v = store.try_get(a.at(0));
      if (!v) {
        std::fprintf(stderr, "ddp-store: key '%s' not found\n", a.at(0).c_str());
        return kExitNotFound;
      }
      print_value(*v);
      return kExitOk;
    }
    print_value(store.get(a.at(0), to_ms(cmd.wait_seconds)));
    return kExitOk;
  }
  if (n == "add") {
    std::printf("%lld\n", static_cast<long long>(store.add(
                              a.at(0), parse_int_or_throw<std::int64_t>(a.at(1), "add N", "an integer"))));
    return kExitOk;
  }
  if (n == "cas") {
    const auto after = store.compare_set(a.at(0), a.at(1), a.at(2));
    print_value(after);
    return after == a.at(2) ? kExitOk : kExitNotFound;
  }
  if (n == "del") {
    if (store.remove(a.at(0))) return kExitOk;
    std::fprintf(stderr, "ddp-store: key '%s' not found\n", a.at(0).c_str());
    return kExitNotFound;
  }
  if (n == "list") {
    for (const auto& kv : store.list(a.empty() ? std::string() : a.at(0)).kvs) {
      std::printf("%s\t%s\n", kv.key.c_str(), kv.value.c_str());
    }
    return kExitOk;
  }
  if (n == "watch") return watch(store, cmd);
  if (n == "wait") {
    store.wait(a, to_ms(cmd.wait_seconds));
    return kExitOk;
  }
  if (n == "stat") {
    for (const auto& [name, value] : store.stat()) std::printf("%s %s\n", name.c_str(), value.c_str());
    return kExitOk;
  }
  throw ConfigError("unknown command '" + n + "'; run 'ddp-store --help'");
}

}  // namespace ddp::store_cli
