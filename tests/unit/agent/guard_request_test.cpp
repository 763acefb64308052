// The guard server's request frame (agent/guard/guard_request.hpp): what the
// agent encodes comes out of the server's decoder unchanged, and a frame
// that is cut short or wrong is refused with a reason, never half-read.
#include "guard_request.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <utility>

using ddp::guard::decode_request;
using ddp::guard::encode_request;
using ddp::guard::GuardRequest;

TEST_CASE("a guard request round-trips: arguments, environment, CPUs and empty fields") {
  GuardRequest r;
  r.stop_timeout = std::chrono::milliseconds(1500);
  r.fence_file = "/dev/shm/ddprun-x/fence";
  r.cwd = "/work dir/with spaces";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  CPU_SET(3, &cpus);
  CPU_SET(CPU_SETSIZE - 1, &cpus);
  r.cpus = cpus;
  r.argv = {"/bin/sh", "-c", "", "echo 'a b'"};
  r.env = {"A=1", "EMPTY=", "MULTI=line1\nline2", std::string(100000, 'x')};
  std::string why;
  const auto d = decode_request(encode_request(r), &why);
  INFO(why);
  REQUIRE(d);
  CHECK(d->stop_timeout == r.stop_timeout);
  CHECK(d->fence_file == r.fence_file);
  CHECK(d->cwd == r.cwd);
  REQUIRE(d->cpus);
  CHECK(CPU_EQUAL(&*d->cpus, &cpus));
  CHECK(d->argv == r.argv);
  CHECK(d->env == r.env);
  CHECK(d->session == ddp::guard::kSessionShared);

  // Each session the agent asks for: shared, its own, its own with a terminal.
  for (const int session : {ddp::guard::kSessionShared, ddp::guard::kSessionOwn, 0, 1, 2}) {
    r.session = session;
    const auto s = decode_request(encode_request(r), &why);
    REQUIRE(s);
    CHECK(s->session == session);
  }
  r.session = ddp::guard::kSessionShared;

  r.cpus.reset();
  r.fence_file.clear();
  r.env.clear();
  const auto e = decode_request(encode_request(r), &why);
  REQUIRE(e);
  CHECK_FALSE(e->cpus);
  CHECK(e->fence_file.empty());
  CHECK(e->env.empty());
}

TEST_CASE("an empty CPU set stays empty, so the guard refuses it as fork_exec does") {
  GuardRequest r;
  r.argv = {"/bin/true"};
  cpu_set_t none;
  CPU_ZERO(&none);
  r.cpus = none;
  const auto d = decode_request(encode_request(r), nullptr);
  REQUIRE(d);
  REQUIRE(d->cpus);
  CHECK(CPU_COUNT(&*d->cpus) == 0);
}

TEST_CASE("a malformed guard request is refused with the reason") {
  GuardRequest r;
  r.argv = {"/bin/true", "x"};
  r.env = {"A=1"};
  const std::string good = encode_request(r);
  std::string why;
  // Every cut, and one byte too many.
  CHECK_FALSE(decode_request(good + "x", &why));
  CHECK(why == "bytes after the environment");
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("cut at " << n);
    CHECK_FALSE(decode_request(good.substr(0, n), &why));
  }
  // Payloads written out field by field ('|' stands for the NUL after each).
  const std::pair<std::string, std::string> refused[] = {
      {"abc|||||1|/bin/true|0|", "bad stop timeout"},
      {"1|||0,x|0|1|/bin/true|0|", "bad CPU list"},
      {"1||/|||1|/bin/true|0|", "bad session"},
      {"1||/||5|1|/bin/true|0|", "bad session"},
      {"1||/||0|0|0|", "bad argc"},
      {"1||/||0|1|true|0|", "the worker's path is not absolute"},
      {"1||/||0|3|/bin/true|", "truncated argv"},
      {"1||/||0|1|/bin/true|x|", "bad envc"},
      {"1||/||0|1|/bin/true|2|A=1|", "truncated environment"},
  };
  for (auto [payload, reason] : refused) {
    std::replace(payload.begin(), payload.end(), '|', '\0');
    INFO(reason);
    CHECK_FALSE(decode_request(payload, &why));
    CHECK(why == reason);
  }
}
