// ddp-store against the real ddp-rendezvousd: output and exit codes as a user sees them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "store_cli_daemon.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::test;
using ddp::test::store_cli::Daemon;

TEST_CASE("ddp-store set then get prints the value", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  auto set = d.cli({"set", "greeting", "hello world"});
  REQUIRE(set.code == 0);
  auto get = d.cli({"get", "greeting"});
  CHECK(get.code == 0);
  CHECK(get.out == "hello world\n");
  auto add = d.cli({"add", "n", "41"});
  CHECK(add.out == "41\n");
  CHECK(d.cli({"add", "n", "1"}).out == "42\n");
  auto list = d.cli({"list", ""});
  CHECK(list.code == 0);
  CHECK(list.out == "greeting\thello world\nn\t42\n");
  auto cas = d.cli({"cas", "greeting", "hello world", "bye"});
  CHECK(cas.code == 0);
  CHECK(cas.out == "bye\n");
  auto cas_miss = d.cli({"cas", "greeting", "not it", "x"});
  CHECK(cas_miss.code == 1);
  CHECK(cas_miss.out == "bye\n");
  CHECK(d.cli({"del", "greeting"}).code == 0);
  CHECK(d.cli({"del", "greeting"}).code == 1);
  auto stat = d.cli({"stat"});
  CHECK(stat.code == 0);
  CHECK_THAT(stat.out, Contains("keys 1\n"));
}

TEST_CASE("ddp-store get of a missing key with --timeout exits 1", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  auto r = d.cli({"get", "absent", "--timeout", "0.2"});
  CHECK(r.code == 1);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Contains("absent") && Contains("timed out"));
  auto now = d.cli({"get", "absent"});
  CHECK(now.code == 1);
  CHECK_THAT(now.err, Contains("'absent' not found"));
}

TEST_CASE("ddp-store wait returns when the keys appear and exits 1 on timeout", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  auto timeout = d.cli({"wait", "a", "b", "--timeout", "0.3"});
  CHECK(timeout.code == 1);
  CHECK_THAT(timeout.err, Contains("'a'") && Contains("'b'"));
  d.cli({"set", "a", "1"});
  d.cli({"set", "b", "2"});
  CHECK(d.cli({"wait", "a", "b", "--timeout", "5"}).code == 0);
}

TEST_CASE("ddp-store watch --count 2 prints two events and exits", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  Process watcher(
      {bin("ddp-store").string(), "--endpoint", d.endpoint(), "watch", "job/", "--from", "1", "--count", "2"},
      dir.path(), {}, "watch");
  // Watching from revision 1 replays these even if they land before the watch starts.
  REQUIRE(d.cli({"set", "job/x", "1"}).code == 0);
  REQUIRE(d.cli({"set", "other", "ignored"}).code == 0);
  REQUIRE(d.cli({"del", "job/x"}).code == 0);
  auto code = watcher.wait(20s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(watcher.out() == "PUT job/x 1\nDELETE job/x\n");
}

TEST_CASE("ddp-store usage errors exit 2 with one line naming the problem", "[cli]") {
  TempDir dir;
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin("ddp-store").string());
    return ddp::test::run(args, dir.path());
  };
  auto no_endpoint = run({"get", "k"});
  CHECK(no_endpoint.code == 2);
  CHECK_THAT(no_endpoint.err, Contains("--endpoint"));
  auto bad_endpoint = run({"--endpoint", "nohostport", "get", "k"});
  CHECK(bad_endpoint.code == 2);
  CHECK_THAT(bad_endpoint.err, Contains("--endpoint") && Contains("nohostport"));
  auto bad_count = run({"--endpoint", "127.0.0.1:1", "watch", "p", "--count", "many"});
  CHECK(bad_count.code == 2);
  CHECK_THAT(bad_count.err, Contains("--count"));
  auto unknown = run({"--endpoint", "127.0.0.1:1", "frobnicate"});
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.err, Contains("frobnicate"));
  for (const auto* r : {&no_endpoint, &bad_endpoint, &bad_count, &unknown}) {
    CHECK(std::count(r->err.begin(), r->err.end(), '\n') == 1);
  }
}

TEST_CASE("ddp-store exits 3 naming the endpoint when nothing listens", "[cli]") {
  TempDir dir;
  int port = 0;
  {
    Daemon d(dir);  // learn a port that was free, then let it close again
    port = std::stoi(ddp::test::read_file(dir / "port"));
  }
  const auto endpoint = "127.0.0.1:" + std::to_string(port);
  auto r = ddp::test::run({bin("ddp-store").string(), "--endpoint", endpoint, "--timeout", "0.5", "get", "k"},
                          dir.path());
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Contains(endpoint));
}

TEST_CASE("ddp-store with a wrong token exits 2 and says to check --token-file", "[cli]") {
  TempDir dir;
  Daemon d(dir, "right-token");
  ddp::test::write_file(dir / "wrong", "wrong-token\n");
  auto wrong = d.cli({"--token-file", (dir / "wrong").string(), "get", "k"}, false);
  CHECK(wrong.code == 2);
  CHECK_THAT(wrong.err, Contains("authentication failed") && Contains("--token-file"));
  auto none = d.cli({"get", "k"}, false);
  CHECK(none.code == 2);
  CHECK(d.cli({"set", "k", "v"}).code == 0);
  CHECK(d.cli({"get", "k"}).out == "v\n");
}
