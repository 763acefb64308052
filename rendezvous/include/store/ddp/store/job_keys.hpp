// Every store key a ddprun job writes, built and parsed in one place
// (docs/rendezvous.md and docs/store-protocol.md have the layout). Used by the
// rendezvous handlers, the agent's status record, `ddp-store status` and the
// server's rdzv_round metrics, so that no other file spells a key or parses one
// with an offset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp::store::keys {

// "/<run>/rdzv/": everything the rendezvous handlers of one job write.
std::string rdzv_prefix(const std::string& run_id);
// "/<run>/rdzv/round": the job's current round (the c10d pointer).
std::string round_pointer_key(const std::string& run_id);
// "/<run>/rdzv/round_<r>/": one round's keys.
std::string round_prefix(const std::string& run_id, std::int64_t round);
// "<round prefix>node/": one record per node of the round, by arrival or rank.
std::string nodes_prefix(const std::string& round_prefix);
// "<round prefix>node/<index>".
std::string node_key(const std::string& round_prefix, std::int64_t index);
// The index of a key under nodes_prefix(round_prefix); nullopt for any other key.
std::optional<std::int64_t> node_index(std::string_view key, const std::string& round_prefix);

// "<round prefix>joining/": one key per node that arrived in the round,
// written with its arrival and attached to its lease, so that a closer waiting
// for the records can tell an arrival that died before writing its record
// from a slow one.
std::string joining_prefix(const std::string& round_prefix);
// "<round prefix>joining/<node_id>".
std::string joining_key(const std::string& round_prefix, const std::string& node_id);

// "<round prefix>spare/": the hot spares waiting while a full round runs,
// one record per spare ({"id","host","nproc"}), attached to its lease.
std::string spares_prefix(const std::string& round_prefix);
// "<round prefix>spare/<node_id>".
std::string spare_key(const std::string& round_prefix, const std::string& node_id);
// "<round prefix>take/<group rank>/<revision>": what became of the place of
// the member of `group rank` whose record was deleted at store revision
// `revision` ("spare <id>", "shrink <id>" or "restart <id>"), set once by
// compare_set (docs/reform.md, "A lost node").
std::string take_key(const std::string& round_prefix, std::int64_t group_rank, std::int64_t revision);
// "<round prefix>offer/": places the members offer to hot spares, one key
// "offer/<group rank>/<revision>" per departure (the same two numbers as its
// take_key), holding the departed node's record.
std::string offers_prefix(const std::string& round_prefix);
// "<round prefix>grow_ok": the members admit newcomers into the running round
// (its workers re-form); "<round prefix>grow/<group rank>": which newcomer
// took that new group rank and how many workers it runs, "<node_id> <nproc>"
// (compare_set); "<round prefix>grown": how many did.
std::string grow_ok_key(const std::string& round_prefix);
std::string grow_prefix(const std::string& round_prefix);
std::string grow_key(const std::string& round_prefix, std::int64_t group_rank);
std::string grow_value(const std::string& node_id, int nproc);
// The node id and worker count of a grow_value; nproc -1 where the value has none.
std::pair<std::string, int> parse_grow_value(const std::string& value);
std::string grown_key(const std::string& round_prefix);
std::string offer_key(const std::string& round_prefix, std::int64_t group_rank, std::int64_t revision);
// "<round prefix>ctl/gone/": the places given up in a running round (the job
// went on smaller), one key "ctl/gone/<group rank>" per place, holding the
// departed node's record, so that a node that comes later still knows how
// many ranks each such place held. Under ctl/, so every member's watch and a
// newcomer's listing of ctl/ see it.
std::string gone_prefix(const std::string& round_prefix);
std::string gone_key(const std::string& round_prefix, std::int64_t group_rank);
// "/<run>/rdzv/excluded/": hosts kept out of the job's later rounds, one key
// per host, its value why (docs/rendezvous.md, "Bad nodes kept out").
std::string excluded_prefix(const std::string& run_id);
// "/<run>/rdzv/excluded/<host>".
std::string excluded_key(const std::string& run_id, const std::string& host);

// "/<run>/worker/": where the workers of every round bootstrap.
std::string worker_root(const std::string& run_id);
// "/<run>/worker/round_<r>/": this round's workers.
std::string worker_prefix(const std::string& run_id, std::int64_t round);
// The round of a key under worker_root ("round_<r>/..."), given the part after
// the root; nullopt for a key ddprun did not write.
std::optional<std::int64_t> worker_round_of(std::string_view rest);
// The round and the rest of a round's key, given the part after
// rdzv_prefix or worker_root: "round_<r>/<what>"; nullopt for any other.
struct RoundPart {
  std::int64_t round = 0;
  std::string_view what;
};
std::optional<RoundPart> round_part_of(std::string_view rest);
// rdzv_prefix + "round_" and worker_root + "round_": where every round's keys
// of the job begin, for a scan over them.
std::vector<std::string> rounds_roots(const std::string& run_id);

