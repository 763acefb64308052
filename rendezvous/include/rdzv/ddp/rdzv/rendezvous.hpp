// Rendezvous: how the agents of one job agree on membership, ranks and the store
// their workers bootstrap from, and how they tell each other to restart.
//
// Backends (ddp/rdzv/backend.hpp has their names and aliases): standalone (one
// node, in-process store), static (--node_rank + --master_addr/--master_port;
// node 0 hosts the store), c10d (dynamic, over a ddp-rendezvousd or the store
// hosted by the agent that owns --rdzv_endpoint) and etcd (dynamic, over an
// etcd v3 cluster). The agent only sees RendezvousHandler.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/common/endpoint.hpp"
#include "ddp/rdzv/backend.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::rdzv {

// What this agent brings to a round.
struct NodeSpec {
  std::string node_id;       // unique per agent process, e.g. "<hostname>_<pid>"
  std::string host;          // address its workers are reachable at (--local_addr or hostname)
  int local_world_size = 1;  // nproc_per_node
};

// The etcd backend's settings (docs/rendezvous.md, "etcd backend"): every
// member named by --rdzv_endpoint, and the --rdzv_conf keys etcd_prefix,
// protocol, etcd_cacert, etcd_cert, etcd_key (torchrun's spellings accepted).
struct EtcdRendezvousConfig {
  std::vector<Endpoint> endpoints;  // empty: RendezvousConfig::endpoint alone
  std::string prefix = "/ddp";      // every key of every job lives under it
  bool https = false;               // protocol=https (implied by any file below)
  std::string cacert;
  std::string cert;
  std::string key;
};

struct RendezvousConfig {
  std::string backend = "c10d";  // a name or alias parse_backend() knows
  std::string run_id = "none";   // --rdzv_id
  Endpoint endpoint;             // --rdzv_endpoint, or master for static
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;  // static only
  std::string token;   // store auth token (empty: none)
  // --rdzv_conf, torchrun's names and defaults (seconds in the flag).
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds close_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds keep_alive_interval{std::chrono::seconds(5)};
  // How often a node that waits logs "waiting for nodes" (the first line comes
  // at once). ddprun: every second on a terminal, every 30 s in a log file.
  std::chrono::milliseconds progress_interval{std::chrono::seconds(1)};
  // Shows a waiting node's progress in place (ddprun: the terminal's status
  // line), called about once a second with the line's text. Unset, or
  // returning false, the handler logs the line every progress_interval.
  std::function<bool(const std::string&)> on_progress;
  int keep_alive_max_attempt = 3;
  // c10d: called (on the joining thread; it must not block) when this node
  // finds a round of MAX nodes running and waits beside it as a hot spare for
  // that round to end (docs/rendezvous.md, "Hot spares"), with that round.
  std::function<void(std::int64_t round)> on_spare;
  // The fence backstop (docs/rendezvous.md, "Fencing"): called with the time
  // (steady clock, CLOCK_MONOTONIC) by which this node's workers must be dead
  // even if the agent itself cannot act (stopped, hung), unless the store
  // answers again; called again each time an answered keep-alive moves it.
  // Half a fence margin after kStoreLost is due. Never called when the store is
  // hosted in this process. Runs on an internal thread: it must not block.
  std::function<void(std::chrono::steady_clock::time_point)> on_fence_deadline;
  // This agent hosts the store in-process: always (true), never (false, a
  // client only), or unset: c10d hosts it when the endpoint is this machine
  // and its port is free (torchrun's default without --rdzv_conf is_host),
  // static when node_rank is 0.
  std::optional<bool> is_host;
  // Set when the store's address was handed down rather than typed (the
  // --hosts launcher's store, at its --local_addr): that store listens before
  // any node starts, so one that does not answer within `connect_timeout` (at
  // most join_timeout) is that flag's mistake, a ConfigError naming `flag`,
  // not a node still to come. Static only.
  struct HandedStore {
    std::string flag;
    std::chrono::milliseconds connect_timeout;
  };
  std::optional<HandedStore> handed_store;
  EtcdRendezvousConfig etcd;  // backend "etcd" (alias "etcd-v2") only
  // c10d: read every node's record into RendezvousResult::nodes (one list request,
  // O(N) bytes per agent). false: `nodes` holds only this node, O(1) bytes.
  bool list_nodes = true;
  // ...but only in a round of at most this many nodes, or one whose nodes run
  // different --nproc_per_node: above it a node reads group rank 0's record
  // alone (O(1) bytes, one request), so a round of N nodes does not cost the
  // store N x N records (--rdzv_conf list_nodes_max).
  int list_nodes_max = 128;
  // --rdzv_conf torch_legacy_protocol: how a store this agent hosts reads
  // TCPStore clients that open without VALIDATE (torch 1.x and 2.0, or 2.1).
  store::TorchLegacyProtocol torch_legacy_protocol = store::TorchLegacyProtocol::kTorch1;
  // c10d and etcd, --on_failure=reform (docs/reform.md, "A lost node"): a hot
  // spare may take the place of a member that left the running round, its
  // workers joining the workers' next generation, instead of waiting for the
  // round to end. The agent asks for it only while its workers re-form.
  bool take_places = false;
};

