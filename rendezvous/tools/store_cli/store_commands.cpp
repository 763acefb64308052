#include "store_commands.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/common/printable.hpp"

namespace ddp::store_cli {

namespace {

using std::chrono::milliseconds;

milliseconds to_ms(const std::optional<double>& seconds) {
  if (!seconds) return store::kNoTimeout;
  return milliseconds(static_cast<std::int64_t>(*seconds * 1000.0));
}

// One value on its own: newlines and tabs stay, so a multi-line value reads as one.
void print_value(const std::string& value, bool escape) {
  const std::string shown = escape ? printable(value, Newlines::kKeep) : value;
  std::fwrite(shown.data(), 1, shown.size(), stdout);
  std::fputc('\n', stdout);
}

// A key or value in a line of several (list, watch, stat): escaped, nothing
// in it can start another line.
std::string field(const std::string& text, bool escape) { return escape ? printable(text) : text; }

void print_line(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
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
          print_line("PUT " + field(ev.key, cmd.escape) + " " + field(ev.value, cmd.escape));
        } else {
          print_line("DELETE " + field(ev.key, cmd.escape));
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
        std::fprintf(stderr, "ddp-store: key '%s' not found\n", printable(a.at(0)).c_str());
        return kExitNotFound;
      }
      print_value(*v, cmd.escape);
      return kExitOk;
    }
    print_value(store.get(a.at(0), to_ms(cmd.wait_seconds)), cmd.escape);
    return kExitOk;
  }
  if (n == "add") {
    std::printf("%lld\n", static_cast<long long>(store.add(
                              a.at(0), parse_int_or_throw<std::int64_t>(a.at(1), "add N", "an integer"))));
    return kExitOk;
  }
  if (n == "cas") {
    const auto after = store.compare_set(a.at(0), a.at(1), a.at(2));
    print_value(after, cmd.escape);
    return after == a.at(2) ? kExitOk : kExitNotFound;
  }
  if (n == "del") {
    if (store.remove(a.at(0))) return kExitOk;
    std::fprintf(stderr, "ddp-store: key '%s' not found\n", printable(a.at(0)).c_str());
    return kExitNotFound;
  }
  if (n == "list") {
    for (const auto& kv : store.list(a.empty() ? std::string() : a.at(0)).kvs) {
      print_line(field(kv.key, cmd.escape) + "\t" + field(kv.value, cmd.escape));
    }
    return kExitOk;
  }
  if (n == "watch") return watch(store, cmd);
  if (n == "wait") {
    store.wait(a, to_ms(cmd.wait_seconds));
    return kExitOk;
  }
  if (n == "stat") {
    for (const auto& [name, value] : store.stat()) {
      print_line(field(name, cmd.escape) + " " + field(value, cmd.escape));
    }
    return kExitOk;
  }
  throw ConfigError("unknown command '" + n + "'; run 'ddp-store --help'");
}

}  // namespace ddp::store_cli
