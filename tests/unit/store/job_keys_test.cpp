#include "ddp/store/job_keys.hpp"

#include <catch2/catch.hpp>

using namespace ddp::store::keys;

TEST_CASE("a job's keys are built under its run id", "[job_keys]") {
  CHECK(rdzv_prefix("job") == "/job/rdzv/");
  CHECK(round_pointer_key("job") == "/job/rdzv/round");
  CHECK(round_prefix("job", 3) == "/job/rdzv/round_3/");
  CHECK(node_key(round_prefix("job", 3), 7) == "/job/rdzv/round_3/node/7");
  CHECK(worker_prefix("job", 2) == "/job/worker/round_2/");
  CHECK(worker_prefix("job", 2).starts_with(worker_root("job")));
  CHECK(agent_status_key("job", "n1") == "/job/agent/status/n1");
  CHECK(agent_status_key("job", "n1").starts_with(agent_status_prefix("job")));
}

TEST_CASE("a node key parses back to its index, and nothing else does", "[job_keys]") {
  const auto round = round_prefix("job", 1);
  CHECK(node_index(node_key(round, 12), round) == 12);
  CHECK_FALSE(node_index(round + "node/", round));
  CHECK_FALSE(node_index(round + "node/x", round));
  CHECK_FALSE(node_index(round + "node/-1", round));
  CHECK_FALSE(node_index(round + "closed", round));
  CHECK_FALSE(node_index(node_key(round_prefix("job", 2), 0), round));
}

TEST_CASE("a worker key's round is read from the part after the worker root", "[job_keys]") {
  CHECK(worker_round_of("round_4/pg/x") == 4);
  CHECK(worker_round_of("round_0") == 0);
  CHECK_FALSE(worker_round_of("attempt_1/x"));
  CHECK_FALSE(worker_round_of("round_/x"));
  CHECK_FALSE(worker_round_of("round_x/y"));
}

TEST_CASE("a round's key splits into its round and what follows, and nothing else does", "[job_keys]") {
  const auto part = round_part_of("round_3/node/0");
  REQUIRE(part);
  CHECK(part->round == 3);
  CHECK(part->what == "node/0");
  CHECK_FALSE(round_part_of("round_3"));
  CHECK_FALSE(round_part_of("round_x/closed"));
  CHECK_FALSE(round_part_of("closed"));
  CHECK(rounds_roots("job") == std::vector<std::string>{"/job/rdzv/round_", "/job/worker/round_"});
}

TEST_CASE("only a round pointer key names a run", "[job_keys]") {
  CHECK(run_of_round_pointer(round_pointer_key("job-1")) == "job-1");
  CHECK_FALSE(run_of_round_pointer("/rdzv/round"));
  CHECK_FALSE(run_of_round_pointer("//rdzv/round"));
  CHECK_FALSE(run_of_round_pointer("/a/b/rdzv/round"));
  CHECK_FALSE(run_of_round_pointer("/job/rdzv/round_1/closed"));
}

TEST_CASE("spare and excluded keys parse back to their run, and nothing else does", "[job_keys]") {
  const auto key = spare_key(round_prefix("job-1", 7), "host_12");  // the views point into it
  const auto spare = spare_of(key);
  REQUIRE(spare);
  CHECK(spare->run == "job-1");
  CHECK(spare->round == 7);
  CHECK(spare_key(round_prefix("job", 1), "n").starts_with(spares_prefix(round_prefix("job", 1))));
  CHECK_FALSE(spare_of(spares_prefix(round_prefix("job", 1))));
  CHECK_FALSE(spare_of(node_key(round_prefix("job", 1), 0)));
  CHECK_FALSE(spare_of("/job/rdzv/round_x/spare/n"));
  CHECK_FALSE(spare_of("/a/b/rdzv/round_1/spare/n"));
  CHECK(run_of_excluded(excluded_key("job", "10.0.0.3")) == "job");
  CHECK(excluded_key("job", "h").starts_with(excluded_prefix("job")));
  CHECK_FALSE(run_of_excluded(excluded_prefix("job")));
  CHECK_FALSE(run_of_excluded("/job/rdzv/round_1/closed"));
  CHECK_FALSE(run_of_excluded("//rdzv/excluded/h"));
}

TEST_CASE("status record and stragglers keys parse back to their run, and nothing else does", "[job_keys]") {
  const auto status = agent_status_key("job-1", "host_12_34");
  CHECK(run_of_status_record(status) == "job-1");
  CHECK_FALSE(run_of_status_record(agent_status_prefix("job-1")));
  CHECK_FALSE(run_of_status_record(stragglers_key("job-1")));
  CHECK_FALSE(run_of_status_record("/job/rdzv/status/n"));
  CHECK_FALSE(run_of_status_record("//agent/status/n"));
  const auto verdict = stragglers_key("job-1");
  CHECK(run_of_stragglers(verdict) == "job-1");
  CHECK_FALSE(run_of_stragglers(status));
  CHECK_FALSE(run_of_stragglers("/job/agent/stragglers/x"));
  CHECK_FALSE(run_of_stragglers("/job/rdzv/stragglers"));
}

TEST_CASE("a round's re-form keys lie under its worker prefix, as docs/reform.md lays them out",
          "[job_keys]") {
  const auto r = reform_prefix(worker_prefix("job", 2));
  CHECK(r == "/job/worker/round_2/reform/");
  CHECK(reform_generation_key(r) == r + "generation");
  CHECK(reform_size_key(r) == r + "size");
  CHECK(reform_lost_key(r, 3) == r + "lost/3");
  CHECK(reform_generation_prefix(r, 4) == r + "g4/");
  CHECK(reform_members_key(r, 4) == r + "g4/members");
  CHECK(reform_joined_key(r, 0) == r + "g0/joined");
  CHECK(reform_full_key(r, 4) == r + "g4/full");
  CHECK(round_of(*job_key_of(reform_full_key(r, 4))) == 2);
}

TEST_CASE("a grow claim carries its node and worker count, and a value without a count says so",
          "[job_keys]") {
  const auto p = round_prefix("job", 1);
  CHECK(grow_key(p, 3) == "/job/rdzv/round_1/grow/3");
  CHECK(joining_key(p, "node-a") == "/job/rdzv/round_1/joining/node-a");
  // A given-up place's record lies under ctl/, which every member watches and a newcomer lists.
  CHECK(gone_key(p, 2) == "/job/rdzv/round_1/ctl/gone/2");
  CHECK(gone_key(p, 2).rfind(gone_prefix(p), 0) == 0);
  CHECK(grow_value("node-a", 2) == "node-a 2");
  CHECK(parse_grow_value(grow_value("node-a", 2)) == std::make_pair(std::string("node-a"), 2));
  CHECK(parse_grow_value("node-a") == std::make_pair(std::string("node-a"), -1));
  CHECK(parse_grow_value("node-a x") == std::make_pair(std::string("node-a x"), -1));
  CHECK(parse_grow_value("node-a 99999999999") == std::make_pair(std::string("node-a 99999999999"), -1));
}
