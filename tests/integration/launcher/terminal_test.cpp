// ddprun at a terminal, as a torchrun user meets it: breakpoint()/input() in
// a worker (with readline's editing, history and completion), Ctrl-C at a
// prompt, progress bars redrawn with '\r', isatty and the window size in
// workers. ddprun runs on a real pseudo-terminal; the assertions are on what
// appears on the screen, and before what.
#include <algorithm>
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"
#include "pty_session.hpp"
#include "screen_model.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

std::vector<std::string> ddprun_on(const TempDir& dir, std::vector<std::string> args) {
  args.insert(args.begin(), {"--python", kPython, "--log_level=warn"});
  (void)dir;
  return ddprun_argv(std::move(args));
}

}  // namespace

TEST_CASE("breakpoint() in rank 0 prompts on the terminal and reads what the user types") {
  TempDir dir;
  write_file(dir / "debug.py",
             "import os, sys\n"
             "if os.environ['RANK'] == '0':\n"
             "    x = 6\n"
             "    breakpoint()\n"
             "    print('after', x)\n"
             "else:\n"
             // One write: under `python -u` print() writes each argument on its own,
             // and rank 0's lines may come between them (two rows, each prefixed).
             "    sys.stdout.write('stdin is ' + os.path.realpath('/proc/self/fd/0') + '\\n')\n");
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", (dir / "debug.py").string()}), dir.path().string(),
               clean_env({}));
  // Each wait's screen is captured after it, so that a failure shows what was there.
  const bool prompted = s.wait_for("[rank 0]:(Pdb) ");
  INFO("screen at the first prompt:\n" << s.screen());
  REQUIRE(prompted);
  s.type("p x * 7\n");
  const bool answered = s.wait_for("42");
  INFO("screen at the answer:\n" << s.screen());
  REQUIRE(answered);
  // Type at the next prompt, as a user would: typed early, the terminal's echo
  // lands before the prompt instead of after it.
  const auto answer = s.screen().find("42");
  const bool prompted_again = s.wait_for("(Pdb) ", std::chrono::seconds(20), answer);
  INFO("screen at the second prompt:\n" << s.screen());
  REQUIRE(prompted_again);
  const auto second_prompt = s.screen().find("(Pdb) ", answer);
  s.type("c\n");
  const auto code = s.wait(std::chrono::seconds(30));
  INFO("screen at the end:\n" << s.screen());
  REQUIRE(code == std::optional<int>(0));
  // The prompt line is rank 0's unfinished line when the echo of "c" ends it
  // on the terminal, so "after 6" continues that line: no second prefix.
  CHECK(s.screen().find("after 6", second_prompt) != std::string::npos);
  // The other rank's stdin is not the terminal.
  CHECK_THAT(s.screen(), Catch::Contains("[rank 1]:stdin is /dev/null"));
}

TEST_CASE("pdb in rank 0 edits lines, recalls history and completes names, as at a terminal") {
  TempDir dir;
  write_file(dir / "debug.py",
             "import os\n"
             "if os.environ['RANK'] == '0':\n"
             "    x = 6\n"
             "    unique_thing = 5\n"
             "    breakpoint()\n"
             "    print('after', x)\n");
  constexpr int kCols = 100;
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", (dir / "debug.py").string()}), dir.path().string(),
               clean_env({}), kCols, 30);
  // Each line typed at its prompt, as a user would; Enter is '\r' on a terminal.
  std::size_t at = 0;
  auto at_prompt = [&](const std::string& keys) {
    INFO(s.screen());
    REQUIRE(s.wait_for("(Pdb) ", std::chrono::seconds(20), at));
    at = s.screen().find("(Pdb) ", at) + 1;
    s.type(keys);
  };
  at_prompt("p x * 7\r");
  at_prompt("\x1b[A\r");  // Up-arrow: the last command again
  at_prompt("p uniq\t");  // Tab completes the name
  REQUIRE(s.wait_for("unique_thing", std::chrono::seconds(20), at));
  s.type("\r");
  at_prompt("p 1+1\x1b[D\x1b[D\x1b[D9\r");  // Left-arrow three times, then insert
  at_prompt("c\r");
  REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
  const std::string screen = s.screen();
  INFO(screen);
  const auto rows = screen_rows(screen, kCols);
  auto count = [&](const std::string& row) { return std::count(rows.begin(), rows.end(), row); };
  CHECK(count("[rank 0]:(Pdb) p x * 7") == 2);
  CHECK(count("[rank 0]:42") == 2);
  CHECK(count("[rank 0]:(Pdb) p unique_thing") == 1);
  CHECK(count("[rank 0]:5") == 1);
  CHECK(count("[rank 0]:(Pdb) p 91+1") == 1);
  CHECK(count("[rank 0]:92") == 1);
  CHECK(count("[rank 0]:after 6") == 1);
  CHECK(screen.find("SyntaxError") == std::string::npos);
  // ddprun gives the terminal back as it found it.
  CHECK(s.cooked());
}

