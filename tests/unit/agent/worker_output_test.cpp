#include "worker_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace ddp::agent;
using ddp::test::read_file;
using ddp::test::TempDir;

namespace {
// A pipe standing in for the agent's console; read back what was written.
struct Console {
  int fds[2] = {-1, -1};
  Console() { REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0); }
  ~Console() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  std::string drain() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

// The options of rank `rank` streaming its stdout to `console` (as at a terminal).
WorkerOutputOptions streaming_to(const Console& console, int rank) {
  WorkerOutputOptions o;
  o.rank = rank;
  o.console_out_fd = console.fds[1];
  o.stream_out = true;
  return o;
}

// Rank `rank` streaming its stdout to a console of its own: each call returns
// what the console showed for it.
struct StreamingWorker {
  Console console;
  WorkerOutput w;
  explicit StreamingWorker(int rank) : w(streaming_to(console, rank)) {}
  std::string feed(const std::string& chunk) {
    w.feed(StdStream::kOut, chunk);
    return console.drain();
  }
  std::string finish() {
    w.finish();
    return console.drain();
  }
};
}  // namespace

TEST_CASE("lines split across chunks reach the console whole and prefixed with the rank") {
  Console out, err;
  WorkerOutputOptions o;
  o.rank = 5;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  WorkerOutput w(o);
  w.feed(StdStream::kOut, "hel");
  w.feed(StdStream::kOut, "lo\nwor");
  w.feed(StdStream::kErr, "oops\n");
  CHECK(out.drain() == "[rank 5]:hello\n");
  w.feed(StdStream::kOut, "ld\n\n");
  CHECK(out.drain() == "[rank 5]:world\n[rank 5]:\n");
  CHECK(err.drain() == "[rank 5]:oops\n");
}

TEST_CASE("a last line without newline is emitted at finish") {
  Console out, err;
  WorkerOutputOptions o;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  WorkerOutput w(o);
  w.feed(StdStream::kErr, "dying words");
  CHECK(err.drain().empty());
  w.finish();
  CHECK(err.drain() == "[rank 0]:dying words\n");
  CHECK(w.stderr_tail().back() == "dying words");
}

TEST_CASE("log files get the raw bytes and a redirected stream skips the console") {
  TempDir dir;
  Console out, err;
  WorkerOutputOptions o;
  o.console_out = false;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  o.out_file = dir / "0" / "stdout.log";
  o.err_file = dir / "0" / "stderr.log";
  {
    WorkerOutput w(o);
    w.feed(StdStream::kOut, "a\nb");
    w.feed(StdStream::kErr, "e\n");
    w.finish();
  }
  CHECK(read_file(dir / "0" / "stdout.log") == "a\nb");
  CHECK(read_file(dir / "0" / "stderr.log") == "e\n");
  CHECK(out.drain().empty());
  CHECK(err.drain() == "[rank 0]:e\n");
}

TEST_CASE("a replacement's output appends to its slot's log files, a new attempt's truncates them") {
  TempDir dir;
  Console out, err;
  WorkerOutputOptions o;
  o.console_out = false;
  o.console_err = false;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  o.out_file = dir / "0" / "stdout.log";
  o.err_file = dir / "0" / "stderr.log";
  const auto write = [&](const WorkerOutputOptions& opts, const std::string& text) {
    WorkerOutput w(opts);
    w.feed(StdStream::kOut, text);
    w.feed(StdStream::kErr, text);
    w.finish();
  };
  write(o, "first\n");
  auto replacement = o;
  replacement.append_files = true;
  write(replacement, "second\n");
  CHECK(read_file(dir / "0" / "stdout.log") == "first\nsecond\n");
  CHECK(read_file(dir / "0" / "stderr.log") == "first\nsecond\n");
  write(o, "third\n");
  CHECK(read_file(dir / "0" / "stdout.log") == "third\n");
}

TEST_CASE("only the last stderr lines are kept for the failure report") {
  Console out, err;
  WorkerOutputOptions o;
  o.console_err = false;
  o.tail_lines = 3;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  WorkerOutput w(o);
  for (int i = 0; i < 10; ++i) w.feed(StdStream::kErr, "line " + std::to_string(i) + "\n");
  REQUIRE(w.stderr_tail().size() == 3);
  CHECK(w.stderr_tail().front() == "line 7");
  CHECK(w.stderr_tail().back() == "line 9");
  CHECK(err.drain().empty());
}

