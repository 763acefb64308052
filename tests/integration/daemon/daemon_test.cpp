#include <signal.h>

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

TEST_CASE_METHOD(DaemonInTempDir, "a get blocked in one connection is released by a set from another") {
  auto waiter = d.client();
  auto setter = d.client();
  waiter->send(make_request(Op::kGet, {"job/ready"}, {}, 0, -1, 7));
  // The blocked get holds nothing up: the same connection still answers a ping.
  CHECK(waiter->call(make_request(Op::kPing)).status == Status::kOk);
  CHECK(setter->call(make_request(Op::kSet, {"job/ready"}, {"yes"})).status == Status::kOk);
  auto got = waiter->recv();
  REQUIRE(got);
  CHECK(got->id == 7);
  CHECK(got->status == Status::kOk);
  REQUIRE(got->items.size() == 1);
  CHECK(got->items[0].value == "yes");
}

TEST_CASE_METHOD(DaemonInTempDir, "wait times out with a timeout status naming the missing key") {
  auto c = d.client();
  c->call(make_request(Op::kSet, {"a"}, {"1"}));
  auto resp = c->call(make_request(Op::kWait, {"a", "never"}, {}, 0, 150));
  CHECK(resp.status == Status::kTimeout);
  CHECK_THAT(resp.message, Catch::Contains("'never'") && Catch::Contains("timed out after 150 ms"));
}

TEST_CASE_METHOD(DaemonInTempDir, "lease expiry deletes its keys and emits watch delete events") {
  auto owner = d.client();
  auto watcher = d.client();
  auto ack = watcher->call(make_request(Op::kWatch, {"nodes/"}, {}, 0, 0, 55));
  REQUIRE(ack.status == Status::kOk);
  auto grant = owner->call(make_request(Op::kLeaseGrant, {}, {}, 0, 200));
  REQUIRE(grant.status == Status::kOk);
  const auto lease = grant.num;
  REQUIRE(owner->call(make_request(Op::kSet, {"nodes/1"}, {"up"}, lease)).status == Status::kOk);
  REQUIRE(owner->call(make_request(Op::kSet, {"other"}, {"x"}, lease)).status == Status::kOk);

  auto put = watcher->recv();
  REQUIRE(put);
  CHECK(put->status == Status::kEvent);
  CHECK(put->id == 55);
  REQUIRE(put->items.size() == 1);
  CHECK(put->items[0].kind == ItemKind::kPut);
  auto del = watcher->recv(5s);
  REQUIRE(del);
  CHECK(del->status == Status::kEvent);
  REQUIRE(del->items.size() == 1);
  CHECK(del->items[0].kind == ItemKind::kDelete);
  CHECK(del->items[0].key == "nodes/1");
  CHECK(del->revision > put->revision);
  CHECK(owner->call(make_request(Op::kTryGet, {"other"})).status == Status::kNotFound);
  CHECK(owner->call(make_request(Op::kLeaseKeepAlive, {}, {}, lease)).status == Status::kLeaseNotFound);
}

TEST_CASE_METHOD(
    DaemonInTempDir,
    "a lease's many deletions reach a delete-runs watch as one item and an old-style watch as one "
    "per key") {
  auto owner = d.client();
  auto packed = d.client();
  auto plain = d.client();
  REQUIRE(packed->call(make_request(Op::kWatch, {"nodes/"}, {}, kWatchDeleteRuns, 0, 61)).status ==
          Status::kOk);
  REQUIRE(plain->call(make_request(Op::kWatch, {"nodes/"}, {}, 0, 0, 62)).status == Status::kOk);
  const auto lease = owner->call(make_request(Op::kLeaseGrant, {}, {}, 0, 60000)).num;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (int i = 0; i < 20; ++i) {
    keys.push_back("nodes/" + std::to_string(i));
    values.push_back("up");
  }
  keys.push_back("nodes/name");
  values.push_back("up");
  REQUIRE(owner->call(make_request(Op::kMultiSet, keys, values, lease)).status == Status::kOk);
  const auto revoked = owner->call(make_request(Op::kLeaseRevoke, {}, {}, lease));
  REQUIRE(revoked.num == 21);
  for (auto* c : {packed.get(), plain.get()}) {
    auto put = c->recv();
    REQUIRE(put);
    CHECK(put->items.size() == 21);  // puts are never packed
  }
  auto del = packed->recv(5s);
  REQUIRE(del);
  CHECK(del->id == 61);
  REQUIRE(del->items.size() == 2);
  CHECK(del->items[0].kind == ItemKind::kDeleteRuns);
  CHECK(del->items[0].key == "nodes/");
  CHECK(del->items[0].value == "0-19");
  CHECK(del->items[1].kind == ItemKind::kDelete);
  CHECK(del->items[1].key == "nodes/name");
  auto old = plain->recv(5s);
  REQUIRE(old);
  CHECK(old->id == 62);
  CHECK(old->revision == del->revision);
  REQUIRE(old->items.size() == 21);
  for (const auto& item : old->items) CHECK(item.kind == ItemKind::kDelete);
  // Replayed from the history, the same revision comes packed the same way.
  auto again = packed->call(make_request(Op::kWatch, {"nodes/"}, {}, kWatchDeleteRuns, del->revision, 63));
  REQUIRE(again.status == Status::kOk);
  auto replay = packed->recv(5s);
  REQUIRE(replay);
  CHECK(replay->id == 63);
  REQUIRE(replay->items.size() == 2);
  CHECK(replay->items[0].value == "0-19");
}

