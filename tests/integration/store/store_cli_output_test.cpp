// What ddp-store prints of the store's content, which anyone with access to
// the store wrote: a hostile record or value costs its own line, never the
// command, and never reaches the operator's terminal as control sequences.
#include <catch2/catch.hpp>
#include <string>

#include "ddp/store/tcp_store.hpp"
#include "pty_session.hpp"
#include "store_cli_daemon.hpp"
#include "test_support.hpp"

using Catch::Matchers::Contains;
using ddp::test::TempDir;
using ddp::test::store_cli::Daemon;

namespace {

// Writes a key as any client of the store can: ddp-store set takes its value
// from argv, which the kernel caps at 128 KiB, and these records are larger.
void put(const Daemon& d, const std::string& key, const std::string& value) {
  ddp::store::TcpStoreOptions o;
  o.endpoint = ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(d.endpoint().substr(10)))};
  ddp::store::TcpStore(o).set(key, value);
}

// What an operator's terminal shows of a command: ddp-store on a pseudo-terminal.
std::string on_terminal(const Daemon& d, std::vector<std::string> args) {
  args.insert(args.begin(), {ddp::test::bin("ddp-store").string(), "--endpoint", d.endpoint()});
  ddp::test::PtySession pty(args, ddp::test::fs::temp_directory_path().string(), {});
  const auto code = pty.wait(std::chrono::seconds(20));
  REQUIRE(code);
  CHECK(*code == 0);
  return pty.screen();
}

// A value that, printed raw, would colour the terminal, retitle its window
// and hide text behind a right-to-left override.
const std::string kHostile =
    "a\x1b[31mRED\x1b]0;pwned\x07"
    "b\xe2\x80\xae"
    "evil\nPUT /forged x";
const std::string kShown = R"(a\x1b[31mRED\x1b]0;pwned\x07b\u202eevil\nPUT /forged x)";

const std::string kGoodRecord =
    R"({"node":"n1","host":"gpu1","group_rank":0,"group_world_size":2,"rank_first":0,"rank_last":3,)"
    R"("round":1,"restart_count":0,"max_restarts":3,"state":"running","workers":[]})";

}  // namespace

TEST_CASE("ddp-store status with a record nested 100000 deep names that record and shows the others",
          "[cli]") {
  TempDir dir;
  Daemon d(dir);
  put(d, "/job/agent/status/n1", kGoodRecord);
  put(d, "/job/agent/status/n2",
      R"({"node":)" + std::string(100000, '[') + std::string(100000, ']') + R"(,"host":"gpu2"})");
  const auto r = d.cli({"status", "--rdzv_id", "job"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains("n1    gpu1"));
  CHECK_THAT(r.out, Contains("unreadable"));
  CHECK(r.err ==
        "ddp-store: record /job/agent/status/n2 nests 100001 levels deep; at most 64 are read; shown as "
        "unreadable\n");
}

TEST_CASE("ddp-store status shows control characters in records as escapes", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  put(d, "/job/agent/status/n1",
      R"({"node":"n1","host":"gpu1\u001b[2J\u001b]0;pwned\u0007","state":"running\u202e"})");
  const auto r = d.cli({"status", "--rdzv_id", "job"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Contains(R"(gpu1\x1b[2J\x1b]0;pwned\x07)"));
  CHECK_THAT(r.out, Contains(R"(running\u202e)"));
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\x07') == std::string::npos);
}

TEST_CASE("ddp-store to a pipe prints store values byte for byte", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  put(d, "k", kHostile);
  CHECK(d.cli({"get", "k"}).out == kHostile + "\n");
  CHECK(d.cli({"list", "k"}).out == "k\t" + kHostile + "\n");
  CHECK(d.cli({"watch", "k", "--from", "1", "--count", "1"}).out == "PUT k " + kHostile + "\n");
  // Unless asked to escape: then one entry per line, whatever the values hold.
  CHECK(d.cli({"--escape", "always", "list", "k"}).out == "k\t" + kShown + "\n");
}

TEST_CASE("ddp-store on a terminal shows control characters in keys and values as escapes", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  put(d, "k", kHostile);
  put(d, "\x1b[2Jkey", "v");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"get", "k"}, {"list", "k"}, {"watch", "k", "--from", "1", "--count", "1"}, {"list", ""}}) {
    const auto screen = on_terminal(d, args);
    INFO(args.front() << ": " << screen);
    CHECK(screen.find('\x1b') == std::string::npos);
    CHECK(screen.find('\x07') == std::string::npos);
    CHECK(screen.find("\xe2\x80\xae") == std::string::npos);
  }
  CHECK_THAT(on_terminal(d, {"get", "k"}), Contains(R"(a\x1b[31mRED\x1b]0;pwned\x07b\u202eevil)"));
  CHECK_THAT(on_terminal(d, {"list", ""}), Contains(R"(\x1b[2Jkey)"));
  // get shows one value: its newlines stay newlines.
  CHECK_THAT(on_terminal(d, {"get", "k"}), Contains("evil\r\nPUT /forged x"));
  // --escape never: the raw bytes, as to a pipe.
  CHECK_THAT(on_terminal(d, {"--escape", "never", "get", "k"}), Contains("\x1b[31mRED"));
}

TEST_CASE("ddp-store error lines show control characters as escapes", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  const auto r = d.cli({"get", "\x1b[2Jmissing"});
  CHECK(r.code == 1);
  CHECK(r.err == "ddp-store: key '\\x1b[2Jmissing' not found\n");
}

TEST_CASE("ddp-store status counts each round's worker keys, as listing them would", "[cli]") {
  TempDir dir;
  Daemon d(dir);
  put(d, "/job/agent/status/n1", kGoodRecord);
  std::vector<std::pair<std::string, std::string>> keys;
  for (int i = 0; i < 1000; ++i) keys.emplace_back("/job/worker/round_2/rank_" + std::to_string(i), "v");
  for (const char* k : {"/job/worker/round_0/a", "/job/worker/round_0/b", "/job/worker/round_0/pg/0/store",
                        "/job/worker/round_1", "/job/worker/round_10/a", "/job/worker/round_10/b/c",
                        "/job/worker/round_20/a", "/job/worker/round_x/y", "/job/worker/other",
                        "/job/workerless/round_3/a", "/other/worker/round_3/a"}) {
    keys.emplace_back(k, std::string(1000, 'x'));
  }
  ddp::store::TcpStoreOptions o;
  o.endpoint = ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(d.endpoint().substr(10)))};
  ddp::store::TcpStore store(o);
  store.multi_set(keys);

  // The server's count, child by child, is what counting a listing gives.
  const auto counted = store.count_children("/job/worker/");
  const auto listed = store.Store::count_children("/job/worker/");
  REQUIRE(counted.size() == listed.size());
  for (std::size_t i = 0; i < counted.size(); ++i) {
    CHECK(counted[i].child == listed[i].child);
    CHECK(counted[i].keys == listed[i].keys);
  }
  CHECK(counted.size() == 7);

  const auto r = d.cli({"status", "--rdzv_id", "job"});
  CHECK(r.code == 0);
  const auto table = r.out.substr(r.out.find("ROUND  WORKER_KEYS"));
  CHECK(table ==
        "ROUND  WORKER_KEYS  PREFIX\n"
        "20     1            /job/worker/round_20/\n"
        "10     2            /job/worker/round_10/\n"
        "2      1000         /job/worker/round_2/\n"
        "1      1            /job/worker/round_1/\n"
        "0      3            /job/worker/round_0/\n");
}