TEST_CASE("an unwritable log file is a config error naming --log_dir") {
  WorkerOutputOptions o;
  o.out_file = "/proc/definitely/not/stdout.log";
  CHECK_THROWS_WITH(WorkerOutput(o), Catch::StartsWith("--log_dir: cannot create"));
}

TEST_CASE("streaming output reaches the console as it comes, the prefix after each carriage return") {
  StreamingWorker w(3);
  CHECK(w.feed("(Pdb) ") == "[rank 3]:(Pdb) ");
  CHECK(w.feed("\r 10%") == "\r[rank 3]: 10%");
  CHECK(w.feed("\r 20%\nnext") == "\r[rank 3]: 20%\n[rank 3]:next");
  CHECK(w.finish() == "\n");  // a line left open is ended
}

TEST_CASE("another worker's line first ends a streaming worker's unfinished line") {
  Console console;
  auto line = std::make_shared<ConsoleLine>();
  WorkerOutputOptions a = streaming_to(console, 0);
  a.console_line = line;
  WorkerOutputOptions b = a;
  b.rank = 1;
  b.stream_out = false;
  WorkerOutput wa(a), wb(b);
  wa.feed(StdStream::kOut, "\rstep 1");
  wb.feed(StdStream::kOut, "hello\n");
  wa.feed(StdStream::kOut, "\rstep 2\n");
  CHECK(console.drain() == "\r[rank 0]:step 1\n[rank 1]:hello\n\r[rank 0]:step 2\n");
}

TEST_CASE("torch 2.x's own [rankN]: before a traceback line is not shown twice") {
  Console out, err;
  WorkerOutputOptions o;
  o.rank = 1;
  o.console_out_fd = out.fds[1];
  o.console_err_fd = err.fds[1];
  {
    WorkerOutput w(o);
    // What torch's excepthook writes once the process group is up.
    w.feed(StdStream::kErr, "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"x.py\"\n\n");
    w.feed(StdStream::kErr, "[rank1]: ValueError: bad\n[rank0]: not mine\n");
    CHECK(err.drain() ==
          "[rank 1]:Traceback (most recent call last):\n[rank 1]:  File \"x.py\"\n[rank 1]:\n"
          "[rank 1]:ValueError: bad\n[rank 1]:[rank0]: not mine\n");
    CHECK(w.stderr_tail().at(3) == "ValueError: bad");
  }
  // Streaming (a pty) the same; --no_prefix shows the lines as written.
  StreamingWorker s(1);
  CHECK(s.feed("[rank1]: Traceback\n") == "[rank 1]:Traceback\n");
  o.prefix = "";
  WorkerOutput raw(o);
  raw.feed(StdStream::kErr, "[rank1]: ValueError: bad\n");
  CHECK(err.drain() == "[rank1]: ValueError: bad\n");
}

TEST_CASE("two workers redrawing bars on a terminal redraw their own rows in place") {
  Console console;
  auto line = std::make_shared<ConsoleLine>();
  line->set_size(40, 10);
  WorkerOutputOptions a = streaming_to(console, 0);
  a.console_line = line;
  WorkerOutputOptions b = a;
  b.rank = 1;
  WorkerOutput wa(a), wb(b);
  wa.feed(StdStream::kOut, "\r 10%");
  wb.feed(StdStream::kOut, "\r 10%");  // ends rank 0's line: rank 0 keeps that row
  CHECK(console.drain() == "\r[rank 0]: 10%\n\r[rank 1]: 10%");
  // Rank 0's redraw goes one row up and comes back.
  wa.feed(StdStream::kOut, "\r 20%");
  CHECK(console.drain() ==
        "\x1b"
        "7\x1b[1A\r\x1b[2K\r[rank 0]: 20%\x1b"
        "8");
  wb.feed(StdStream::kOut, "\r 20%");  // the cursor's own row
  CHECK(console.drain() == "\r[rank 1]: 20%");
  // Rank 0 finishes its bar in place; a later line of its own starts a row.
  wa.feed(StdStream::kOut, "\r100%\n");
  CHECK(console.drain() ==
        "\x1b"
        "7\x1b[1A\r\x1b[2K\r[rank 0]:100%\x1b"
        "8");
  wa.feed(StdStream::kOut, "done\n");
  CHECK(console.drain() == "\n[rank 0]:done\n");
  // Rank 0's line ended rank 1's, whose row is now two up: its last redraw goes there.
  wb.feed(StdStream::kOut, "\r100%\n");
  CHECK(console.drain() ==
        "\x1b"
        "7\x1b[2A\r\x1b[2K\r[rank 1]:100%\x1b"
        "8");
}