// --on_failure=reform (docs/reform.md, "The contract between agent and SDK"):
// R = reform_prefix(the round's worker_prefix), i.e. $DDP_STORE_PREFIX + "reform/".
std::string reform_prefix(const std::string& worker_prefix);
// "R/generation": the workers' current generation (agent: add 1).
std::string reform_generation_key(const std::string& reform_prefix);
// "R/size": added to WORLD_SIZE, the latest generation's size (agent: add delta).
std::string reform_size_key(const std::string& reform_prefix);
// "R/lost/<slot>": why that slot's worker was lost (agent: set).
std::string reform_lost_key(const std::string& reform_prefix, std::int64_t slot);
// "R/g<G>/": generation G's keys; its process group lives under this prefix.
std::string reform_generation_prefix(const std::string& reform_prefix, std::int64_t generation);
// "R/g<G>/members": who joined G (SDK: append "<slot>:<s>,").
std::string reform_members_key(const std::string& reform_prefix, std::int64_t generation);
// "R/g<G>/joined": how many joined G (SDK: add 1); the agent reads R/g0/joined
// to tell worker SDK trainers from programs that never joined.
std::string reform_joined_key(const std::string& reform_prefix, std::int64_t generation);
// "R/g<G>/full": G is complete (SDK: set by the member whose add reached n).
std::string reform_full_key(const std::string& reform_prefix, std::int64_t generation);
// "R/stalled": the latest generation whose members waited past their stall
// timeout for slots that never joined (SDK: set "<G>"); each agent watches it
// and replaces its own slots missing from R/g<G>/members.
std::string reform_stalled_key(const std::string& reform_prefix);
// "R/finished": how many workers of the round exited 0 (agent: add 1 at each
// such exit). A finished worker never joins another generation, so an agent
// starts no re-form once it is above 0 (docs/reform.md, "A failure after a
// rank finished").
std::string reform_finished_key(const std::string& reform_prefix);

// "/<run>/agent/status/": the agents' status records.
std::string agent_status_prefix(const std::string& run_id);
// "/<run>/agent/status/<node_id>".
std::string agent_status_key(const std::string& run_id, const std::string& node_id);
// "/<run>/agent/failure/": each node's latest failure report (the root cause
// of its last failed attempt, with the hung worker's stack), for the daemon's
// status page (docs/operations.md).
std::string agent_failure_prefix(const std::string& run_id);
// "/<run>/agent/failure/<node_id>".
std::string agent_failure_key(const std::string& run_id, const std::string& node_id);
// "/<run>/agent/stragglers": the deciding agent's verdict on the current
// round's stragglers (docs/agent-diagnosis.md, "Stragglers"), beside the status records.
std::string stragglers_key(const std::string& run_id);
// "/<run>/agent/first_failure/": each node's first failure of its latest
// failed attempt, written when it happens with the node's own time (docs/
// agent.md, "Failure report"), from which every node names the job's
// earliest failure. (agent_failure_key's full report comes later, once the
// node's workers stopped: too late for that.)
std::string agent_first_failure_prefix(const std::string& run_id);
// "/<run>/agent/first_failure/<node_id>".
std::string agent_first_failure_key(const std::string& run_id, const std::string& node_id);

// The run id of a round pointer key "/<run>/rdzv/round"; nullopt for any other key.
std::optional<std::string_view> run_of_round_pointer(std::string_view key);

// The run id of an excluded host's key "/<run>/rdzv/excluded/<host>"; nullopt
// for any other key.
std::optional<std::string_view> run_of_excluded(std::string_view key);
// The run id and round of a spare's key "/<run>/rdzv/round_<r>/spare/<id>";
// nullopt for any other key.
struct SpareOf {
  std::string_view run;
  std::int64_t round = 0;
};
std::optional<SpareOf> spare_of(std::string_view key);
// The run id of an agent's status record "/<run>/agent/status/<node_id>";
// nullopt for any other key.
std::optional<std::string_view> run_of_status_record(std::string_view key);
// The run id of a stragglers verdict "/<run>/agent/stragglers"; nullopt for
// any other key.
std::optional<std::string_view> run_of_stragglers(std::string_view key);
// The job and part of a key a ddprun job wrote: "/<run>/<area>/<rest>" with
// area rdzv, worker or agent. nullopt for any other key (a plain TCPStore
// user's). Used by the daemon to reclaim finished jobs' and old rounds' keys.
struct JobKey {
  std::string_view run;
  std::string_view area;  // "rdzv", "worker" or "agent"
  std::string_view rest;  // after "/<area>/"
};
std::optional<JobKey> job_key_of(std::string_view key);
// The round whose close record "/<run>/rdzv/round_<r>/closed" `key` is.
std::optional<std::int64_t> closed_round_of(const JobKey& key);
// The round of a round's key: "/<run>/rdzv/round_<r>/..." or
// "/<run>/worker/round_<r>/..."; nullopt for any other key.
std::optional<std::int64_t> round_of(const JobKey& key);
// "/<run>/<area>/" for each area a job writes.
std::vector<std::string> job_prefixes(std::string_view run_id);

// What ended a round, as its end record "<code> <detail>" holds it: the codes
// are rdzv::RoundEvent's, in its order, and these names their one spelling in
// every log line, ddprun's messages and the daemon's job records.
inline constexpr std::string_view kRoundEventNames[] = {
    "restart_requested", "membership_changed", "nodes_waiting", "store_lost", "job_closed", "lease_lost"};
// A restart_requested detail from a node's report_failure is "node ID" + this
// + the reason: after it, the failed worker as the failing node described it.
inline constexpr std::string_view kReportedFailure = " reported a failure: ";

// A non-negative decimal integer, the whole of `text`; nullopt otherwise.
std::optional<std::int64_t> parse_index(std::string_view text);
// parse_index's value, or kNoIndex where `text` is not one: for a caller that
// only compares it (a rank, an event code, a count).
inline constexpr std::int64_t kNoIndex = -1;
std::int64_t index_or_none(std::string_view text);
// The value of a counter key as read (a round pointer, a waiting count): 0
// when the key is absent or does not hold an index.
std::int64_t counter_value(const std::optional<std::string>& value);

}  // namespace ddp::store::keys