// keep_alive_interval x keep_alive_max_attempt: how long a node, or the store,
// may go unheard before it is taken for dead, and the TTL of each node's
// lease. Saturating (ddp::clamp_product): both factors come from --rdzv_conf.
std::chrono::milliseconds keep_alive_window(const RendezvousConfig& config);

// Throws ConfigError naming --rdzv_conf for keep-alive settings no store can
// honour: an interval <= 0, no attempt, or a window longer than the longest
// lease a store grants (one year, store::kMaxLeaseTtlMs). create_handler
// checks it; the launcher too, to fail before anything starts.
void check_keep_alive(const RendezvousConfig& config);

// The outcome of one round: this node's place in the world.
struct RendezvousResult {
  std::int64_t round = 0;    // increases by one per completed round of the job
  int group_rank = 0;        // this node's index among nodes
  int group_world_size = 1;  // number of nodes
  int rank_offset = 0;       // global rank of this node's local rank 0
  int world_size = 1;        // sum of local_world_size over nodes
  // All nodes, by group rank. Where nodes_listed is false (a round of more
  // than RendezvousConfig::list_nodes_max nodes that all run this node's
  // --nproc_per_node), only this node's record is filled: the others run as
  // many workers as this one, and their ids are not read.
  std::vector<NodeSpec> nodes;
  bool nodes_listed = true;
  // Where workers bootstrap: MASTER_ADDR/MASTER_PORT point at this store, and
  // keys of this round live under worker_prefix (new per round, so workers of
  // an old round can never mix with a new one).
  Endpoint store_endpoint;
  std::string worker_prefix;
  // A hot spare taking the place of `replaced` (a member that left) in a round
  // that is already running (RendezvousConfig::take_places): its workers join
  // the running workers' next generation as replacements, without state.
  bool takes_place = false;
  NodeSpec replaced;
  // With takes_place: a new group rank that grows the running round (it had
  // room below MAX) instead of a lost member's. `world_size` is then the
  // world the round began with; the workers' store says how much it grew.
  bool grows = false;
};

// A member of the running round left without succeeding (its lease ended or
// was revoked), delivered instead of kMembershipChanged to a handler with a
// departure callback (RendezvousHandler::set_departure_callback).
struct Departure {
  std::int64_t round = 0;
  int group_rank = 0;
  NodeSpec node;              // its record as this node knew it (node_id empty: unknown)
  std::int64_t revision = 0;  // the store revision of the deletion: one per departure, the same for all
  std::string detail;         // "node ID (group rank G) left the round: " + reason
  std::string reason;         // why, without the node's name: "its lease expired or was revoked"
  // The global rank of its local rank 0: the sum of local_world_size over the
  // group ranks before it (-1: unknown).
  int rank_offset = -1;
  // The group ranks this node knew a record of when it left, itself
  // included: the round's members, the nodes that grew it since, the hot
  // spares in lost places (0: unknown); `workers` sums their local_world_size.
  int members = 0;
  int workers = 0;
};
using DepartureCallback = std::function<void(const Departure&)>;

// What became of a departed member's place: decided once for the whole job
// (RendezvousHandler::settle_place).
struct Place {
  enum class Kind : std::uint8_t {
    kSpare,    // a hot spare took it: its workers join the running world
    kShrink,   // given up: the job goes on with a smaller world
    kRestart,  // neither: the round ends (kMembershipChanged), every node rejoins
  };
  Kind kind = Kind::kRestart;
  std::string by;     // the node id that decided (the spare, or the member that gave it up)
  bool mine = false;  // this node decided it: it tells the workers (shrink) or ended the round (restart)
};