TEST_CASE_METHOD(DaemonInTempDir, "a watch from a list's revision + 1 sees the changes made in between") {
  auto c = d.client();
  c->call(make_request(Op::kSet, {"r/a"}, {"1"}));
  auto listed = c->call(make_request(Op::kList, {"r/"}));
  REQUIRE(listed.items.size() == 1);
  c->call(make_request(Op::kMultiSet, {"r/b", "r/c"}, {"2", "3"}));
  auto ack = c->call(make_request(Op::kWatch, {"r/"}, {}, 0, listed.revision + 1, 9));
  REQUIRE(ack.status == Status::kOk);
  auto ev = c->recv();
  REQUIRE(ev);
  CHECK(ev->status == Status::kEvent);
  CHECK(ev->revision == listed.revision + 1);
  CHECK(ev->items.size() == 2);  // one multi_set, one revision, one frame
  // Cancel ends the watch with a cancelled status.
  auto cancel = c->call(make_request(Op::kCancel, {}, {}, 9));
  CHECK(cancel.num == 1);
}

TEST_CASE("a restart with --data-dir keeps keys, leases and the revision") {
  TempDir dir;
  const auto data = dir / "data";
  ddp::test::fs::create_directory(data);
  std::int64_t before = 0;
  std::int64_t lease = 0;
  {
    Daemon d(dir.path(), {"--data-dir", data.string()});
    auto c = d.client();
    c->call(make_request(Op::kSet, {"k1"}, {"v1"}));
    c->call(make_request(Op::kAdd, {"counter"}, {}, 0, 41));
    lease = c->call(make_request(Op::kLeaseGrant, {}, {}, 0, 60000)).num;
    c->call(make_request(Op::kSet, {"leased"}, {"l"}, lease));
    c->call(make_request(Op::kDelete, {"k1"}));
    c->call(make_request(Op::kSet, {"k2"}, {"v2"}));
    before = c->call(make_request(Op::kPing)).revision;
    d.proc->signal(SIGTERM);
    REQUIRE(d.proc->wait(10s) == 0);
  }
  Daemon d(dir.path(), {"--data-dir", data.string()});
  auto c = d.client();
  CHECK(c->call(make_request(Op::kTryGet, {"k1"})).status == Status::kNotFound);
  auto k2 = c->call(make_request(Op::kTryGet, {"k2"}));
  REQUIRE(k2.items.size() == 1);
  CHECK(k2.items[0].value == "v2");
  CHECK(k2.revision == before);
  CHECK(c->call(make_request(Op::kAdd, {"counter"}, {}, 0, 1)).num == 42);
  CHECK(c->call(make_request(Op::kLeaseKeepAlive, {}, {}, lease)).status == Status::kOk);
  CHECK(c->call(make_request(Op::kTryGet, {"leased"})).status == Status::kOk);
  CHECK(c->call(make_request(Op::kPing)).revision == before + 1);
  // Snapshots hold no watch history: a watch from before the restart is told
  // to list again instead of silently missing events.
  auto ack = c->call(make_request(Op::kWatch, {"k"}, {}, 0, 1, 77));
  CHECK(ack.status == Status::kCompacted);
}

TEST_CASE("a killed daemon loses no acknowledged write and cuts a torn log tail") {
  TempDir dir;
  const auto data = dir / "data";
  ddp::test::fs::create_directory(data);
  {
    Daemon d(dir.path(), {"--data-dir", data.string()});
    auto c = d.client();
    for (int i = 0; i < 50; ++i)
      c->call(make_request(Op::kSet, {std::string("k").append(std::to_string(i))}, {"v"}));
    d.proc->signal(SIGKILL);
    d.proc->wait(10s);
  }
  // A crash mid-write leaves half a record behind.
  {
    std::ofstream log(data / "log", std::ios::binary | std::ios::app);
    log << std::string("\x40\x00\x00\x00\x01\x02", 6);
  }
  Daemon d(dir.path(), {"--data-dir", data.string()});
  auto c = d.client();
  CHECK(c->call(make_request(Op::kNumKeys)).num == 50);
  CHECK(c->call(make_request(Op::kPing)).revision == 50);
  CHECK_THAT(d.proc->err(), Catch::Contains("torn tail"));
}

