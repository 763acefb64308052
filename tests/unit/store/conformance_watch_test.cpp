// Store conformance, watch part: ordering, resumption from a listing, cancel.
#include <catch2/catch.hpp>
#include <mutex>
#include <set>
#include <vector>

#include "store_backends.hpp"
#include "test_support.hpp"
#include "watch_checks.hpp"

using namespace std::chrono_literals;
using namespace ddp::store;
using ddp::test::check_put_put_delete;

// Another target may run these scenarios on its own backends (the etcd tests do).
#ifndef STORE_BACKENDS
#define STORE_BACKENDS ddp::test::MemoryBackend, ddp::test::TcpBackend
#endif

namespace {

// Collects events from a callback thread for the test thread.
class Recorder {
 public:
  ddp::store::WatchCallback callback() {
    return [this](const WatchEvent& ev) {
      std::lock_guard<std::mutex> lk(mu_);
      events_.push_back(ev);
    };
  }
  std::vector<WatchEvent> events() {
    std::lock_guard<std::mutex> lk(mu_);
    return events_;
  }
  bool wait_for(std::size_t n) {
    return ddp::test::wait_until([&] { return events().size() >= n; }, 5s);
  }

 private:
  std::mutex mu_;
  std::vector<WatchEvent> events_;
};

}  // namespace

TEMPLATE_TEST_CASE("watch streams puts and deletes under its prefix in order", "[conformance]",
                   STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  Recorder rec;
  auto handle = s.watch("w/", 0, rec.callback());
  const auto r1 = s.set("w/a", "1");
  s.set("elsewhere", "x");
  const auto r2 = s.set("w/b", "2");
  s.remove("w/a");
  const bool all = rec.wait_for(3);
  for (const auto& e : rec.events()) UNSCOPED_INFO("event " << e.key << " rev " << e.revision);
  UNSCOPED_INFO("r1 " << r1 << " r2 " << r2);
  REQUIRE(all);
  check_put_put_delete(rec.events(), r1, r2);
}

TEMPLATE_TEST_CASE("a watch from list().revision + 1 misses nothing", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  s.set("r/1", "a");
  s.set("r/2", "b");
  const auto listed = s.list("r/");
  REQUIRE(listed.kvs.size() == 2);
  // Changes between the read and the watch must still arrive.
  s.set("r/3", "c");
  s.remove("r/1");
  Recorder rec;
  auto handle = s.watch("r/", listed.revision + 1, rec.callback());
  s.set("r/4", "d");
  REQUIRE(rec.wait_for(3));
  const auto ev = rec.events();
  REQUIRE(ev.size() == 3);
  CHECK(ev[0].key == "r/3");
  CHECK(ev[1].type == EventType::kDelete);
  CHECK(ev[1].key == "r/1");
  CHECK(ev[2].key == "r/4");
}

TEMPLATE_TEST_CASE("a cancelled watch receives no more events", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  Recorder cancelled;
  Recorder witness;
  auto h1 = s.watch("c/", 0, cancelled.callback());
  auto h2 = s.watch("c/", 0, witness.callback());
  s.set("c/1", "x");
  REQUIRE(cancelled.wait_for(1));
  h1->cancel();
  s.set("c/2", "y");
  // The witness seeing c/2 means the store has delivered it wherever it would.
  REQUIRE(witness.wait_for(2));
  CHECK(cancelled.events().size() == 1);
  h2.reset();  // destroying the handle cancels too
  s.set("c/3", "z");
  CHECK(witness.events().size() == 2);
}

TEMPLATE_TEST_CASE("watch_all starts every watch, each from its own revision, before it returns",
                   "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  const auto from = s.set("x/1", "a");
  s.set("y/1", "b");
  Recorder xs;
  Recorder ys;
  std::vector<ddp::store::WatchSpec> specs;
  specs.push_back(ddp::store::WatchSpec{"x/", from, xs.callback(), {}});  // replays x/1
  specs.push_back(ddp::store::WatchSpec{"y/", 0, ys.callback(), {}});     // only what comes next
  auto handles = s.watch_all(std::move(specs));
  REQUIRE(handles.size() == 2);
  s.set("y/2", "c");
  s.set("x/2", "d");
  REQUIRE(xs.wait_for(2));
  REQUIRE(ys.wait_for(1));
  CHECK(xs.events()[0].key == "x/1");
  CHECK(xs.events()[1].key == "x/2");
  CHECK(ys.events().size() == 1);
  CHECK(ys.events()[0].key == "y/2");
}

TEMPLATE_TEST_CASE("a lease revoke that deletes many keys reaches a watcher as one delete event per key",
                   "[conformance]", STORE_BACKENDS) {
  // As a mass lease expiry reaches a round's node/ watchers: one revision, every key.
  TestType backend;
  Store& s = backend.store();
  const auto lease = s.lease_grant(60s);
  std::set<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.insert("m/node/" + std::to_string(i));
  keys.insert("m/node/x");
  for (const auto& k : keys) s.set(k, "up", lease);
  Recorder live;
  auto h1 = s.watch("m/", 0, live.callback());
  const auto before = s.set("m/mark", "1");
  s.lease_revoke(lease);
  const auto after = s.set("m/mark", "2");
  REQUIRE(live.wait_for(keys.size() + 2));
  Recorder replayed;  // the same revisions again, from the history
  auto h2 = s.watch("m/", before + 1, replayed.callback());
  REQUIRE(replayed.wait_for(keys.size() + 1));
  for (auto* rec : {&live, &replayed}) {
    auto events = rec->events();
    if (rec == &live) events.erase(events.begin());  // the first mark
    REQUIRE(events.size() == keys.size() + 1);
    std::set<std::string> deleted;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      CHECK(events[i].type == EventType::kDelete);
      CHECK(events[i].revision == before + 1);
      deleted.insert(events[i].key);
    }
    CHECK(deleted == keys);
    CHECK(events.back().key == "m/mark");
    CHECK(events.back().revision == after);
  }
}
