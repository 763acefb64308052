#include "ddp/agent/failure_report.hpp"

#include <signal.h>

#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace ddp::agent;
using ddp::test::TempDir;
using ddp::test::write_file;

TEST_CASE("torch's @record error file gives message, traceback and timestamp") {
  TempDir dir;
  write_file(dir / "error.json",
             R"({"message": {"message": "RuntimeError: boom", "extraInfo": )"
             R"({"py_callstack": "Traceback (most recent call last):\n  x", "timestamp": "1700000000"}}})");
  const auto content = read_error_file(dir / "error.json").content;
  REQUIRE(content);
  CHECK(content->message == "RuntimeError: boom");
  CHECK(content->traceback == "Traceback (most recent call last):\n  x");
  CHECK(content->timestamp == "1700000000");
}

TEST_CASE("an error file's exception type is read from extraInfo, and torch's has none") {
  TempDir dir;
  write_file(dir / "typed.json",
             R"({"message": {"message": "ddp::MembershipChanged: left", "extraInfo": )"
             R"({"py_callstack": "", "timestamp": "1", "error_type": "ddp::MembershipChanged"}}})");
  const auto typed = read_error_file(dir / "typed.json").content;
  REQUIRE(typed);
  CHECK(typed->error_type == "ddp::MembershipChanged");
  write_file(dir / "torch.json",
             R"({"message": {"message": "ddp::MembershipChanged: quoted", "extraInfo": {}}})");
  const auto torch = read_error_file(dir / "torch.json").content;
  REQUIRE(torch);
  CHECK(torch->error_type.empty());
}

TEST_CASE("the plain string form of an error file is accepted") {
  TempDir dir;
  write_file(dir / "error.json", R"({"message": "plain failure"})");
  const auto content = read_error_file(dir / "error.json").content;
  REQUIRE(content);
  CHECK(content->message == "plain failure");
  CHECK(content->traceback.empty());
}

TEST_CASE("a missing error file gives nothing, and a malformed one gives why it is not used") {
  TempDir dir;
  const auto none = read_error_file(dir / "none.json");
  CHECK_FALSE(none.content);
  CHECK(none.problem.empty());
  write_file(dir / "bad.json", "{not json");
  CHECK_FALSE(read_error_file(dir / "bad.json").content);
  CHECK_THAT(read_error_file(dir / "bad.json").problem,
             Catch::StartsWith("it is not valid JSON: parse error"));
  write_file(dir / "other.json", R"({"error": "x"})");
  CHECK_FALSE(read_error_file(dir / "other.json").content);
  CHECK(read_error_file(dir / "other.json").problem == "it holds no \"message\"");
}

TEST_CASE("an error file nested past the bound is refused by its depth, and the report says so") {
  TempDir dir;
  write_file(dir / "deep.json",
             R"({"message": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  const auto read = read_error_file(dir / "deep.json");
  CHECK_FALSE(read.content);
  CHECK(read.problem == "it nests 100001 levels deep; at most 64 are read");

  FailureReport r;
  WorkerFailure f;
  f.exit_code = 1;
  f.error_file = (dir / "deep.json").string();
  f.error_file_problem = read.problem;
  r.failures.push_back(f);
  CHECK_THAT(render_text(r),
             Catch::Contains("error file : " + f.error_file + " (not used: " + read.problem + ")"));
  CHECK_THAT(render_json(r), Catch::Contains(R"("error_file_problem": ")" + read.problem));
}

TEST_CASE("signals are reported by name") {
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGABRT) == "SIGABRT");
}

namespace {
FailureReport sample() {
  const auto t0 = std::chrono::system_clock::now();
  FailureReport r;
  r.run_id = "job";
  r.role = "default";
  r.attempt = 1;
  r.restart_count = 1;
  r.max_restarts = 1;
  WorkerFailure late;
  late.host = "node-a";
  late.rank = 0;
  late.local_rank = 0;
  late.pid = 100;
  late.exit_code = 1;
  late.time = t0 + std::chrono::milliseconds(50);
  WorkerFailure first;
  first.host = "node-a";
  first.rank = 3;
  first.local_rank = 3;
  first.pid = 103;
  first.signal = SIGSEGV;
  first.time = t0;
  first.error_file = "/logs/error.json";
  first.error = ErrorFileContent{"RuntimeError: CUDA out of memory", "Traceback:\n  frame", "1", ""};
  first.stderr_tail = {"about to crash", "last words"};
  r.failures = {late, first};
  return r;
}
}  // namespace