TEST_CASE("input() in the --local_ranks_filter rank reads the terminal") {
  TempDir dir;
  write_file(dir / "ask.py",
             "import os\n"
             "if os.environ['LOCAL_RANK'] == '1':\n"
             "    print('hello', input('name? '))\n");
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", "--local_ranks_filter=1", (dir / "ask.py").string()}),
               dir.path().string(), clean_env({}));
  REQUIRE(s.wait_for("[rank 1]:name? "));
  s.type("ada\n");
  REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
  INFO(s.screen());
  CHECK_THAT(s.screen(), Catch::Contains("[rank 1]:hello ada"));
  // The echo of what was typed continues the prompt's line (input() writes
  // the prompt to stderr, the echo comes on rank 1's stdin terminal).
  const auto rows = screen_rows(s.screen(), 100);
  CHECK(std::count(rows.begin(), rows.end(), "[rank 1]:name? ada") == 1);
}

TEST_CASE("Ctrl-C at a pdb prompt stops every worker and ddprun exits 130") {
  TempDir dir;
  write_file(dir / "stuck.py",
             "import os, time\n"
             "if os.environ['RANK'] == '0':\n"
             "    breakpoint()\n"
             "else:\n"
             "    print('sleeping', flush=True)\n"
             "    time.sleep(600)\n");
  // A stop timeout far past the wait below: only a prompt that really stops
  // lets ddprun exit in time.
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", "--stop_timeout=600", (dir / "stuck.py").string()}),
               dir.path().string(), clean_env({}));
  REQUIRE(s.wait_for("[rank 0]:(Pdb) "));
  REQUIRE(s.wait_for("[rank 1]:sleeping"));
  s.type("\x03");
  const auto code = s.wait(std::chrono::seconds(60));
  INFO(s.screen());
  CHECK(code == std::optional<int>(130));
  CHECK(s.cooked());  // the terminal edits and echoes lines again
}

TEST_CASE("a progress bar redrawn with a carriage return reaches the screen at each update, prefixed") {
  TempDir dir;
  // The bar starts once the test has seen the tty line, and each update waits
  // for the test to have seen the previous one: the worker's stdout and
  // stderr reach ddprun on two descriptors, and unbuffered print() writes
  // each of its arguments apart, so an early bar could land inside the line.
  write_file(
      dir / "bar.py",
      "import os, sys, time, signal\n"
      "go = sys.argv[1]\n"
      "signal.signal(signal.SIGWINCH, lambda *a: print('resized', *os.get_terminal_size(), flush=True))\n"
      "print('tty', sys.stdout.isatty(), sys.stderr.isatty(), *os.get_terminal_size(), flush=True)\n"
      "while not os.path.exists(f'{go}0'):\n"
      "    time.sleep(0.01)\n"
      "for i in range(1, 4):\n"
      "    sys.stderr.write(f'\\rprogress {i}/3')\n"
      "    sys.stderr.flush()\n"
      "    while not os.path.exists(f'{go}{i}'):\n"
      "        time.sleep(0.01)\n"
      "sys.stderr.write('\\n')\n");
  const std::string go = (dir / "go").string();
  PtySession s(ddprun_on(dir, {(dir / "bar.py").string(), go}), dir.path().string(), clean_env({}), 100, 30);
  // The worker's window is the terminal's less the 9 columns of "[rank 0]:".
  const bool started = s.wait_for("[rank 0]:tty True True 91 30");
  INFO(s.screen());
  REQUIRE(started);
  write_file(go + "0", "");
  for (int i = 1; i <= 3; ++i) {
    INFO(s.screen());
    // The prefix follows the '\r', so the redrawn line keeps it.
    REQUIRE(s.wait_for("\r[rank 0]:progress " + std::to_string(i) + "/3"));
    if (i == 2) {
      s.resize(120, 40);
      REQUIRE(s.wait_for("resized 111 40"));
    }
    write_file(go + std::to_string(i), "");
  }
  REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
}

