// ElasticGroup (docs/reform.md) with real processes, a real StoreServer and
// Gloo over loopback; the test plays the agent: it kills ranks, moves
// R/size and R/generation on, and starts replacements.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <regex>
#include <thread>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "test_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

namespace keys = ddp::store::keys;
// The workers' DDP_STORE_PREFIX, and R under it (docs/reform.md).
const std::string kPrefix = "job/";
const std::string kReform = keys::reform_prefix(kPrefix);

std::string worker() { return bin("ddp_sdk_elastic_worker").string(); }

// One job: a store, its ranks (by slot), and the agent's side of the protocol.
class ElasticJob {
 public:
  ElasticJob(int world, std::string mode, std::map<std::string, std::optional<std::string>> env = {})
      : world_(world), mode_(std::move(mode)), env_(std::move(env)) {
    ddp::store::StoreServerOptions options;
    options.host = "127.0.0.1";
    server_ = std::make_unique<ddp::store::StoreServer>(options);
    server_->start();
    ddp::store::TcpStoreOptions client;
    client.endpoint = ddp::parse_endpoint(endpoint(), "test store");
    store_ = std::make_unique<ddp::store::TcpStore>(client);
  }
  ~ElasticJob() {
    for (auto& [slot, p] : procs_) {
      if (p->running()) p->signal(SIGKILL);
    }
    procs_.clear();
    store_.reset();
    server_->stop();
  }

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  void start(int slot, bool joining = false) {
    auto env = env_;
    env["RANK"] = std::to_string(slot);
    env["WORLD_SIZE"] = std::to_string(world_);
    env["LOCAL_RANK"] = std::to_string(slot);
    env["LOCAL_WORLD_SIZE"] = std::to_string(world_);
    env["DDP_STORE_ENDPOINT"] = endpoint();
    env["DDP_STORE_PREFIX"] = kPrefix;
    env["TORCHELASTIC_ERROR_FILE"] = std::nullopt;
    if (!env.count("DDP_REFORM")) env["DDP_REFORM"] = "1";
    env["DDP_REFORM_JOINING"] = joining ? std::optional<std::string>("1") : std::nullopt;
    const std::string name = "slot" + std::to_string(slot) + (joining ? "_new" : "");
    procs_[name] =
        std::make_unique<Process>(std::vector<std::string>{worker(), mode_}, dir_.path(), env, name);
  }
  void start_all() {
    for (int s = 0; s < world_; ++s) start(s);
  }
  Process& proc(int slot, bool joining = false) {
    return *procs_.at("slot" + std::to_string(slot) + (joining ? "_new" : ""));
  }

