// HangWatch: the agent's one timer over every worker's deadlines (FileTimer
// scopes, heartbeats, sections), with deadlines already due so that nothing
// waits.
#include "hang_watch.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace ddp::agent;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

namespace {

Deadline make(int local_rank, const std::string& scope, Steady::time_point at) {
  Deadline d;
  d.local_rank = local_rank;
  d.source = "FileTimer";
  d.scope = scope;
  d.at = at;
  d.detail = "detail of " + scope;
  d.signal = 15;
  return d;
}

}  // namespace

TEST_CASE("due deadlines expire earliest first, with what they were armed with, and later ones stay armed") {
  boost::asio::io_context io;
  std::vector<Deadline> expired;
  HangWatch watch(io, [&](const Deadline& d) { expired.push_back(d); });
  const auto now = Steady::now();
  watch.arm(make(0, "b", now - 1ms));
  watch.arm(make(1, "a", now - 3ms));
  watch.arm(make(0, "c", now - 2ms));
  watch.arm(make(0, "later", now + 1h));
  watch.arm(make(0, "never", Steady::time_point::max()));
  io.run_for(200ms);
  REQUIRE(expired.size() == 3);
  CHECK(expired[0].scope == "a");
  CHECK(expired[0].local_rank == 1);
  CHECK(expired[1].scope == "c");
  CHECK(expired[2].scope == "b");
  CHECK(expired[2].detail == "detail of b");
  CHECK(expired[2].signal == 15);
  CHECK(watch.size() == 2);
  CHECK(watch.armed(0, "FileTimer", "later"));
  CHECK(watch.count(0, "FileTimer") == 2);
  CHECK(watch.count(1, "FileTimer") == 0);
}

TEST_CASE("arming a scope again moves its deadline, and disarm and clear remove only what they name") {
  boost::asio::io_context io;
  std::vector<std::string> expired;
  HangWatch watch(io, [&](const Deadline& d) { expired.push_back(d.scope); });
  const auto now = Steady::now();
  watch.arm(make(0, "moved", now - 1ms));
  watch.arm(make(0, "moved", now + 1h));  // released by its next request before the timer ran
  watch.arm(make(0, "disarmed", now - 1ms));
  watch.disarm(0, "FileTimer", "disarmed");
  watch.disarm(0, "FileTimer", "not armed");
  watch.arm(make(2, "cleared", now - 1ms));
  watch.arm(make(2, "cleared too", now + 1h));
  watch.arm(make(3, "kept", now - 1ms));
  watch.clear(2);
  CHECK(watch.count(0, "FileTimer") == 1);
  CHECK(watch.count(2, "FileTimer") == 0);
  io.run_for(200ms);
  CHECK(expired == std::vector<std::string>{"kept"});
  CHECK(watch.size() == 1);
  watch.clear_all();
  CHECK(watch.size() == 0);
  CHECK(watch.count(0, "FileTimer") == 0);
}

TEST_CASE("the expiry handler may arm and clear deadlines") {
  boost::asio::io_context io;
  int fired = 0;
  HangWatch* self = nullptr;
  HangWatch watch(io, [&](const Deadline& d) {
    ++fired;
    if (d.scope == "first") {
      self->arm(make(0, "second", Steady::now() - 1ms));
      self->arm(make(0, "third", Steady::now() + 1h));
    } else {
      self->clear(d.local_rank);
    }
  });
  self = &watch;
  watch.arm(make(0, "first", Steady::now() - 1ms));
  io.run_for(200ms);
  CHECK(fired == 2);
  CHECK(watch.size() == 0);
}