TEST_CASE("a bar as wide as the worker's terminal is redrawn on one screen line, prefixed once") {
  TempDir dir;
  // As tqdm draws it: '\r' first, then a line exactly as wide as the
  // terminal the worker is told, twenty times, then '\n'. The width goes to
  // stderr too, in one write: stdout reaches ddprun on a descriptor of its
  // own, and could land inside the bar.
  write_file(dir / "bar.py",
             "import os, sys\n"
             "cols = os.get_terminal_size().columns\n"
             "sys.stderr.write(f'cols {cols}\\n')\n"
             "for i in range(1, 21):\n"
             "    head = f'{i:2d}/20 |'\n"
             "    body = '#' * ((cols - len(head) - 1) * i // 20)\n"
             "    sys.stderr.write('\\r' + (head + body).ljust(cols - 1) + '|')\n"
             "    sys.stderr.flush()\n"
             "sys.stderr.write('\\n')\n");
  constexpr int kCols = 100;
  auto bar_rows = [](const std::vector<std::string>& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) {
      if (r.find('|') != std::string::npos || r.find('#') != std::string::npos) out.push_back(r);
    }
    return out;
  };
  SECTION("with the default prefix") {
    PtySession s(ddprun_on(dir, {(dir / "bar.py").string()}), dir.path().string(), clean_env({}), kCols, 30);
    REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
    const std::string screen = s.screen();
    INFO(screen);
    CHECK_THAT(screen, Catch::Contains("[rank 0]:cols 91"));
    const auto rows = bar_rows(screen_rows(screen, kCols));
    INFO(rows.size() << " rows of bar");
    // Redrawn in place: one row, the last update, prefixed once and ending
    // at the right margin.
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].rfind("[rank 0]:20/20 |####", 0) == 0);
    CHECK(rows[0].size() == static_cast<std::size_t>(kCols));
    CHECK(screen.find("[rank 0]:\r") == std::string::npos);
  }
  SECTION("with --no_prefix the worker gets the whole width") {
    PtySession s(ddprun_on(dir, {"--no_prefix", (dir / "bar.py").string()}), dir.path().string(),
                 clean_env({}), kCols, 30);
    REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
    const std::string screen = s.screen();
    INFO(screen);
    CHECK_THAT(screen, Catch::Contains("cols 100"));
    const auto rows = bar_rows(screen_rows(screen, kCols));
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].rfind("20/20 |####", 0) == 0);
    CHECK(rows[0].size() == static_cast<std::size_t>(kCols));
  }
}

namespace {

// 20 updates each, taking turns: rank r draws update i once the other rank
// has drawn update i-1 (its marker file in argv[1]), so the two bars always
// interleave.
void write_two_bars(const TempDir& dir) {
  write_file(dir / "bars.py",
             "import os, sys, time\n"
             "from tqdm import tqdm\n"
             "rank, turns = int(os.environ['RANK']), sys.argv[1]\n"
             "def wait(path):\n"
             "    while not os.path.exists(path):\n"
             "        time.sleep(0.002)\n"
             "bar = tqdm(total=20, desc=f'bar{rank}', mininterval=0, miniters=1)\n"
             "for i in range(1, 21):\n"
             "    if rank == 1: wait(f'{turns}/0.{i}')\n"
             "    if rank == 0 and i > 1: wait(f'{turns}/1.{i - 1}')\n"
             "    bar.update(1)\n"
             "    open(f'{turns}/{rank}.{i}', 'w').close()\n"
             "bar.close()\n");
  fs::create_directories(dir / "turns");
}

// The rows of `screen` (100 columns) that show a bar.
std::vector<std::string> bar_rows_of(const std::string& screen) {
  std::vector<std::string> bars;
  for (const auto& r : screen_rows(screen, 100)) {
    if (r.find("bar0") != std::string::npos || r.find("bar1") != std::string::npos) bars.push_back(r);
  }
  return bars;
}

}  // namespace

