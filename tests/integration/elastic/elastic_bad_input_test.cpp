// ddprun --rdzv_backend=c10d bad input (docs/errors.md): MIN > MAX, a node
// whose --nnodes disagrees with the job's (a MAX below the nodes present), an
// unreachable endpoint, a wrong token; and run-id isolation on one daemon.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "elastic_support.hpp"

using namespace elastic;

namespace {

const std::string kConf =
    "last_call_timeout=0.3,keep_alive_interval=0.2,keep_alive_max_attempt=3,join_timeout=30";

// The one "ddprun: error: ..." line of an agent's stderr.
std::string error_line(const std::string& err) {
  const auto at = err.find("ddprun: error:");
  if (at == std::string::npos) return "";
  return err.substr(at, err.find('\n', at) - at);
}

// An agent refused before it started a worker: exit 2 within `timeout`, no
// worker started. Returns its error line, for the test to check what it names.
std::string refusal_line(const Agent& a, std::chrono::seconds timeout = 20s) {
  const auto code = a.proc->wait(timeout);
  INFO(a.proc->err());
  REQUIRE(code == std::optional<int>(2));
  CHECK(a.started().empty());
  return error_line(a.proc->err());
}

// Something that is not a store on 0.0.0.0:<port>: for each connection it
// reads what comes, then answers `reply` (if any) and closes (if asked).
class NotAStore {
 public:
  NotAStore(std::string reply, bool close_after) : reply_(std::move(reply)), close_(close_after) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~NotAStore() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    for (int c : conns_) ::close(c);
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (true) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[256];
      (void)::recv(c, buf, sizeof buf, 0);
      if (!reply_.empty()) (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      if (close_) {
        ::close(c);
      } else {
        conns_.push_back(c);
      }
    }
  }
  std::string reply_;
  bool close_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::vector<int> conns_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("elastic bad input: an endpoint that is not a store exits 2 within seconds saying what answered") {
  struct Case {
    const char* name;
    std::string reply;
    bool close;
    std::string says;
  };
  for (const Case& c : {Case{"an HTTP server", "HTTP/1.1 400 Bad Request\r\n\r\n", false,
                             "answered 'HTTP/1.1 400 Bad Request'"},
                        Case{"a server that hangs up", "", true, "closed the connection without answering"},
                        Case{"a silent server", "", false, "did not answer the handshake within 5 s"}}) {
    INFO(c.name);
    TempDir dir;
    NotAStore other(c.reply, c.close);
    // join_timeout stays long: the answer must come from what the endpoint did.
    Agent a(dir, "a", AgentOptions{"c10d", other.endpoint(), "1:1", 1, "join_timeout=600"});
    const auto line = refusal_line(a, 30s);
    INFO(a.proc->err());
    CHECK(contains(line, "--rdzv_endpoint " + other.endpoint()));
    CHECK(contains(line, c.says));
    CHECK(contains(line, "not a ddp-rendezvousd or ddprun store"));
  }
}

TEST_CASE("elastic bad input: --nnodes=3:2 (MIN > MAX) exits 2 naming the flag") {
  TempDir dir;
  Daemon d(dir);
  Agent a(dir, "a", AgentOptions{"c10d", d.endpoint(), "3:2", 1, kConf});
  const auto line = refusal_line(a);
  INFO(a.proc->err());
  CHECK(contains(line, "--nnodes"));
}

TEST_CASE(
    "elastic bad input: a node with --nnodes=1:2 joining a full 2:2 job exits 2 and the job is not "
    "disturbed") {
  TempDir dir;
  Daemon d(dir);
  Agent a(dir, "a", AgentOptions{"c10d", d.endpoint(), "2:2", 1, kConf, {{"FAKE_HANG", "1"}}});
  Agent b(dir, "b", AgentOptions{"c10d", d.endpoint(), "2:2", 1, kConf, {{"FAKE_HANG", "1"}}});
  REQUIRE(wait_until([&] { return a.started().size() == 1 && b.started().size() == 1; }, 30s));
  Agent c(dir, "c", AgentOptions{"c10d", d.endpoint(), "1:2", 1, kConf});
  REQUIRE(c.proc->wait(20s) == std::optional<int>(2));
  const auto line = error_line(c.proc->err());
  INFO(c.proc->err());
  CHECK(contains(line, "--nnodes"));
  CHECK(contains(line, "1:2"));
  CHECK(contains(line, "2:2"));
  CHECK(c.started().empty());
  CHECK(a.proc->running());
  CHECK(b.proc->running());
  CHECK(a.started().size() == 1);
  CHECK_FALSE(contains(a.proc->err(), "round event"));
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait(20s).has_value());
  CHECK(b.proc->wait(20s).has_value());
}

