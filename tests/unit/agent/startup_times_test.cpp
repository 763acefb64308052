// StartupTimes: the node's first step is told only after every spawn has
// reported, so that --event_log's "first_step" line never precedes the
// attempt's "startup" line, however fast the workers step.
#include "startup_times.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace ddp::agent;

namespace {

ddp::rdzv::RendezvousResult round_at(std::int64_t rank_offset) {
  ddp::rdzv::RendezvousResult r;
  r.rank_offset = rank_offset;
  return r;
}

}  // namespace

TEST_CASE("workers that step before the last spawn report are told after the attempt's startup") {
  boost::asio::io_context io;
  StartupTimes times(io);
  std::vector<std::string> told;
  times.rendezvous_started();
  times.rendezvous_done(round_at(4), 2, nullptr, [&] { told.push_back("first_step"); });
  CHECK_FALSE(times.first_step(4));
  CHECK_FALSE(times.first_step(5));  // every local rank, but not every spawn reported
  times.spawned();
  told.push_back("startup");  // what the caller emits right after spawned()
  io.run();
  CHECK(told == std::vector<std::string>{"startup", "first_step"});
  CHECK(times.fields().at("first_step_ranks") == 2);
  CHECK(times.fields().at("first_step_s").is_number());
}

TEST_CASE("workers that step after every spawn reported complete the first step at the last one") {
  boost::asio::io_context io;
  StartupTimes times(io);
  int told = 0;
  times.rendezvous_started();
  times.rendezvous_done(round_at(0), 2, nullptr, [&] { ++told; });
  times.spawned();
  CHECK_FALSE(times.first_step(2));  // another node's rank
  CHECK_FALSE(times.first_step(0));
  CHECK_FALSE(times.first_step(0));  // told twice
  CHECK(times.first_step(1));
  io.run();
  CHECK(told == 0);  // the caller runs it on a true return; nothing was posted
}

TEST_CASE("a first step deferred to spawned() is dropped when a new attempt began meanwhile") {
  boost::asio::io_context io;
  StartupTimes times(io);
  int told = 0;
  times.rendezvous_started();
  times.rendezvous_done(round_at(0), 1, nullptr, [&] { ++told; });
  CHECK_FALSE(times.first_step(0));
  times.spawned();
  times.rendezvous_started();  // the attempt failed before the post ran
  io.run();
  CHECK(told == 0);
  CHECK(times.fields().at("first_step_s").is_null());
}