TEST_CASE_METHOD(DaemonInTempDir,
                 "SIGTERM while waiters are pending answers them shutting-down and exits 0") {
  auto a = d.client();
  auto b = d.client();
  a->send(make_request(Op::kGet, {"never"}, {}, 0, -1, 1));
  b->send(make_request(Op::kWait, {"never", "either"}, {}, 0, 60000, 2));
  // Answers come after the requests sent before them are registered.
  REQUIRE(a->call(make_request(Op::kPing)).status == Status::kOk);
  REQUIRE(b->call(make_request(Op::kWatch, {"x/"}, {}, 0, 0, 3)).status == Status::kOk);
  d.proc->signal(SIGTERM);
  auto ra = a->recv();
  REQUIRE(ra);
  CHECK(ra->id == 1);
  CHECK(ra->status == Status::kShuttingDown);
  std::set<std::uint32_t> ids;
  for (int i = 0; i < 2; ++i) {
    auto rb = b->recv();
    REQUIRE(rb);
    CHECK(rb->status == Status::kShuttingDown);
    ids.insert(rb->id);
  }
  CHECK(ids == std::set<std::uint32_t>{2, 3});
  CHECK(d.proc->wait(10s) == 0);
  CHECK_THAT(d.proc->err(), Catch::Contains("stopped"));
}

TEST_CASE_METHOD(DaemonInTempDir, "16 clients hammering set/get/add leave an exact counter") {
  constexpr int kClients = 16;
  constexpr int kOps = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        RawClient c(d.port);
        if (c.handshake() != Status::kOk) ++failures;
        for (int i = 0; i < kOps; ++i) {
          const auto key =
              std::string("c").append(std::to_string(t)).append("/").append(std::to_string(i % 10));
          if (c.call(make_request(Op::kSet, {key}, {std::to_string(i)})).status != Status::kOk) ++failures;
          auto got = c.call(make_request(Op::kGet, {key}, {}, 0, 1000));
          if (got.status != Status::kOk || got.items.at(0).value != std::to_string(i)) ++failures;
          if (c.call(make_request(Op::kAdd, {"total"}, {}, 0, 1)).status != Status::kOk) ++failures;
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  auto c = d.client();
  auto total = c->call(make_request(Op::kTryGet, {"total"}));
  REQUIRE(total.items.size() == 1);
  CHECK(total.items[0].value == std::to_string(kClients * kOps));
}

TEST_CASE_METHOD(
    DaemonInTempDir,
    "a barrier releases its arrivals once the world size has arrived, and counts one that timed out") {
  auto a = d.client();
  auto b = d.client();
  auto c = d.client();
  a->send(make_request(Op::kBarrier, {"job/b"}, {}, 3, -1, 7));
  // The parked arrival holds nothing up on its connection.
  CHECK(a->call(make_request(Op::kPing)).status == Status::kOk);
  auto late = b->call(make_request(Op::kBarrier, {"job/b"}, {}, 3, 200));
  CHECK(late.status == Status::kTimeout);
  CHECK_THAT(late.message,
             Catch::Contains("barrier on 'job/b' timed out after 200 ms; fewer than 3 arrived"));
  // The timed-out arrival counted: the third completes the barrier at once.
  auto last = c->call(make_request(Op::kBarrier, {"job/b"}, {}, 3, -1));
  CHECK(last.status == Status::kOk);
  CHECK(last.num == 3);
  auto first = a->recv();
  REQUIRE(first);
  CHECK(first->id == 7);
  CHECK(first->status == Status::kOk);
  // The counter is a key like add's, and never resets.
  auto counter = c->call(make_request(Op::kGet, {"job/b"}, {}, 0, 0));
  REQUIRE(counter.items.size() == 1);
  CHECK(counter.items[0].value == "3");
  CHECK(c->call(make_request(Op::kBarrier, {"job/b"}, {}, 2, -1)).num == 4);
  // A counter that is not a number is refused, as an add on it.
  CHECK(c->call(make_request(Op::kSet, {"job/text"}, {"x"})).status == Status::kOk);
  CHECK(c->call(make_request(Op::kBarrier, {"job/text"}, {}, 1, -1)).status != Status::kOk);
}
