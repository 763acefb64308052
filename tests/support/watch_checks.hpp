// The watch scenario that the Store conformance suite and the etcd tests both
// run, and what its watcher must see: one place for the expectation, so the
// backends are held to the same one.
#pragma once

#include <catch2/catch.hpp>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::test {

// The events of a watch on "w/" after: set w/a = 1 (revision r1), a set outside
// the prefix, set w/b (r2), remove w/a. The key outside is not seen, and the
// events come in revision order with the store's own revisions.
inline void check_put_put_delete(const std::vector<store::WatchEvent>& ev, store::Revision r1,
                                 store::Revision r2) {
  REQUIRE(ev.size() == 3);
  CHECK(ev[0].type == store::EventType::kPut);
  CHECK(ev[0].key == "w/a");
  CHECK(ev[0].value == "1");
  CHECK(ev[0].revision == r1);
  CHECK(ev[1].key == "w/b");
  CHECK(ev[1].revision == r2);
  CHECK(ev[2].type == store::EventType::kDelete);
  CHECK(ev[2].key == "w/a");
  CHECK(ev[2].revision > r2);
}

}  // namespace ddp::test