// Why a running round must end, delivered to the agent asynchronously.
// kStoreLost and kLeaseLost mean the store may count this node gone: its
// workers must die at once (SIGKILL, no grace), before the other nodes' next
// world can start (docs/rendezvous.md, "Fencing").
enum class RoundEvent : std::uint8_t {
  kRestartRequested = 0,   // a node reported a worker failure (failure fan-out)
  kMembershipChanged = 1,  // another node's lease ended (dead node): re-form
  kNodesWaiting = 2,       // new agents wait to join: scale up (does not spend a restart)
  kStoreLost = 3,          // no keep-alive answered for the fence window: exit 3
  kJobClosed = 4,          // a joining node closed the job for a mistake no restart mends
  kLeaseLost = 5,          // this node's own lease ended (it stalled past its TTL): rejoin
};
// "restart_requested", "membership_changed", "nodes_waiting", "store_lost",
// "job_closed", "lease_lost": the one spelling of an event in every log line,
// ddprun's messages and the daemon's job records.
const char* event_name(RoundEvent e);
// A kRestartRequested detail from report_failure is "node ID" + this + the
// reason: after it, the failed worker as the failing node described it.
inline constexpr std::string_view kReportedFailure = store::keys::kReportedFailure;
// `round` is the round the event ends: the handler may start watching a round
// (and fire its events) just before next_rendezvous() returns it.
using RoundEventCallback = std::function<void(std::int64_t round, RoundEvent, const std::string& detail)>;
// A job closed because exclusions left it below MIN: the close reason starts
// with this, and next_rendezvous() then throws ExcludedError (exit 6).
inline constexpr std::string_view kClosedByExclusion = "below MIN after excluding ";

// What exclude_self() did.
struct Exclusion {
  std::vector<std::string> excluded;  // every excluded host of the job, with why
  int left = 0;                       // nodes of the round and spares not excluded
  bool closed = false;                // left < MIN: the job is closed (kClosedByExclusion)
};

// Thread-safety: next_rendezvous/report_* are called from the agent's thread;
// the event callback runs on an internal thread and must only post to the agent.
class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;
  virtual std::string backend() const = 0;
  // Joins the next round and blocks until it closes. Throws RendezvousError
  // (exit 3) on timeout or closed job, naming the nodes seen and those missing;
  // ConfigError (exit 2) for a bad endpoint or token.
  virtual RendezvousResult next_rendezvous() = 0;
  // Tells every node of the current round that this node's workers failed.
  virtual void report_failure(const std::string& reason) = 0;
  // This node's workers all succeeded; the node may leave without that looking
  // like a failure. Returns once recorded.
  virtual void report_success() = 0;
  // True once every node of the current round reported success.
  virtual bool all_succeeded() = 0;
  // The job is over (max restarts spent or fatal): no more rounds for anyone.
  virtual void close(const std::string& reason) = 0;
  // Registers the callback for events of the current round.
  virtual void set_event_callback(RoundEventCallback cb) = 0;
  // The store this handler uses (agents publish status into it).
  virtual std::shared_ptr<store::Store> store() = 0;
  // Keeps this node's host out of the job's later rounds (`why` is shown to
  // the operator); then, when the nodes left (members of the current round
  // and spares, excluded ones not counted) are fewer than MIN, closes the job,
  // else reports this node's failure so that the others re-form without it.
  // Backends without a shared store throw ConfigError.
  virtual Exclusion exclude_self(const std::string& why);
  // From now on, a member that leaves the running round without succeeding
  // goes to `cb` (on an internal thread; it must only post) instead of ending
  // the round with kMembershipChanged; the round runs on until settle_place
  // or the agent ends it. Backends that cannot take places keep the event
  // (the default does nothing).
  virtual void set_departure_callback(DepartureCallback cb);
  // Blocks until `d`'s place is decided for the job, once for every node.
  // After the fence (docs/rendezvous.md, "Fencing"), with `offer`, the place
  // is offered to the waiting hot spares and the first to claim it takes it;
  // else, `may_shrink`, it is given up; else the round ends for every node
  // (kMembershipChanged follows). Throws ddp::Error when the store fails.
  virtual Place settle_place(const Departure& d, bool offer, bool may_shrink);
  // A node arrived while the running round has room below MAX: goes to `cb`
  // (an internal thread; it must only post) instead of kNodesWaiting, once
  // per arrival, until admit_newcomers decides (the default does nothing).
  virtual void set_newcomer_callback(std::function<void(std::int64_t round, const std::string& detail)> cb);
  // `admit`: the nodes waiting may grow the running round `round` (each joins
  // it in a new group rank while there is room; docs/reform.md, "A lost
  // node"); else the round ends with kNodesWaiting (a scale-up restart).
  virtual void admit_newcomers(std::int64_t round, bool admit, const std::string& detail);
};

// Builds the handler for config.backend (any name parse_backend() knows).
// Throws ConfigError for an unknown backend or a bad setting (exit 2),
// RendezvousError when the store cannot be reached (static: exit 3).
std::unique_ptr<RendezvousHandler> create_handler(const RendezvousConfig& config, const NodeSpec& self);

// The static or c10d handler over an existing store instead of one reached
// through config.endpoint (tests, embedding, several handlers on one store).
// config.endpoint is still what RendezvousResult::store_endpoint reports.
std::unique_ptr<RendezvousHandler> create_handler(const RendezvousConfig& config, const NodeSpec& self,
                                                  std::shared_ptr<store::Store> store);

}  // namespace ddp::rdzv