TEST_CASE("two ranks drawing tqdm bars keep one row each, no more rows than torchrun's two") {
  TempDir dir;
  if (run({kPython, "-c", "import tqdm"}, dir.path()).code != 0) {
    WARN("python3-tqdm is not installed (scripts/setup.sh installs it): skipped");
    return;
  }
  write_two_bars(dir);
  constexpr int kCols = 100;
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", (dir / "bars.py").string(), (dir / "turns").string()}),
               dir.path().string(), clean_env({}), kCols, 30);
  REQUIRE(s.wait(std::chrono::seconds(60)) == std::optional<int>(0));
  const auto rows = screen_rows(s.screen(), kCols);
  auto bars = bar_rows_of(s.screen());
  std::string all;
  for (const auto& r : rows) all += r + "\n";
  INFO(all);
  INFO(rows.size() << " rows, " << bars.size() << " with a bar");
  // torchrun's workers write to one terminal: both bars redraw the same row
  // and each close ends one, two rows in all. Here: one row per rank, each
  // showing its last update, prefixed (before: 42 rows, one per update).
  REQUIRE(bars.size() == 2);
  std::sort(bars.begin(), bars.end());
  CHECK(bars[0].rfind("[rank 0]:bar0: 100%", 0) == 0);
  CHECK(bars[1].rfind("[rank 1]:bar1: 100%", 0) == 0);
  CHECK_THAT(bars[0], Catch::Contains("20/20"));
  CHECK_THAT(bars[1], Catch::Contains("20/20"));
}

// Not run by ctest ([.]): the same two bars under torch 2.x's torchrun (.venv),
// for the figure in docs/reliability.md.
TEST_CASE("two ranks drawing tqdm bars under torchrun", "[.][figure]") {
  TempDir dir;
  const fs::path torchrun = fs::path(DDP_SOURCE_DIR) / ".venv/bin/torchrun";
  if (!fs::exists(torchrun) || run({kPython, "-c", "import tqdm"}, dir.path()).code != 0) {
    WARN("needs .venv/bin/torchrun and python3-tqdm");
    return;
  }
  write_two_bars(dir);
  // tqdm is pure Python: the venv's workers import Debian's copy.
  fs::create_directories(dir / "site");
  fs::create_directory_symlink("/usr/lib/python3/dist-packages/tqdm", dir / "site" / "tqdm");
  PtySession s(
      {torchrun.string(), "--nproc_per_node=2", (dir / "bars.py").string(), (dir / "turns").string()},
      dir.path().string(), clean_env({{"PYTHONPATH", (dir / "site").string()}}), 100, 30);
  REQUIRE(s.wait(std::chrono::seconds(120)) == std::optional<int>(0));
  const auto bars = bar_rows_of(s.screen());
  std::string all;
  for (const auto& r : bars) all += r + "\n";
  WARN("torchrun: " << bars.size() << " rows with a bar:\n" << all);
}

TEST_CASE("before the workers' first line, ddprun's default output fits two rows of a 100-column terminal") {
  TempDir dir;
  write_file(dir / "hello.py", "print('hello')\n");
  constexpr int kCols = 100;
  // The default log level, as a user runs it.
  PtySession s(
      ddprun_argv({"--python", kPython, "--standalone", "--nproc_per_node=2", (dir / "hello.py").string()}),
      dir.path().string(), clean_env({{"PET_LOG_LEVEL", std::nullopt}, {"DDP_LOG_LEVEL", std::nullopt}}),
      kCols, 30);
  REQUIRE(s.wait(std::chrono::seconds(30)) == std::optional<int>(0));
  const auto rows = screen_rows(s.screen(), kCols);
  // ddprun's own rows up to its "started" line; a fast worker's first line may
  // come before that line (the agent logs it once the spawns are reported).
  std::vector<std::string> before;
  for (const auto& r : rows) {
    if (r.rfind("[rank ", 0) == 0) continue;
    before.push_back(r);
    if (r.find("started 2 workers") != std::string::npos) break;
  }
  std::string all;
  for (const auto& r : before) all += r + "\n";
  INFO(s.screen());
  // What a user needs: the OMP_NUM_THREADS notice torchrun gives too, and the
  // workers started (before: five lines in ten rows: no NVML here, the
  // standalone rendezvous twice, a two-row OMP notice).
  CHECK(before.size() <= 2);
  for (const auto& r : before) CHECK(r.size() < static_cast<std::size_t>(kCols));
  CHECK_THAT(all, Catch::Contains("OMP_NUM_THREADS=1") && Catch::Contains("started 2 workers"));
  CHECK_THAT(s.screen(), Catch::Contains("[rank 1]:hello"));
}