TEST_CASE("elastic bad input: an unreachable endpoint fails after join_timeout with exit 2 naming it") {
  TempDir dir;
  // Not this machine (so no agent hosts it) and nothing answers: TEST-NET-1.
  const std::string endpoint = "192.0.2.1:29400";
  Agent a(dir, "a", AgentOptions{"c10d", endpoint, "2:2", 1, "join_timeout=1,keep_alive_interval=0.2"});
  // Exit 2 as for etcd (docs/errors.md): nobody serving the endpoint is a
  // configuration mistake, unlike a round that does not fill in time (3).
  REQUIRE(a.proc->wait(30s) == std::optional<int>(2));
  const auto line = error_line(a.proc->err());
  INFO(a.proc->err());
  CHECK(contains(line, endpoint));
  CHECK(contains(line, "within 1000 ms"));  // it kept trying for the whole join_timeout
  CHECK(contains(line, "--rdzv_endpoint"));
}

TEST_CASE("elastic bad input: an unresolvable endpoint is named at once, not only after join_timeout") {
  TempDir dir;
  // RFC 2606: .invalid never resolves (a typo in the head node's name).
  const std::string endpoint = "no-such-head.invalid:29400";
  Agent a(dir, "a", AgentOptions{"c10d", endpoint, "1:1", 1, "join_timeout=600"});
  const std::string notice = "cannot reach " + endpoint + " yet (";
  REQUIRE(wait_until([&] { return contains(a.proc->err(), notice); }, 30s));
  const auto err = a.proc->err();
  INFO(err);
  const auto at = err.find(notice);
  const auto line = err.substr(at, err.find('\n', at) - at);
  CHECK(contains(line, "no-such-head.invalid"));
  CHECK(contains(line, "retrying until "));
  CHECK(contains(line, "(--rdzv_conf join_timeout)"));
  // One line, then one per 30 s: not one per retry.
  CHECK(err.find(notice, at + 1) == std::string::npos);
  CHECK(a.proc->running());
  a.proc->signal(SIGTERM);
  CHECK(a.proc->wait(20s).has_value());
  CHECK(a.started().empty());
}

