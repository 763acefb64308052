// The preload zygote's answers reach the agent over its socket: outside input,
// read within json_input::kZygoteLine. Driven over a socketpair, the test
// playing the zygote.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "zygote_client.hpp"

using namespace ddp::agent;
using namespace std::chrono_literals;

namespace {

// request_worker's answer when the zygote has already written `reply`.
ZygoteReply answer_of(const std::string& reply) {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  REQUIRE(::write(sv[1], reply.data(), reply.size()) == static_cast<ssize_t>(reply.size()));
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ZygoteRequest request;
  request.argv = {"train.py"};
  const auto r = request_worker(sv[0], request, null, null, null, 2s);
  ::close(null);
  ::close(sv[0]);
  ::close(sv[1]);
  return r;
}

}  // namespace

TEST_CASE("a zygote answer naming the worker is read") {
  const auto r = answer_of(R"({"pid": 41, "guard_pid": 40, "cgroup": "/sys/fs/cgroup/x"})"
                           "\n");
  CHECK(r.error.empty());
  CHECK(r.worker_pid == 41);
  CHECK(r.guard_pid == 40);
}

TEST_CASE("a zygote answer nested past the bound is a start error naming the bound, not an exception") {
  const auto r = answer_of(R"({"error": )" + std::string(30000, '[') + std::string(30000, ']') + "}\n");
  CHECK(r.error ==
        "the preload zygote sent a malformed answer: it nests 30001 levels deep; at most 64 are read");
  CHECK(r.worker_pid == -1);
}

TEST_CASE("a zygote exit line is read within the same bound") {
  CHECK(parse_zygote_exit(R"({"exit": 256})") == 256);
  CHECK_FALSE(
      parse_zygote_exit(R"({"exit": 1, "x": )" + std::string(100, '[') + std::string(100, ']') + "}"));
}

TEST_CASE("a zygote answer with fields of the wrong type or range is a start error, not an exception") {
  CHECK(answer_of("{\"pid\": \"41\", \"guard_pid\": 40}\n").error == "the preload zygote sent no worker pid");
  CHECK(answer_of("{\"pid\": 1e300, \"guard_pid\": 40}\n").error == "the preload zygote sent no worker pid");
  CHECK(answer_of("{\"pid\": 18446744073709551615, \"guard_pid\": 40}\n").error ==
        "the preload zygote sent no worker pid");
  CHECK(answer_of("{\"pid\": 41, \"guard_pid\": 40, \"cgroup\": 7}\n").error ==
        "the preload zygote sent a malformed answer: its cgroup is not a string");
  const auto e = answer_of("{\"error\": [1]}\n");
  CHECK(e.error == "the preload zygote sent a malformed error");
  CHECK(e.nothing_started);
  // An empty error is still a refusal, never a start with pids of -1.
  const auto empty = answer_of("{\"error\": \"\"}\n");
  CHECK(empty.error == "the preload zygote refused to start the worker without saying why");
  CHECK(empty.nothing_started);
  CHECK(empty.worker_pid == -1);
  CHECK_FALSE(parse_zygote_exit("{\"exit\": 4294967552}").has_value());
}

TEST_CASE("a zygote answer longer than the bound is cut off at the bound, not read to its end") {
  const auto r = answer_of(std::string(70 * 1024, 'x') + "\n");
  CHECK(r.error == "the preload zygote sent an answer longer than 65536 bytes");
}
