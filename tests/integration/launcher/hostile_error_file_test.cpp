// A failing worker that leaves a hostile TORCHELASTIC_ERROR_FILE costs its own
// message in the failure report, never the agent: the report is printed (saying
// why the file was not used), the restart happens, ddprun exits 1.
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using Catch::Matchers::Contains;
using ddp::test::bin;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::launcher::count_lines;
using ddp::test::launcher::ddprun;

namespace {

// One worker that fails twice (max_restarts=1) leaving `how` as its error file.
ddp::test::RunResult fail_with_error_file(const TempDir& dir, const std::string& how) {
  return ddprun({"--nproc_per_node=1", "--max_restarts=1", "--rdzv_id=bad", "--log_dir",
                 (dir / "logs").string(), "--no_python", bin("fake_worker").string()},
                dir,
                {{"FAKE_BAD_ERROR_FILE", how},
                 {"FAKE_EXIT", "3"},
                 {"FAKE_PRINT", "1"},
                 {"FAKE_PID_FILE", (dir / "pids").string()}});
}

}  // namespace

TEST_CASE("an error file nested 100000 deep: the report says why it is not shown, and the restart happens") {
  TempDir dir;
  const auto r = fail_with_error_file(dir, "nested:100000");
  INFO(r.err.substr(0, 4000));
  CHECK(r.code == 1);
  CHECK(count_lines(read_file(dir / "pids"), " start ") == 2);
  CHECK_THAT(r.err, Contains("restarting workers (1/1)"));
  CHECK_THAT(r.err, Contains("exit       : exit code 3"));
  CHECK_THAT(r.err,
             Contains("error file : " + (dir / "logs" / "bad" / "attempt_1" / "0" / "error.json").string() +
                      " (not used: it nests 100001 levels deep; at most 64 are read)"));
  // The worker's own last words still make the report.
  CHECK_THAT(r.err, Contains("err 0 of rank 0"));
  const auto report = read_file(dir / "logs" / "bad" / "attempt_1" / "failure.json");
  CHECK_THAT(report, Contains(R"("error_file_problem": "it nests 100001 levels deep; at most 64 are read")"));
}

TEST_CASE("an error file past 4 MiB is not read, and the report says how big it was") {
  TempDir dir;
  const auto r = fail_with_error_file(dir, "bytes:5000000");
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("(not used: it is 5000000 bytes; at most 4194304 are read)"));
}

TEST_CASE("an error file that is a FIFO does not block the agent") {
  TempDir dir;
  const auto r = fail_with_error_file(dir, "fifo");
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("restarting workers (1/1)"));
  CHECK_THAT(r.err, Contains("(not used: it cannot be read: it is a FIFO, not a regular file)"));
}

TEST_CASE("an error file that is not JSON is reported as such, not as missing") {
  TempDir dir;
  ddp::test::write_file(dir / "w.sh",
                        "#!/bin/sh\nprintf '{\"message\": ' > \"$TORCHELASTIC_ERROR_FILE\"\nexit 3\n");
  ddp::test::fs::permissions(dir / "w.sh", ddp::test::fs::perms::owner_all);
  const auto r = ddprun({"--nproc_per_node=1", "--no_python", (dir / "w.sh").string()}, dir);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Contains("(not used: it is not valid JSON: parse error at line 1, column 13"));
}

TEST_CASE("terminal escapes in an error file's message are shown escaped in the report and the log") {
  TempDir dir;
  // JSON escapes in the file: the message itself holds ESC and BEL.
  const auto r =
      ddprun({"--nproc_per_node=1", "--max_restarts=1", "--rdzv_id=esc", "--log_dir", (dir / "logs").string(),
              "--no_python", bin("fake_worker").string()},
             dir, {{"FAKE_ERROR_MESSAGE", R"(boom \u001b]0;pwned\u0007\u001b[2J done)"}, {"FAKE_EXIT", "3"}});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(r.err.find('\x07') == std::string::npos);
  CHECK_THAT(r.err, Contains(R"(boom \x1b]0;pwned\x07\x1b[2J done)"));
  // failure.json keeps the bytes as they were (JSON escapes them itself).
  CHECK_THAT(read_file(dir / "logs" / "esc" / "attempt_1" / "failure.json"),
             Contains(R"(\u001b]0;pwned\u0007)"));
}