TEST_CASE("a row is not redrawn in place when it wrapped, scrolled off, or the redraw is no redraw") {
  Console console;
  auto line = std::make_shared<ConsoleLine>();
  line->set_size(20, 4);
  WorkerOutputOptions a = streaming_to(console, 0);
  a.console_line = line;
  WorkerOutputOptions b = a;
  b.rank = 1;
  b.stream_out = false;  // whole lines
  WorkerOutput wa(a), wb(b);
  SECTION("a line wider than the terminal below it is counted as two rows") {
    wa.feed(StdStream::kOut, "\r 1%");
    wb.feed(StdStream::kOut, std::string(30, 'x') + "\n");
    console.drain();
    wa.feed(StdStream::kOut, "\r 2%");
    // The cursor is on a fresh row; the 30 columns took two rows; rank 0's is above them.
    CHECK(console.drain() ==
          "\x1b"
          "7\x1b[3A\r\x1b[2K\r[rank 0]: 2%\x1b"
          "8");
  }
  SECTION("past the screen's height the row has scrolled off: a new row") {
    wa.feed(StdStream::kOut, "\r 1%");
    for (int i = 0; i < 4; ++i) wb.feed(StdStream::kOut, "line\n");
    console.drain();
    wa.feed(StdStream::kOut, "\r 2%");
    CHECK(console.drain() == "\r[rank 0]: 2%");
  }
  SECTION("a redraw wider than the terminal is written at the cursor") {
    wa.feed(StdStream::kOut, "\r 1%");
    wb.feed(StdStream::kOut, "line\n");
    console.drain();
    wa.feed(StdStream::kOut, "\r" + std::string(15, '#'));
    CHECK(console.drain() == "\r[rank 0]:" + std::string(15, '#'));
  }
  SECTION("text that does not start with \\r starts a row of its own, prefixed") {
    wa.feed(StdStream::kOut, "\r 1%");
    wb.feed(StdStream::kOut, "line\n");
    console.drain();
    wa.feed(StdStream::kOut, "more\n");
    CHECK(console.drain() == "[rank 0]:more\n");
  }
}

TEST_CASE("a line cut by another worker's output does not leave an empty line when its newline comes") {
  // python -u writes print()'s text and its '\n' apart: another rank's line
  // can come in between. Before: a bare '\n' (an empty line; under --hosts,
  // "HOST: " alone on stdout).
  for (const int cols : {0, 80}) {
    INFO("terminal columns " << cols);
    Console console;
    auto line = std::make_shared<ConsoleLine>();
    line->set_size(cols, cols == 0 ? 0 : 24);
    WorkerOutputOptions a = streaming_to(console, 0);
    a.console_line = line;
    WorkerOutputOptions b = a;
    b.rank = 1;
    WorkerOutput wa(a), wb(b);
    wa.feed(StdStream::kOut, "out 0");
    wb.feed(StdStream::kOut, "out 1");
    wa.feed(StdStream::kOut, "\n");
    wb.feed(StdStream::kOut, "\n");
    wa.feed(StdStream::kOut, "next\n");
    CHECK(console.drain() == "[rank 0]:out 0\n[rank 1]:out 1\n[rank 0]:next\n");
  }
}

TEST_CASE("streaming puts the prefix before text only: a bare CR or the LF of CR LF gets none") {
  StreamingWorker w(0);
  // tqdm's first update starts with '\r': one prefix, not "[rank 0]:\r[rank 0]:".
  CHECK(w.feed("\r  0%") == "\r[rank 0]:  0%");
  CHECK(w.feed("\r100%\r\n") == "\r[rank 0]:100%\r\n");
  // An empty line is prefixed, as whole lines are.
  CHECK(w.feed("\n\r\n") == "[rank 0]:\n\r[rank 0]:\n");
}

TEST_CASE("a worker's window is the terminal's less the prefix, at least one column") {
  winsize term{};
  term.ws_col = 100;
  term.ws_row = 30;
  term.ws_xpixel = 1000;
  CHECK(display_columns("[rank 0]:") == 9);
  CHECK(display_columns("r\xc3\xa9:") == 3);  // UTF-8: one column per character
  const auto ws = worker_window(term, 9);
  CHECK(ws.ws_col == 91);
  CHECK(ws.ws_row == 30);
  CHECK(ws.ws_xpixel == 910);
  CHECK(worker_window(term, 0).ws_col == 100);
  CHECK(worker_window(term, 150).ws_col == 1);
  CHECK(worker_window(winsize{}, 9).ws_col == 0);  // unknown stays unknown
}