TEST_CASE("with output to a file workers see no terminal and lines arrive whole") {
  TempDir dir;
  write_file(dir / "plain.py",
             "import sys\n"
             "print('tty', sys.stdout.isatty(), sys.stderr.isatty())\n"
             "sys.stderr.write('\\rprogress 1/2\\rprogress 2/2\\n')\n");
  auto r = ddprun({"--python", kPython, (dir / "plain.py").string()}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:tty False False"));
  CHECK_THAT(r.err, Catch::Contains("[rank 0]:\rprogress 1/2\rprogress 2/2\n"));
}

TEST_CASE("a node waiting for others shows one status line, updated in place and gone once they come") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  const int port = daemon.port;
  REQUIRE(port > 0);
  auto node = [&](const std::string& word) {
    return ddprun_argv({"--nnodes=2", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=status",
                        "--no_python", "/bin/echo", word});
  };
  PtySession a(node("hello-from-a"), dir.path().string(), clean_env({}), 160, 30);
  // Redrawn in place: each update erases the line ("\r" + erase to its end)
  // and writes the new text, with no newline between two updates.
  const std::string line = "\r\x1b[Kddprun: waiting for nodes: 1 joined, 1 more needed (max 2), ";
  REQUIRE(a.wait_for(line));
  const auto first = a.screen().find(line);
  REQUIRE(a.wait_for(line, std::chrono::seconds(20), first + 1));
  const auto second = a.screen().find(line, first + 1);
  CHECK(a.screen().substr(first, second - first).find('\n') == std::string::npos);

  Process b(node("hello-from-b"), dir.path(), clean_env({}), "nodeB");
  REQUIRE(b.wait(std::chrono::seconds(60)) == std::optional<int>(0));
  REQUIRE(a.wait(std::chrono::seconds(60)) == std::optional<int>(0));
  const std::string screen = a.screen();
  INFO(screen);
  // Once the round formed the line was erased, and never drawn again: what
  // follows starts on a clean line.
  const auto last = screen.rfind(line);
  const auto erased = screen.find("\r\x1b[K", last + 1);
  REQUIRE(erased != std::string::npos);
  CHECK(screen.find("waiting for nodes", erased) == std::string::npos);
  CHECK(screen.find("hello-from-a", erased) != std::string::npos);
}

TEST_CASE("with stderr not a terminal, waiting is a plain log line, not a status line") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  const int port = daemon.port;
  REQUIRE(port > 0);
  auto r = ddprun({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                   "--rdzv_conf=join_timeout=2", "--no_python", "/bin/true"},
                  dir);
  INFO(r.err);
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("[rdzv] [info] waiting for nodes"));
  CHECK(r.err.find("\x1b[K") == std::string::npos);
}

// Each worker leads a session of its own, as torchrun's do (the kernel's
// autogroup scheduler shares CPU time between sessions first), and its
// pseudo-terminal is that session's controlling terminal, in the foreground.
TEST_CASE("each worker is in a session of its own whose terminal is its pty, and Ctrl-C still stops it") {
  TempDir dir;
  write_file(dir / "session.py",
             // Each line in one write: unbuffered, print() writes its pieces
             // one by one, and ddprun shows a piece that waits too long for
             // the rest of its line (a prompt) on a line of its own.
             "import os, signal, sys, time\n"
             "def say(*words):\n"
             "    os.write(1, (' '.join(str(w) for w in words) + '\\n').encode())\n"
             "def stopped(sig, frame):\n"
             "    say('stopped by', signal.Signals(sig).name)\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGINT, stopped)\n"
             "signal.signal(signal.SIGTERM, stopped)\n"
             "fields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
             "pgrp, session, tty_nr, tpgid = (int(f) for f in fields[2:6])\n"
             "fd = 0 if os.isatty(0) else 1\n"
             "say('stdin', 'tty' if fd == 0 else 'not tty',\n"
             // The leader of the worker's group (its guard) leads its session:
             // in ddprun's session, ddprun would.
             "    '| own session', session == pgrp,\n"
             "    '| controlling', tty_nr == os.fstat(fd).st_rdev,\n"
             "    '| foreground', tpgid == pgrp)\n"
             "time.sleep(600)\n");
  PtySession s(ddprun_on(dir, {"--nproc_per_node=2", "--stop_timeout=600", (dir / "session.py").string()}),
               dir.path().string(), clean_env({}));
  // Rank 0 reads the terminal: its stdin's pty is the controlling one; rank
  // 1's stdin is /dev/null, and its stdout's pty is.
  REQUIRE(s.wait_for("[rank 0]:stdin tty | own session True | controlling True | foreground True"));
  REQUIRE(s.wait_for("[rank 1]:stdin not tty | own session True | controlling True | foreground True"));
  s.type("\x03");
  const auto code = s.wait(std::chrono::seconds(60));
  INFO(s.screen());
  CHECK(code == std::optional<int>(130));
  CHECK_THAT(s.screen(), Catch::Contains("[rank 0]:stopped by SIGINT"));
  CHECK_THAT(s.screen(), Catch::Contains("[rank 1]:stopped by SIGINT"));
  CHECK(s.cooked());
}