  // The agent's steps 1-2 for a lost worker (docs/reform.md).
  void kill(int slot) {
    proc(slot).signal(SIGKILL);
    proc(slot).wait(10s);
  }
  ddp::store::TcpStore& store() { return *store_; }
  ddp::store::StoreServer& server() { return *server_; }
  // `members` ("slot:state," each) joined generation 0 as far as the others can tell.
  void joined(const std::string& members, int count) {
    store_->append(keys::reform_members_key(kReform, 0), members);
    store_->add(keys::reform_joined_key(kReform, 0), count);
  }
  void move_on(int size_delta) {
    store_->add(keys::reform_size_key(kReform), size_delta);
    store_->add(keys::reform_generation_key(kReform), 1);
  }
  // kill() then move_on(): the agent's steps for a worker it does not replace.
  void lose(int slot) {
    kill(slot);
    move_on(-1);
  }
  void stop() { store_->set("job/test/stop", "1"); }
  // `slot`'s stdout once it exited 0 (the test fails otherwise).
  std::string finished(int slot, bool joining = false, std::chrono::seconds limit = 60s) {
    if (proc(slot, joining).wait(limit) != 0) FAIL("slot " << slot << " did not exit 0\n" << describe());
    return proc(slot, joining).out();
  }
  // Waits until a reform counter (a key under R) reaches `at_least`.
  bool wait_counter(const std::string& key, std::int64_t at_least, std::chrono::seconds limit = 30s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (store_->add(key, 0) >= at_least) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  // Waits until `slot`'s stdout holds `text`.
  bool wait_for(int slot, const std::string& text, bool joining = false, std::chrono::seconds limit = 30s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (proc(slot, joining).out().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Fails the test (with every rank's output) unless each of `slots` prints `text`.
  void require_all(std::initializer_list<int> slots, const std::string& text) {
    for (int s : slots)
      if (!wait_for(s, text)) FAIL(describe());
  }
  // All 4 slots started and `steps` steps trained.
  void start_training(int steps) {
    start_all();
    require_all({0, 1, 2, 3}, "step " + std::to_string(steps) + " ok");
  }

  std::string describe() {
    std::string s;
    for (auto& [name, p] : procs_) s += "== " + name + " stdout:\n" + p->out() + "== stderr:\n" + p->err();
    return s;
  }

 private:
  TempDir dir_;
  int world_;
  std::string mode_;
  std::map<std::string, std::optional<std::string>> env_;
  std::unique_ptr<ddp::store::StoreServer> server_;
  std::unique_ptr<ddp::store::TcpStore> store_;
  std::map<std::string, std::unique_ptr<Process>> procs_;
};

// The number after `key=` on the line starting with `line`, or -1.
long long field(const std::string& out, const std::string& line, const std::string& key) {
  std::smatch m;
  const std::regex re("(^|\n)" + line + "[^\n]*? " + key + "=(-?[0-9]+)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stoll(m[2].str());
}

}  // namespace

TEST_CASE("elastic: a rank killed mid-step is replaced and the job trains on in the same processes") {
  ElasticJob job(4, "train");
  job.start_training(20);
  job.kill(1);
  job.move_on(0);
  job.start(1, /*joining=*/true);
  if (!job.wait_for(1, "step ", true)) FAIL(job.describe());
  job.stop();
  for (int s : {0, 2, 3}) job.finished(s);
  const std::string fresh = job.finished(1, true);
  CHECK(field(fresh, "formed", "had_state") == 0);
  CHECK(field(fresh, "formed", "gen") == 1);
  CHECK(field(fresh, "formed", "rank") == 1);
  CHECK(field(fresh, "formed", "state_root") == 0);
  const long long final_counter = field(job.proc(0).out(), "final", "counter");
  CHECK(final_counter > 20);
  CHECK(field(fresh, "final", "counter") == final_counter);  // rank 0's state reached the newcomer
  CHECK_THAT(fresh, Catch::Contains("weight=1.5"));
  for (int s : {0, 2, 3}) {
    const std::string out = job.proc(s).out();
    INFO("slot " << s);
    CHECK(field(out, "membership changed", "left") == 0);
    const long long ms = field(out, "membership changed", "after_ms");
    CHECK(ms >= 0);
    CHECK(ms < 5000);
    CHECK(field(out, "reformed", "gen") == 1);
    CHECK(field(out, "reformed", "rank") == s);  // same ranks with a replacement
    CHECK(field(out, "reformed", "size") == 4);
    CHECK(field(out, "reformed", "had_state") == 1);
    CHECK(field(out, "reformed", "state_root") == 0);
    CHECK_THAT(out, Catch::Contains("lost=[] new=[1]"));
    CHECK(field(out, "final", "counter") == final_counter);
    CHECK(field(out, "final", "size") == 4);
  }
}

TEST_CASE("elastic: without a replacement the survivors re-form smaller and keep their order") {
  ElasticJob job(4, "train");
  job.start_training(5);
  job.lose(1);
  job.require_all({0, 2, 3}, "reformed");
  job.stop();
  const std::map<int, int> rank_of{{0, 0}, {2, 1}, {3, 2}};
  for (auto [s, r] : rank_of) {
    const std::string out = job.finished(s);
    CHECK(field(out, "reformed", "rank") == r);
    CHECK(field(out, "reformed", "size") == 3);
    CHECK_THAT(out, Catch::Contains("lost=[1] new=[]"));
    CHECK(field(out, "final", "size") == 3);
  }
}

TEST_CASE("elastic: a second failure during a re-form moves everyone to the later generation") {
  ElasticJob job(4, "train");
  job.start_training(5);
  job.lose(1);
  // The second failure lands once a survivor has joined generation 1.
  if (!job.wait_counter(keys::reform_joined_key(kReform, 1), 1)) FAIL(job.describe());
  job.lose(2);
  job.require_all({0, 3}, "reformed");
  job.stop();
  for (int s : {0, 3}) {
    const std::string out = job.finished(s);
    CHECK(field(out, "final", "gen") == 2);
    CHECK(field(out, "final", "size") == 2);
    CHECK(field(out, "final", "rank") == (s == 0 ? 0 : 1));
  }
}

TEST_CASE(
    "elastic: a peer that dies while generation 0 connects makes the others wait for the next "
    "generation, not exit") {
  // Slot 1 is late (its member entry written for it, its process started
  // later); slot 2 joins the process group and dies before it connects, so
  // slots 0 and 1 fail to connect to it. The generation moves on only after a
  // survivor saw that failure, as it does when an agent learns of a lost node
  // from its lease.
  ElasticJob job(3, "train", {{"ELASTIC_TEST_GLOO_TIMEOUT_S", "3"}});
  auto& store = job.store();
  job.joined("1:1,", 1);
  job.start(0);
  job.start(2);
  const std::string join = keys::reform_generation_prefix(kReform, 0) + "pg/default/0/join/";
  const auto joined = [&] { return store.check({join + "0"}) && store.check({join + "2"}); };
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!joined() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  REQUIRE(joined());
  job.kill(2);
  job.start(1);
  const std::string failed = "could not connect generation 0";
  const auto seen = [&] {
    return job.proc(1).err().find(failed) != std::string::npos || !job.proc(1).running();
  };
  const auto seen_until = std::chrono::steady_clock::now() + 30s;
  while (!seen() && std::chrono::steady_clock::now() < seen_until) std::this_thread::sleep_for(20ms);
  INFO(job.describe());
  REQUIRE(job.proc(1).err().find(failed) != std::string::npos);
  job.move_on(-1);
  job.require_all({0, 1}, "gen=1 rank=");
  job.stop();
  for (int s : {0, 1}) {
    const std::string out = job.finished(s);
    CHECK(field(out, "final", "gen") == 1);
    CHECK(field(out, "final", "size") == 2);
    CHECK(field(out, "final", "rank") == s);
  }
}

TEST_CASE(
    "elastic: a survivor left waiting for a connection from a peer lost mid-connect joins the next "
    "generation within half the stall timeout") {
  // Slot 5 gets as far as publishing its Gloo addresses for generation 0 and
  // stops there (its node cut off, or killed, before it connected). A
  // survivor that connects to slot 5 is answered by the kernel; one whose
  // port made it the listening side waits for a connection that never comes:
  // Gloo's wait is 5 times the group's 60 s. The generation moves on; the
  // survivors that formed generation 0 wait DDP_REFORM_STALL_TIMEOUT for the
  // others in generation 1, so those must give up connecting in less.
  ElasticJob job(6, "train", {{"DDP_REFORM_STALL_TIMEOUT", "8"}});
  auto& store = job.store();
  // Slots 0-4 joined as far as slot 5 can tell, so that it connects first.
  const std::string pg = keys::reform_generation_prefix(kReform, 0) + "pg/default/0/";
  job.joined("0:1,1:1,2:1,3:1,4:1,", 5);
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof host - 1) == 0);
  for (int s = 0; s < 5; ++s) {
    store.set(pg + "join/" + std::to_string(s), "1");
    store.set(pg + "gloo/rank_" + std::to_string(s), host);  // Gloo's exchange of host names
  }
  job.start(5);
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!store.check({pg + "gloo/5"}) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  INFO(job.describe());
  REQUIRE(store.check({pg + "gloo/5"}));
  job.proc(5).signal(SIGSTOP);  // waiting for slot 0's addresses: it connected nothing
  for (int s = 0; s < 5; ++s) job.start(s);
  // The survivors that did not form generation 0 wait in a connection to slot 5.
  std::this_thread::sleep_for(2s);
  int waiting = 0;
  for (int s = 0; s < 5; ++s) waiting += field(job.proc(s).out(), "formed", "gen") == 0 ? 0 : 1;
  job.kill(5);
  job.move_on(-1);
  const auto moved = std::chrono::steady_clock::now();
  for (int s = 0; s < 5; ++s)
    if (!job.wait_for(s, "gen=1 rank=", false, 30s)) FAIL("slot " << s << "\n" << job.describe());
  const auto took = std::chrono::steady_clock::now() - moved;
  INFO(waiting << " of 5 survivors were waiting for slot 5's connection");
  CHECK(took < 8s);
  job.stop();
  for (int s = 0; s < 5; ++s) {
    const std::string out = job.finished(s);
    CHECK(field(out, "final", "gen") == 1);
    CHECK(field(out, "final", "size") == 5);
    CHECK(field(out, "final", "rank") == s);
  }
}

TEST_CASE(
    "elastic: a blocking broadcast held up by a stopped rank ends in MembershipChanged once the "
    "generation moves on") {
  // Rank 1 is stopped with its connections open (a node cut off): rank 0's
  // blocking broadcast waits for it, and only the generation moving on can
  // end that wait. A broadcast run on the caller's thread would wait out
  // Gloo's 60 s timeout instead.
  ElasticJob job(2, "bcast");
  job.start_all();
  job.require_all({0, 1}, "formed");
  job.proc(1).signal(SIGSTOP);
  std::this_thread::sleep_for(200ms);  // rank 0 waits for rank 1 in its broadcast
  job.move_on(-1);
  INFO(job.describe());
  REQUIRE(job.wait_for(0, "membership changed after_ms=", false, 20s));
  CHECK(job.proc(0).wait(10s) == 0);
  CHECK(field(job.proc(0).out(), "reformed", "size") == 1);
}

TEST_CASE("elastic: check() throws MembershipChanged once the generation moves on") {
  ElasticJob job(2, "check");
  job.start_all();
  job.require_all({0, 1}, "formed");
  job.move_on(0);
  INFO(job.describe());
  for (int s = 0; s < 2; ++s) {
    REQUIRE(job.proc(s).wait(30s) == 0);
    CHECK(field(job.proc(s).out(), "check threw", "left") == 0);
  }
}

TEST_CASE("elastic: check() asks the store nothing while the generation stays, and still sees it move") {
  // Two ranks call check() 500 times each; reading R/generation each time
  // would be 1,000 requests. The store's watch pushes the move instead.
  ElasticJob job(2, "check_quiet");
  job.start_all();
  job.require_all({0, 1}, "formed");
  const auto before = job.server().stats().at("requests");
  job.store().set("job/test/go", "1");
  job.require_all({0, 1}, "checked 500");
  const auto during = job.server().stats().at("requests") - before;
  INFO(job.describe());
  CHECK(during < 100);
  job.move_on(0);
  for (int s = 0; s < 2; ++s) {
    REQUIRE(job.proc(s).wait(30s) == 0);
    CHECK(field(job.proc(s).out(), "check threw", "left") == 0);
  }
}

TEST_CASE("elastic: without DDP_REFORM=1 it is a plain process group") {
  ElasticJob job(2, "plain", {{"DDP_REFORM", std::nullopt}});
  job.start_all();
  INFO(job.describe());
  for (int s = 0; s < 2; ++s) {
    const std::string out = job.finished(s, false, 30s);
    CHECK_THAT(out, Catch::Contains("plain enabled=0 rank=" + std::to_string(s) + " size=2 sum=3"));
    CHECK_THAT(out, Catch::Contains("reform: ConfigError: ElasticGroup::reform: DDP_REFORM is not 1"));
  }
}

TEST_CASE("elastic: a slot that never joins is named when the reform timeout passes") {
  ElasticJob job(2, "train", {{"DDP_REFORM_TIMEOUT", "1"}});
  job.start(0);
  INFO(job.describe());
  REQUIRE(job.proc(0).wait(30s) == 1);
  CHECK_THAT(job.proc(0).err(), Catch::Contains("timed out after 1000 ms waiting for generation 0"));
  CHECK_THAT(job.proc(0).err(), Catch::Contains("never joined: slot(s) 1)"));
}

TEST_CASE("elastic: a re-form that waits past DDP_REFORM_STALL_TIMEOUT names its generation as stalled") {
  ElasticJob job(4, "train", {{"DDP_REFORM_STALL_TIMEOUT", "0.5"}});
  job.start_training(5);
  // Slot 2 stops (as if stuck in the kernel) and slot 1 dies: the re-form
  // of generation 1 waits for slot 2, which never joins.
  job.proc(2).signal(SIGSTOP);
  job.kill(1);
  job.move_on(0);
  job.start(1, /*joining=*/true);
  const std::string stalled = keys::reform_stalled_key(kReform);
  ddp::store::TcpStoreOptions client;
  client.endpoint = ddp::parse_endpoint(job.endpoint(), "test store");
  ddp::store::TcpStore store(client);
  std::optional<std::string> named;
  for (int i = 0; i < 3000 && !named; ++i) {
    named = store.try_get(stalled);
    if (!named) std::this_thread::sleep_for(10ms);
  }
  INFO(job.describe());
  REQUIRE(named == std::optional<std::string>("1"));
  // Slot 2 has not joined it: the agent's part, then, is slot 2's replacement.
  CHECK_THAT(store.try_get(keys::reform_members_key(kReform, 1)).value_or(""), !Catch::Contains("2:"));
  job.kill(2);
  job.move_on(0);
  job.start(2, /*joining=*/true);
  if (!job.wait_for(2, "step ", true)) FAIL(job.describe());
  job.stop();
  for (int s : {0, 3}) CHECK(field(job.finished(s), "final", "gen") == 2);
}

TEST_CASE("elastic: DDP_REFORM_STALL_TIMEOUT that is not a number gives one line naming it") {
  ElasticJob job(1, "train", {{"DDP_REFORM_STALL_TIMEOUT", "-1"}});
  job.start(0);
  REQUIRE(job.proc(0).wait(30s) == 1);
  CHECK_THAT(job.proc(0).err(), Catch::Contains("DDP_REFORM_STALL_TIMEOUT='-1' is not valid"));
}

TEST_CASE("elastic: DDP_REFORM_TIMEOUT that is not a number gives one line naming it") {
  ElasticJob job(1, "train", {{"DDP_REFORM_TIMEOUT", "soon"}});
  job.start(0);
  REQUIRE(job.proc(0).wait(30s) == 1);
  CHECK_THAT(job.proc(0).err(), Catch::Contains("DDP_REFORM_TIMEOUT='soon' is not valid"));
}

TEST_CASE("elastic: twenty re-forms leave the open file descriptors where they were") {
  ElasticJob job(3, "fds");
  job.start_all();
  INFO(job.describe());
  for (int s = 0; s < 3; ++s) {
    REQUIRE(job.proc(s).wait(120s) == 0);
    const std::string out = job.proc(s).out();
    const long long before = field(out, "fds", "before");
    const long long after = field(out, "fds", "after");
    REQUIRE(before > 0);
    CHECK(after <= before);
    CHECK(field(out, "fds", "gen") == 20);
  }
}