TEST_CASE("the root cause is the earliest failure") { CHECK(sample().root_cause() == 1); }

TEST_CASE("the text report leads with the root cause and lists the others one line each") {
  const auto text = render_text(sample());
  const auto root = text.find("Root cause");
  const auto others = text.find("Other failures");
  REQUIRE(root != std::string::npos);
  REQUIRE(others != std::string::npos);
  CHECK(root < others);
  const auto root_part = text.substr(root, others - root);
  CHECK_THAT(root_part, Catch::Contains("rank       : 3 (local_rank 3)"));
  CHECK_THAT(root_part, Catch::Contains("signal SIGSEGV"));
  CHECK_THAT(root_part, Catch::Contains("pid        : 103"));
  CHECK_THAT(root_part, Catch::Contains("host       : node-a"));
  CHECK_THAT(root_part, Catch::Contains("RuntimeError: CUDA out of memory"));
  CHECK_THAT(root_part, Catch::Contains("    Traceback:"));
  CHECK_THAT(root_part, Catch::Contains("    last words"));
  CHECK_THAT(text.substr(others),
             Catch::Contains("rank 0 (local_rank 0, host node-a, pid 100): exit code 1"));
}

TEST_CASE("the JSON report orders failures by time and names the signal") {
  const auto json = render_json(sample());
  CHECK_THAT(json, Catch::Contains(R"("signal": "SIGSEGV")"));
  CHECK_THAT(json, Catch::Contains(R"("message": "RuntimeError: CUDA out of memory")"));
  CHECK(json.find(R"("pid": 103)") < json.find(R"("pid": 100)"));
}

TEST_CASE("invalid UTF-8 in worker output does not break the JSON report") {
  auto r = sample();
  r.failures[1].stderr_tail = {std::string("bad \xff\xfe bytes")};
  CHECK_NOTHROW(render_json(r));
}

TEST_CASE("a Python traceback in both the error file and stderr is printed once") {
  auto r = sample();
  auto& f = r.failures[1];
  f.error = ErrorFileContent{
      "ValueError: bad batch",
      "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: bad batch", "1", ""};
  f.stderr_tail = {"Traceback (most recent call last):", "  File \"t.py\", line 3", "ValueError: bad batch"};
  f.stderr_log = "/logs/stderr.log";
  const auto text = render_text(r);
  size_t n = 0;
  for (auto at = text.find("ValueError: bad batch\n"); at != std::string::npos;
       at = text.find("ValueError: bad batch\n", at + 1)) {
    ++n;
  }
  CHECK(n == 2);  // the message line and the traceback's last line, not the stderr copy
  CHECK_THAT(text, Catch::Contains("stderr     : /logs/stderr.log"));
  CHECK_THAT(text, !Catch::Contains("ddp::run"));
}

TEST_CASE("a Python worker without an error file is pointed at torch's record, not ddp::run") {
  auto r = sample();
  auto& f = r.failures[1];
  f.error.reset();
  f.stderr_tail = {"  File \"t.py\", line 3", "ValueError: bad batch"};
  const auto text = render_text(r);
  CHECK_THAT(text, Catch::Contains("torch.distributed.elastic.multiprocessing.errors.record"));
  CHECK_THAT(text, !Catch::Contains("ddp::run"));
}

TEST_CASE("a failure record whose integer fields are not integers that fit is refused, not converted") {
  const std::string ok = R"({"node":"n1","host":"h","round":2,"rank":3,"time_unix_ms":5,"failure":"x"})";
  REQUIRE(ddp::agent::decode_failure_record(ok).has_value());
  CHECK(ddp::agent::decode_failure_record(ok).value().rank == 3);
  // 1e80 would be undefined behaviour to convert (UBSan aborts on it).
  for (const char* field : {R"("rank":1e80)", R"("rank":2.5)", R"("rank":4294967296)", R"("round":1e80)",
                            R"("time_unix_ms":-1e300)", R"("round":18446744073709551615)"}) {
    std::string text = ok;
    const std::string name = std::string(field).substr(0, std::string(field).find(':'));
    const auto at = text.find(name);
    text.replace(at, text.find_first_of(",}", at) - at, field);
    INFO(text);
    CHECK_FALSE(ddp::agent::decode_failure_record(text).has_value());
  }
}
