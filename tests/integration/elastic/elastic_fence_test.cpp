// The fence backstop (docs/rendezvous.md, "Fencing"): a ddprun that cannot act
// (SIGSTOP here; a hung or starved agent looks the same) still has its workers
// killed, by their guards, before the other node's new world starts. Every
// worker appends "<GROUP_WORLD_SIZE> <RANK> <CLOCK_MONOTONIC ns>" to its node's
// tick file every 10 ms: the overlap is read from the outside.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

#include "elastic_support.hpp"

using namespace elastic;

namespace {

// The first and last tick of the world of `nodes` nodes in `file`.
std::pair<std::int64_t, std::int64_t> ticks_of(const fs::path& file, int nodes) {
  std::istringstream lines(read_file(file));
  std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = 0;
  int world = 0, rank = 0;
  std::int64_t ns = 0;
  while (lines >> world >> rank >> ns) {
    if (world != nodes) continue;
    first = std::min(first, ns);
    last = std::max(last, ns);
  }
  return {first, last};
}

}  // namespace

TEST_CASE("elastic " ELASTIC_NAME
          ": a stopped ddprun's workers die by its guards before the others' new world") {
  TempDir dir;
  Service svc(dir);
  // Lease 3 s; the guards act 2.75 s after the last keep-alive the store answered.
  const std::string conf =
      "last_call_timeout=0.3,keep_alive_interval=1,keep_alive_max_attempt=3,join_timeout=30";
  auto opts = [&](const std::string& name) {
    return AgentOptions{svc.backend(),
                        svc.endpoint(),
                        "1:2",
                        1,
                        conf,
                        {{"FAKE_HANG", "1"}, {"FAKE_TICK_FILE", (dir / ("ticks." + name)).string()}},
                        3,
                        "job",
                        {"--stop_timeout=30"}};
  };
  Agent a(dir, "a", opts("a"));
  Agent b(dir, "b", opts("b"));
  REQUIRE(wait_until(
      [&] { return ticks_of(dir / "ticks.a", 2).second > 0 && ticks_of(dir / "ticks.b", 2).second > 0; },
      30s));

  // b cannot act; its connection stays open, so its lease ends only by its TTL.
  b.proc->signal(SIGSTOP);
  REQUIRE(wait_until([&] { return ticks_of(dir / "ticks.a", 1).second > 0; }, 30s));
  const auto old_b = ticks_of(dir / "ticks.b", 2).second;
  const auto new_a = ticks_of(dir / "ticks.a", 1).first;
  INFO("b's last write " << (new_a - old_b) / 1000000 << " ms before a's new world's first");
  CHECK(old_b < new_a);
  CHECK(all_dead(b.started()));

  // Once b runs again it reads what its guards said.
  b.proc->signal(SIGCONT);
  CHECK(wait_until([&] { return contains(b.proc->err(), "by this node's fence deadline"); }, 10s));
  INFO("agent a:\n" << a.proc->err() << "\nagent b:\n" << b.proc->err());
  CHECK(a.proc->running());
}
