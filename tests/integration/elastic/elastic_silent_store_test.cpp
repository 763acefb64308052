// A silent store is a lost store: a rendezvous service that stops answering
// without closing its connections (SIGSTOP here; a frozen host or a network
// partition look the same to the agents) ends every agent with exit 3 and no
// worker left, within the keep-alive window plus the workers' stop. Built
// twice: against ddp-rendezvousd and against one etcd member.
#include <catch2/catch.hpp>

#include "elastic_support.hpp"

using namespace elastic;

TEST_CASE("elastic " ELASTIC_NAME ": a SIGSTOPped store stops every worker and both agents exit 3") {
  TempDir dir;
  Service svc(dir);
  // Keep-alive window 1 s x 3 = 3 s. The interval is 1 s on purpose: each
  // keepalive request may wait max(interval, 1 s) for its answer, and with
  // shorter intervals even a failed keepalive that reset the silence clock
  // (the bug this guards against) would leave gaps longer than the window.
  const std::string conf =
      "last_call_timeout=0.3,keep_alive_interval=1,keep_alive_max_attempt=3,join_timeout=30";
  Agent a(dir, "a", AgentOptions{svc.backend(), svc.endpoint(), "2:2", 2, conf, {{"FAKE_HANG", "1"}}});
  Agent b(dir, "b", AgentOptions{svc.backend(), svc.endpoint(), "2:2", 2, conf, {{"FAKE_HANG", "1"}}});
  REQUIRE(wait_until([&] { return a.started().size() == 2 && b.started().size() == 2; }, 30s));

  svc.signal(SIGSTOP);
  // 20 s is many windows; docs/performance.md has the measured time.
  const auto ca = a.proc->wait(20s);
  const auto cb = b.proc->wait(20s);
  svc.signal(SIGCONT);
  check_store_lost(a, ca, b, cb, "no answer from");
}

TEST_CASE("elastic " ELASTIC_NAME
          ": a store falling silent while a node's workers use their stop grace ends it") {
  TempDir dir;
  Service svc(dir);
  const std::string conf =
      "last_call_timeout=0.3,keep_alive_interval=1,keep_alive_max_attempt=3,join_timeout=30";
  // a's worker fails once; b's ignores the SIGTERM of the restart, so b would
  // wait out its whole --stop_timeout while a re-forms.
  Agent a(dir, "a",
          AgentOptions{svc.backend(), svc.endpoint(), "2:2", 1, conf, {{"FAKE_FAIL_ON_RESTART_BELOW", "1"}}});
  Agent b(dir, "b",
          AgentOptions{svc.backend(),
                       svc.endpoint(),
                       "2:2",
                       1,
                       conf,
                       {{"FAKE_HANG", "1"}, {"FAKE_IGNORE_SIGTERM", "1"}},
                       3,
                       "job",
                       {"--stop_timeout=60"}});
  const bool b_stopping =
      wait_until([&] { return contains(b.proc->err(), "stopping 1 workers with SIGTERM"); }, 30s);
  if (!b_stopping) {
    INFO("agent a:\n" << a.proc->err());
    INFO("agent b:\n" << b.proc->err());
    REQUIRE(b_stopping);
  }

  // The store may now count b gone at any moment, and a start a world without
  // it: b's workers must not see out their 60 s.
  svc.signal(SIGSTOP);
  const auto cb = b.proc->wait(20s);
  svc.signal(SIGCONT);
  INFO("agent b:\n" << b.proc->err());
  CHECK(cb == std::optional<int>(3));
  CHECK(all_dead(b.started()));
  // The keep-alive finds the store gone (while b still waits for its worker,
  // "store lost while stopping workers", or in the next round's rendezvous,
  // which b starts beside the stop), or that rendezvous's own call finds it
  // silent first ("store at …" on ddp-rendezvousd, "etcd at …" on etcd): each
  // ends b with its workers killed, none of them after 60 s.
  const auto err = b.proc->err();
  CHECK((contains(err, "ddprun: error: rendezvous store lost") || contains(err, "ddprun: error: store at ") ||
         contains(err, "ddprun: error: etcd at ")));
}