TEST_CASE("elastic bad input: an endpoint that drops connects silently is named within seconds") {
  TempDir dir;
  // A listener whose accept queue is full: the kernel drops further SYNs, as
  // a firewall that drops packets does; a connect then waits for the
  // kernel's retransmits (about two minutes) unless the client gives up first.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::vector<int> fillers;
  for (int i = 0; i < 3; ++i) {
    fillers.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    ::connect(fillers.back(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  Agent agent(dir, "a", AgentOptions{"c10d", endpoint, "1:1", 1, "join_timeout=600"});
  const std::string notice = "cannot reach " + endpoint + " yet (no answer within 5 s)";
  CHECK(wait_until([&] { return contains(agent.proc->err(), notice); }, 60s));
  INFO(agent.proc->err());
  agent.proc->signal(SIGTERM);
  CHECK(agent.proc->wait(20s).has_value());
  for (int fd : fillers) ::close(fd);
  ::close(listener);
}

TEST_CASE("elastic bad input: etcd down gives up after join_timeout with the documented line") {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  Agent a(dir, "a", AgentOptions{"etcd", endpoint, "1:1", 1, "join_timeout=2"});
  REQUIRE(a.proc->wait(60s) == std::optional<int>(2));
  const auto err = a.proc->err();
  INFO(err);
  // docs/errors.md: the wording of an unreachable c10d endpoint, with the
  // join timeout it waited (before: the keep-alive window, 15 s, "etcd at ... unreachable").
  CHECK(contains(error_line(err), "ddprun: error: cannot reach the rendezvous store at " + endpoint +
                                      " (--rdzv_endpoint) after waiting 2.0s: "));
  CHECK(contains(error_line(err), "Connection refused"));
  CHECK(contains(err, "cannot reach " + endpoint + " yet ("));
  CHECK(err.find("cannot reach " + endpoint + " yet") < err.find("ddprun: error:"));
}

// torchrun's is_host=0: a client only, even when the endpoint is this
// machine and its port is free (unset, the agent would host the store there).
TEST_CASE("elastic bad input: is_host=0 with nobody serving a local endpoint fails instead of hosting") {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  Agent a(dir, "a",
          AgentOptions{"c10d", endpoint, "1:1", 1, "is_host=0,join_timeout=1,keep_alive_interval=0.2"});
  REQUIRE(a.proc->wait(30s) == std::optional<int>(2));
  const auto line = error_line(a.proc->err());
  INFO(a.proc->err());
  CHECK(contains(line, "cannot reach the rendezvous store at " + endpoint));
  CHECK_FALSE(contains(a.proc->err(), "hosting"));
}

TEST_CASE("elastic bad input: a wrong --token_file exits 2 telling to check the token") {
  TempDir dir;
  {
    std::ofstream(dir / "daemon.token") << "right-token\n";
    std::ofstream(dir / "agent.token") << "wrong-token\n";
  }
  Process daemon({bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
                  (dir / "daemon.port").string(), "--token-file", (dir / "daemon.token").string(),
                  "--log-level", "warn"},
                 dir.path(), {}, "daemon");
  const int port = ddp::test::wait_for_port_file(dir / "daemon.port");
  Agent a(dir, "a",
          AgentOptions{"c10d",
                       "127.0.0.1:" + std::to_string(port),
                       "1:1",
                       1,
                       kConf,
                       {},
                       0,
                       "job",
                       {"--token_file=" + (dir / "agent.token").string()}});
  const auto line = refusal_line(a);
  INFO(a.proc->err());
  CHECK(contains(line, "token"));
}

TEST_CASE(
    "elastic run-id isolation: two jobs on one daemon form separate worlds and see only their own keys") {
  TempDir dir;
  Daemon d(dir);
  auto opts = [&](const std::string& run_id) {
    return AgentOptions{"c10d", d.endpoint(), "2:2", 1, kConf, {{"FAKE_SLEEP_MS", "300"}}, 0, run_id};
  };
  // One agent of each job first: neither may complete a round with the other.
  Agent a1(dir, "a1", opts("jobA"));
  Agent b1(dir, "b1", opts("jobB"));
  REQUIRE(wait_until(
      [&] {
        auto r =
            ddp::test::run({bin("ddp-store").string(), "--endpoint", d.endpoint(), "list", "/"}, dir.path());
        return contains(r.out, "/jobA/rdzv/") && contains(r.out, "/jobB/rdzv/");
      },
      20s));
  CHECK(a1.started().empty());
  CHECK(b1.started().empty());
  Agent a2(dir, "a2", opts("jobA"));
  Agent b2(dir, "b2", opts("jobB"));
  for (auto* ag : {&a1, &a2, &b1, &b2}) {
    INFO(ag->proc->err());
    CHECK(ag->proc->wait(30s) == std::optional<int>(0));
  }
  const std::pair<Agent*, std::string> members[] = {
      {&a1, "jobA"}, {&a2, "jobA"}, {&b1, "jobB"}, {&b2, "jobB"}};
  for (const auto& [ag, job] : members) {
    INFO(ag->home.filename().string() << " of " << job);
    const auto ranks = ag->ranks_in_world(2);
    REQUIRE(ranks.size() == 1);
    auto env = ag->worker_env(*ranks.begin());
    CHECK(env["TORCHELASTIC_RUN_ID"] == job);
    CHECK(contains(env["DDP_STORE_PREFIX"], job));
  }
  auto listed =
      ddp::test::run({bin("ddp-store").string(), "--endpoint", d.endpoint(), "list", "/jobA/"}, dir.path());
  CHECK(contains(listed.out, "/jobA/"));
  CHECK_FALSE(contains(listed.out, "jobB"));
}
