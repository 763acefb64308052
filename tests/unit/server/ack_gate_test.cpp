#include "ack_gate.hpp"

#include <catch2/catch.hpp>

using ddp::store::server::AckGate;
using ddp::store::server::AckMark;

TEST_CASE("ack gate: bytes queued while a record is not on disk wait for it, the others do not") {
  AckGate gate;
  std::deque<AckMark> marks;
  gate.mark(marks, 0, 10);  // nothing appended yet: nothing waits
  CHECK(marks.empty());
  CHECK(gate.writable(marks, 10) == 10);

  gate.appended(1);  // a write: its reply (bytes 10..20) waits for record 1
  gate.mark(marks, 10, 20);
  gate.mark(marks, 20, 25);  // a read's reply in the same turn waits too
  REQUIRE(marks.size() == 1);
  CHECK(gate.writable(marks, 25) == 10);

  gate.appended(2);  // while record 1 syncs, a second write
  gate.mark(marks, 25, 40);
  CHECK(gate.writable(marks, 40) == 10);

  gate.durable(1);  // the first sync ends: up to the second write's reply
  CHECK(gate.writable(marks, 40) == 25);
  AckGate::consumed(marks, 25);
  REQUIRE(marks.size() == 1);
  CHECK(marks.front().begin == 0);
  CHECK(marks.front().end == 15);
  CHECK(gate.writable(marks, 15) == 0);

  gate.durable(2);
  CHECK(gate.writable(marks, 15) == 15);
  AckGate::consumed(marks, 15);
  CHECK(marks.empty());
  // The disk caught up: nothing waits any more.
  gate.mark(marks, 0, 5);
  CHECK(marks.empty());
}

TEST_CASE("ack gate: durable and appended only grow, a late sync does not take them back") {
  AckGate gate;
  gate.appended(5);
  gate.durable(5);  // a compaction made everything durable
  gate.durable(3);  // then an older sync ends
  CHECK(gate.durable() == 5);
  gate.appended(4);
  CHECK(gate.appended() == 5);
}
