// libFuzzer target: the lines the agent reads from processes beside it. The
// first byte picks one: a preload zygote's answer, read by request_worker
// over a socketpair (the target plays the zygote), and its exit line
// (parse_zygote_exit), both within json_input::kZygoteLine; or a FileTimer
// client's request, written to a real FileTimerServer's named pipe and served
// on its io_context (json_input::kFileTimerRequest). Findings: a crash, a
// sanitizer report or any exception.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "file_timer_server.hpp"
#include "zygote_client.hpp"

namespace {

using namespace std::chrono_literals;

void zygote_answer(const std::string& bytes) {
  (void)ddp::agent::parse_zygote_exit(bytes);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  // The answer is there before the request: read_line reads it from the
  // buffer, byte by byte, up to the first newline.
  const std::string answer = bytes + "\n";
  if (::write(sv[1], answer.data(), answer.size()) == static_cast<ssize_t>(answer.size())) {
    ddp::agent::ZygoteRequest request;
    request.argv = {"train.py"};
    const auto r = ddp::agent::request_worker(sv[0], request, 0, 1, 2, 1s);
    if (r.error.empty() && (r.worker_pid <= 0 || r.guard_pid <= 0)) __builtin_trap();
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

struct TimerPipe {
  boost::asio::io_context io;
  std::filesystem::path dir;
  std::unique_ptr<ddp::agent::FileTimerServer> server;
  int writer = -1;
  long served = 0;
  TimerPipe() {
    char name[] = "/tmp/fuzz_agent_lines.XXXXXX";
    dir = ::mkdtemp(name);
    server =
        std::make_unique<ddp::agent::FileTimerServer>(io, dir / "timer", [this](const auto&) { ++served; });
    writer = ::open((dir / "timer").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  }
  ~TimerPipe() {
    server.reset();
    ::close(writer);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

void timer_request(const std::string& bytes) {
  static TimerPipe pipe;  // one server for the whole run, as in the agent
  // Whole lines, so what one input leaves buffered never joins the next.
  const std::string line = bytes + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(pipe.writer, line.data() + done, line.size() - done);
    if (n > 0) done += static_cast<std::size_t>(n);
    pipe.io.poll();  // the server drains the pipe
    pipe.io.restart();
  }
  while (pipe.io.poll() > 0) pipe.io.restart();
  pipe.io.restart();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    zygote_answer(bytes);
  } else {
    timer_request(bytes);
  }
  return 0;
}
