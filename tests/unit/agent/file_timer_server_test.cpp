// FileTimerServer: one request per line on a named pipe; a line longer than
// the limit is dropped whole, never read from its middle.
#include "file_timer_server.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace ddp::test;

namespace {

std::vector<ddp::agent::TimerRequest> serve(const std::string& bytes) {
  TempDir dir;
  boost::asio::io_context io;
  std::vector<ddp::agent::TimerRequest> got;
  ddp::agent::FileTimerServer server(io, dir / "timer.pipe",
                                     [&](const ddp::agent::TimerRequest& r) { got.push_back(r); });
  const int fd = ::open((dir / "timer.pipe").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, std::min<std::size_t>(bytes.size() - off, 512));
    if (n > 0) off += static_cast<std::size_t>(n);
    io.poll();
  }
  ::close(fd);
  for (int i = 0; i < 100; ++i) io.poll();
  return got;
}

const std::string kRequest =
    R"({"version": 1, "pid": 4242, "scope_id": "s", "expiration_time": 5.0, "signal": 9})";

}  // namespace

TEST_CASE("a FileTimer request on the pipe reaches the agent") {
  const auto got = serve(kRequest + "\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].pid == 4242);
  CHECK(got[0].scope == "s");
}

TEST_CASE("a line longer than the limit is dropped whole, even when its tail reads as a request") {
  // 5,000 bytes of padding, then what looks like a request, on one line; then a real one.
  const auto got =
      serve(std::string(5000, ' ') + kRequest + "\n" +
            R"({"version": 1, "pid": 77, "scope_id": "t", "expiration_time": 1.0, "signal": 9})" + "\n");
  REQUIRE(got.size() == 1);
  CHECK(got[0].pid == 77);
}
