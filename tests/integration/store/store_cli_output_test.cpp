// What ddp-store prints of the store's content, which anyone with access to
// the store wrote: a hostile record or value costs its own line, never the
// command, and never reaches the operator's terminal as control sequences.
#include <catch2/catch.hpp>
#include <string>

#include "ddp/store/tcp_store.hpp"
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
