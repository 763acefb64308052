// ddp-rendezvousd settings: precedence, --print-config, and bad input that
// must leave nothing behind (no port file, nothing listening).

#include <catch2/catch.hpp>

#include "loopback_listener.hpp"
#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> daemon(std::vector<std::string> args) {
  args.insert(args.begin(), bin("ddp-rendezvousd").string());
  return args;
}

// ddp-rendezvousd --config c.json, the file holding `json`.
RunResult daemon_with_config(const TempDir& dir, const std::string& json) {
  write_file(dir / "c.json", json);
  return run(daemon({"--config", (dir / "c.json").string()}), dir.path());
}

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST_CASE("print-config shows flag over file over env over default, with sources", "[ops][config]") {
  TempDir dir;
  write_file(dir / "d.conf",
             "{\n  \"port\": 4000,\n  \"log_level\": \"debug\",\n  \"max-connections\": 77\n}\n");
  auto r =
      run(daemon({"--config", (dir / "d.conf").string(), "--port", "5000", "--print-config"}), dir.path(),
          {{"DDP_RENDEZVOUSD_PORT", "3000"},
           {"DDP_RENDEZVOUSD_HOST", "127.0.0.2"},
           {"DDP_RENDEZVOUSD_LOG_LEVEL", "error"}});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("port                   = 5000") && Catch::Contains("(flag --port)"));
  CHECK_THAT(r.out, Catch::Contains("log_level              = debug") && Catch::Contains("d.conf:3)"));
  CHECK_THAT(r.out, Catch::Contains("max_connections        = 77") && Catch::Contains("d.conf:4)"));
  CHECK_THAT(r.out, Catch::Contains("127.0.0.2") && Catch::Contains("(env DDP_RENDEZVOUSD_HOST)"));
  CHECK_THAT(r.out, Catch::Contains("idle_frame_timeout_ms  = 30000") && Catch::Contains("(default)"));
}

TEST_CASE("config file errors name the file, line and key and exit 2", "[ops][config]") {
  TempDir dir;
  SECTION("unknown key") {
    auto r = daemon_with_config(dir, "{\n  \"port\": 0,\n  \"prot\": 1\n}\n");
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("c.json:3: unknown key 'prot'"));
  }
  SECTION("malformed JSON") {
    auto r = daemon_with_config(dir, "{\n  \"port\": 0,\n  \"host\" \"x\"\n}\n");
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("c.json:3: malformed JSON"));
  }
  SECTION("nested or sized past the bound") {
    auto r =
        daemon_with_config(dir, "{\"port\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
    CHECK(r.code == 2);
    CHECK(r.err == "ddp-rendezvousd: --config " + (dir / "c.json").string() +
                       " nests 100001 levels deep; at most 64 are read\n");
    r = daemon_with_config(dir, "{\"host\": \"" + std::string(2000000, 'x') + "\"}");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("c.json is 2000012 bytes; at most 1048576 are read"));
  }
  SECTION("bad value names its source") {
    auto r = daemon_with_config(dir, "{\"port\": 70000}");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("c.json:1 key port: '70000' is not an integer in 0..65535"));
    r = run(daemon({"--print-config"}), dir.path(), {{"DDP_RENDEZVOUSD_MAX_CONNECTIONS", "lots"}});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("DDP_RENDEZVOUSD_MAX_CONNECTIONS: 'lots'"));
    // The global request buffer cap cannot be below one largest frame (80 MiB).
    r = run(daemon({"--max-buffered-request-bytes", "1000", "--print-config"}), dir.path());
    CHECK(r.code == 2);
    CHECK_THAT(r.err,
               Catch::Contains("--max-buffered-request-bytes: '1000' is not an integer in 83886080.."));
    r = run(daemon({"--history-max-bytes", "0", "--print-config"}), dir.path());
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--history-max-bytes: '0' is not an integer in 1.."));
    r = run(daemon({"--idle-frame-timeout-ms", "0", "--print-config"}), dir.path());
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(
                          "--idle-frame-timeout-ms: '0' is not a number of milliseconds in 1..86400000"));
    r = run(daemon({"--print-config"}), dir.path(), {{"DDP_RENDEZVOUSD_IDLE_FRAME_TIMEOUT_MS", "1500"}});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("idle_frame_timeout_ms  = 1500"));
  }
  SECTION("missing file, and --config-if-exists skips it") {
    auto r = run(daemon({"--config", (dir / "nope.json").string()}), dir.path());
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--config " + (dir / "nope.json").string() + ": cannot read"));
    r = run(daemon({"--config-if-exists", (dir / "nope.json").string(), "--print-config"}), dir.path());
    CHECK(r.code == 0);
  }
}

TEST_CASE("bad runtime input gives one line, a non-zero exit and no port file", "[ops][config]") {
  TempDir dir;
  const auto port_file = (dir / "port").string();
  SECTION("unreadable token file") {
    auto r = run(daemon({"--host", "127.0.0.1", "--port", "0", "--port-file", port_file, "--token-file",
                         (dir / "missing.token").string()}),
                 dir.path());
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--token-file " + (dir / "missing.token").string() + ": cannot read"));
  }
  SECTION("a token file from the env is named by its variable; an empty one is refused") {
    auto r = run(daemon({"--host", "127.0.0.1", "--port", "0", "--port-file", port_file}), dir.path(),
                 {{"DDP_RENDEZVOUSD_TOKEN_FILE", (dir / "missing.token").string()}});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("DDP_RENDEZVOUSD_TOKEN_FILE " + (dir / "missing.token").string() +
                                      ": cannot read: No such file or directory"));
    write_file(dir / "empty.token", "\n");
    r = run(daemon({"--host", "127.0.0.1", "--port", "0", "--port-file", port_file, "--token-file",
                    (dir / "empty.token").string()}),
            dir.path());
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--token-file " + (dir / "empty.token").string() +
                                      ": file is empty; put the token in it"));
  }
  SECTION("store port in use") {
    const LoopbackListener held;  // the port "in use"
    auto r =
        run(daemon({"--host", "127.0.0.1", "--port", std::to_string(held.port()), "--port-file", port_file}),
            dir.path());
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("127.0.0.1:" + std::to_string(held.port())));
  }
  SECTION("metrics port in use: the store port is released too") {
    const LoopbackListener held;  // the port "in use"
    auto r = run(daemon({"--host", "127.0.0.1", "--port", "0", "--port-file", port_file, "--metrics-port",
                         std::to_string(held.port()), "--metrics-port-file", (dir / "mport").string()}),
                 dir.path());
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--metrics-port") && Catch::Contains(std::to_string(held.port())));
    CHECK_FALSE(fs::exists(dir / "mport"));
  }
  SECTION("state directory that is a file") {  // a missing one is created (0700)
    write_file(dir / "a-file", "x");
    auto r = run(daemon({"--host", "127.0.0.1", "--port", "0", "--port-file", port_file, "--data-dir",
                         (dir / "a-file").string()}),
                 dir.path());
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains((dir / "a-file").string()));
  }
  CHECK_FALSE(fs::exists(port_file));
}
