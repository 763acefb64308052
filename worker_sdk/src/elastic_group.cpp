// ElasticGroup: the SDK side of docs/reform.md.
#include "ddp/elastic_group.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <thread>

#include "backend.hpp"
#include "ddp/common/deadline.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/init.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store.hpp"
#include "generation_store.hpp"
#include "liveness_wait.hpp"
#include "work_state.hpp"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// How long a failed collective waits for the agent to move the generation on
// before its error is taken as not a membership change. The agent bumps it
// within milliseconds of seeing a worker die.
constexpr auto kSettle = std::chrono::seconds(10);
constexpr auto kPoll = std::chrono::milliseconds(10);
using detail::GenerationStore;
using detail::kReformSlice;

// Polls `moved` every 0.5 ms for the first kFastPolls (the agent moves the
// generation on within milliseconds of a death, and every millisecond here is
// on the re-form's critical path), then every kPoll, until it holds or `until`
// passes; returns whether it held.
constexpr auto kFastPoll = std::chrono::microseconds(500);
constexpr auto kFastPolls = std::chrono::milliseconds(200);

template <typename Moved>
bool poll_until(Clock::time_point until, Moved moved) {
  const auto slow_from = Clock::now() + kFastPolls;
  for (;;) {
    if (moved()) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    if (now < slow_from) {
      std::this_thread::sleep_for(kFastPoll);
    } else {
      std::this_thread::sleep_for(kPoll);
    }
  }
}

// An error a lost or stopped peer explains (Gloo's timeout, a closed or reset
// connection, a backend's failure): worth waiting kSettle for the generation.
bool peer_failure(const std::exception& e) {
  return dynamic_cast<const TimeoutError*>(&e) != nullptr ||
         dynamic_cast<const NetworkError*>(&e) != nullptr || dynamic_cast<const BackendError*>(&e) != nullptr;
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

bool reform_mode() {
  // Not DDP_ON_FAILURE: that is ddprun's own env spelling of --on_failure, and
  // a ddprun started by a worker would take it up.
  const std::string mode = env_or("DDP_REFORM", "");
  if (mode.empty()) return false;
  if (const auto on = parse_bool(mode)) return *on;
  throw ConfigError("DDP_REFORM='" + mode + "' is not valid: 1 (set by ddprun --on_failure=reform) or 0");
}

std::chrono::milliseconds reform_timeout(std::chrono::milliseconds fallback) {
  const std::string text = env_or("DDP_REFORM_TIMEOUT", "");
  if (text.empty()) return fallback;
  const auto timeout = parse_duration(text, TimeUnit::kSeconds);
  if (!timeout || timeout->count() <= 0) {
    throw ConfigError("DDP_REFORM_TIMEOUT='" + text + "' is not valid: give a positive number of seconds");
  }
  return *timeout;
}

// 0: never name the slots that did not join.
// DDP_REFORM_BASE_WORLD: the world R/size counts from, when it is not this
// worker's WORLD_SIZE (a node that joined a running round; docs/reform.md).
int base_world(int world_size) {
  const std::string text = env_or("DDP_REFORM_BASE_WORLD", "");
  if (text.empty()) return world_size;
  const auto base = parse_int<int>(text);
  if (!base || *base < 1) {
    throw ConfigError("DDP_REFORM_BASE_WORLD='" + text + "' is not valid: give a positive number of workers");
  }
  return *base;
}

std::chrono::milliseconds stall_timeout(std::chrono::milliseconds fallback) {
  const std::string text = env_or("DDP_REFORM_STALL_TIMEOUT", "");
  if (text.empty()) return fallback;
  const auto timeout = parse_duration(text, TimeUnit::kSeconds);
  if (!timeout || timeout->count() < 0) {
    throw ConfigError("DDP_REFORM_STALL_TIMEOUT='" + text +
                      "' is not valid: give a number of seconds (0: never name missing slots)");
  }
  return *timeout;
}

// Gloo writes to its peers' sockets without MSG_NOSIGNAL: a write to a peer
// that just died raises SIGPIPE, whose default action kills this process
// silently instead of failing the collective. A process that means to survive
// a lost peer ignores it (unless the program installed its own handler).
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

struct Member {
  int slot = 0;
  bool state = false;
};

// The first `n` entries of "<slot>:<s>,<slot>:<s>,…" in append order: every
// reader sees the same ones once `joined` reached n.
std::vector<Member> parse_members(const std::string& text, std::size_t n) {
  std::vector<Member> members;
  std::size_t pos = 0;
  while (members.size() < n && pos < text.size()) {
    const std::size_t comma = text.find(',', pos);
    const std::string entry = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    const std::size_t colon = entry.find(':');
    if (colon == std::string::npos) throw ProtocolError("reform: bad member entry '" + entry + "'");
    const auto slot = parse_int<int>(std::string_view(entry).substr(0, colon));
    if (!slot) throw ProtocolError("reform: bad member entry '" + entry + "'");
    Member m;
    m.slot = *slot;
    m.state = entry.substr(colon + 1) == "1";
    members.push_back(m);
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.slot < b.slot; });
  return members;
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s.empty() ? "none" : s;
}

}  // namespace

class ElasticGroup::Impl {
 public:
  std::shared_ptr<store::Store> store;
  std::string root;  // R = store::keys::reform_prefix(DDP_STORE_PREFIX)
  int slot = 0;
  int base_world = 1;  // WORLD_SIZE
  ProcessGroupOptions options;
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds stall{};  // 0: never name a slot that does not join
  bool enabled = false;
  bool has_state = true;
  std::int64_t generation = 0;
  std::vector<int> members;  // slots of the current generation, sorted
  ReformInfo info;
  std::unique_ptr<ProcessGroup> group;
  std::int64_t drop_ms = 0;  // of the latest reform(), for the log
  // Destroys the previous generation's backend: Gloo's teardown waits for its
  // event loop (about 10 ms), which the next generation need not wait for.
  std::thread reaper;

  // R/generation as the store last pushed it (written on the store's I/O
  // thread, read by check()): while the watch runs, check() costs no round
  // trip. `ended`: the watch failed (from then on check() reads the store).
  struct Seen {
    std::atomic<std::int64_t> generation{-1};
    std::atomic<bool> ended{false};
  };
  std::shared_ptr<Seen> seen = std::make_shared<Seen>();
  bool watching = false;                                 // the watch started and seen was read once
  std::unique_ptr<store::WatchHandle> generation_watch;  // after `store`: cancelled before it goes

  ~Impl() {
    if (reaper.joinable()) reaper.join();
  }

  std::int64_t read_generation() { return store->add(store::keys::reform_generation_key(root), 0); }
  std::int64_t read_size() { return store->add(store::keys::reform_size_key(root), 0); }

  // The generation for check(): pushed by the watch, or read when none runs.
  std::int64_t latest_generation() {
    return watching && !seen->ended.load() ? seen->generation.load() : read_generation();
  }

  // Starts the watch of R/generation; without one (a store that cannot
  // watch), check() reads the counter each time.
  void watch_generation() {
    const std::string key = store::keys::reform_generation_key(root);
    const auto raise = [](std::atomic<std::int64_t>& to, std::int64_t g) {
      std::int64_t cur = to.load();
      while (g > cur && !to.compare_exchange_weak(cur, g)) {
      }
    };
    try {
      generation_watch = store->watch(
          key, 0,
          [s = seen, key, raise](const store::WatchEvent& ev) {
            if (ev.key != key || ev.type != store::EventType::kPut) return;
            if (const auto g = parse_int<std::int64_t>(ev.value)) raise(s->generation, *g);
          },
          [s = seen](const std::string&) { s->ended = true; });
      // What was written before the watch started.
      raise(seen->generation, read_generation());
      watching = true;
    } catch (const std::exception& e) {
      generation_watch.reset();
      log::get("sdk")->debug("ElasticGroup: no watch of {} ({}): check() reads it each time", key, e.what());
    }
  }

  // A failed collective of generation g: MembershipChanged when the generation
  // moves on within kSettle, the error itself otherwise.
  std::shared_ptr<const detail::WorkHooks> hooks(std::int64_t g) {
    auto st = store;
    auto key = store::keys::reform_generation_key(root);
    auto h = std::make_shared<detail::WorkHooks>();
    // A rank blocked on a live peer that is itself blocked (Gloo does not
    // always wake a pending send when its peer closes): once the generation
    // moved on, the operation can only fail, so stop waiting for it.
    h->abandon = [st, key, g]() -> std::exception_ptr {
      std::int64_t now = g;
      try {
        now = st->add(key, 0);
      } catch (const std::exception&) {
        return nullptr;
      }
      if (now <= g) return nullptr;
      return std::make_exception_ptr(MembershipChanged(
          g, "membership changed: generation " + std::to_string(g) + " ended (now " + std::to_string(now) +
                 ") while a collective was waiting for a peer; call ElasticGroup::reform()"));
    };
    h->map_error = [st, key, g](std::exception_ptr error) {
      std::string what;
      try {
        std::rethrow_exception(error);
      } catch (const MembershipChanged&) {
        return error;
      } catch (const std::exception& e) {
        if (!peer_failure(e)) return error;
        what = e.what();
      } catch (...) {
        return error;
      }
      std::int64_t now = g;
      try {
        poll_until(Clock::now() + kSettle, [&] { return (now = st->add(key, 0)) > g; });
      } catch (const std::exception&) {
        return error;  // the store is gone too: not ours to explain
      }
      if (now <= g) return error;
      return std::make_exception_ptr(MembershipChanged(
          g, "membership changed: generation " + std::to_string(g) + " ended (now " + std::to_string(now) +
                 "); call ElasticGroup::reform(). The collective failed with: " + what));
    };
    return h;
  }

  // The slots of `candidates` that have not joined G, and those that have.
  std::pair<std::vector<int>, std::vector<int>> missing_and_joined(std::int64_t g,
                                                                   const std::vector<int>& candidates) {
    std::vector<int> joined_slots;
    for (const Member& m :
         parse_members(store->try_get(store::keys::reform_members_key(root, g)).value_or(""), SIZE_MAX))
      joined_slots.push_back(m.slot);
    std::vector<int> missing;
    for (int s : candidates)
      if (std::find(joined_slots.begin(), joined_slots.end(), s) == joined_slots.end()) missing.push_back(s);
    return {missing, joined_slots};
  }

  [[noreturn]] void join_timed_out(std::int64_t g, std::int64_t n, const std::vector<int>& candidates) {
    const auto [missing, joined_slots] = missing_and_joined(g, candidates);
    throw TimeoutError("reform: slot " + std::to_string(slot) + " timed out after " +
                       std::to_string(timeout.count()) + " ms waiting for generation " + std::to_string(g) +
                       " to gather " + std::to_string(n) + " member(s) (joined: " + join_ints(joined_slots) +
                       "; never joined: slot(s) " + join_ints(missing) +
                       "); set DDP_REFORM_TIMEOUT (seconds) to wait longer");
  }

  // Re-form generation G waited stall_timeout for a member that never came (a
  // survivor stopped or stuck in the kernel): R/stalled says so, and the
  // agent of each slot missing from R/g<G>/members replaces it
  // (docs/reform.md, "A slot that never joins").
  void report_stall(std::int64_t g, const std::vector<int>& candidates, bool first) {
    store->set(store::keys::reform_stalled_key(root), std::to_string(g));
    if (!first) return;
    const auto [missing, joined_slots] = missing_and_joined(g, candidates);
    log::get("sdk")->warn(
        "reform: generation {} waited {} ms for slot(s) {} (joined: {}): asking their agents to replace them",
        g, stall.count(), join_ints(missing), join_ints(joined_slots));
  }

  // Waits until G is full (nullopt), or was abandoned for a newer generation
  // (returned): joined only grows, so a full G stands even if the generation
  // moved on meanwhile. Past `deadline`, TimeoutError naming the missing slots.
  std::optional<std::int64_t> wait_full(std::int64_t g, std::int64_t n, const std::vector<int>& candidates,
                                        Clock::time_point deadline) {
    const std::string full = store::keys::reform_full_key(root, g);
    // Only in a re-form: generation 0 is the job's start, which has timeouts of its own.
    const bool watch_stall = g > 0 && stall.count() > 0;
    auto stall_at = Clock::now() + stall;
    bool reported = false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) join_timed_out(g, n, candidates);
      try {
        store->wait({full}, std::min<std::chrono::milliseconds>(kReformSlice, left));
        return std::nullopt;
      } catch (const TimeoutError&) {
      }
      // Waiting for the others is not a hang of this rank's.
      detail::heartbeat_while_waiting();
      const std::int64_t now = read_generation();
      if (now > g) {
        if (store->check({full})) return std::nullopt;
        return now;
      }
      if (watch_stall && Clock::now() >= stall_at) {
        // Again every stall_timeout while it lasts: an agent busy with
        // another hang may have passed the first over.
        report_stall(g, candidates, !reported);
        reported = true;
        stall_at = Clock::now() + stall;
      }
    }
  }

  // Generation G as its sorted members make it: ranks by slot, the state
  // root the lowest rank that holds state, and who was lost or is new since
  // this process's previous generation.
  ReformInfo describe(std::int64_t g, const std::vector<Member>& joined, int rank, bool had_state) const {
    ReformInfo next;
    next.generation = g;
    next.rank = rank;
    next.world_size = static_cast<int>(joined.size());
    next.had_state = had_state;
    next.state_root = 0;
    for (std::size_t i = 0; i < joined.size(); ++i) {
      if (joined[i].state) {
        next.state_root = static_cast<int>(i);
        break;
      }
    }
    for (const Member& m : joined)
      if (!m.state) next.new_slots.push_back(m.slot);
    for (int s : members) {
      const bool kept =
          std::any_of(joined.begin(), joined.end(), [s](const Member& m) { return m.slot == s; });
      if (!kept) next.lost_slots.push_back(s);
    }
    return next;
  }

  // docs/reform.md, "A worker joins generation G". `after`: the generation must
  // be past it (reform), or -1 (first join). Returns once G's group is formed.
  void join(std::int64_t after, const std::vector<int>& candidates, Clock::time_point started) {
    const auto deadline = started + timeout;
    std::int64_t g = 0;
    if (!poll_until(deadline, [&] { return (g = read_generation()) > after; })) {
      throw TimeoutError("reform: slot " + std::to_string(slot) + " waited " +
                         std::to_string(timeout.count()) + " ms for the generation to move past " +
                         std::to_string(after) + "; reform() is for after a MembershipChanged");
    }
    const bool had_state = has_state;
    for (;;) {
      const std::int64_t n = base_world + read_size();
      if (n < 1) throw ProtocolError("reform: generation " + std::to_string(g) + " has no members");
      store->append(store::keys::reform_members_key(root, g),
                    std::to_string(slot) + ":" + (had_state ? "1" : "0") + ",");
      // The n-th to join says so under R/g<G>/full, which the others wait for
      // in the store (no polling of the counter).
      if (store->add(store::keys::reform_joined_key(root, g), 1) == n)
        store->set(store::keys::reform_full_key(root, g), "1");
      const std::optional<std::int64_t> newer = wait_full(g, n, candidates, deadline);
      if (newer) {
        g = *newer;
        continue;
      }
      const auto joined = parse_members(store->get(store::keys::reform_members_key(root, g), timeout),
                                        static_cast<std::size_t>(n));
      std::vector<int> slots;
      for (const Member& m : joined) slots.push_back(m.slot);
      const auto self = std::find(slots.begin(), slots.end(), slot);
      if (self == slots.end()) {
        // Read R/size between the agent's two adds (size, then generation):
        // our n was the next generation's, and G filled up without us. The
        // generation moves on at once; join that one.
        std::int64_t now = g;
        if (poll_until(deadline, [&] { return (now = read_generation()) > g; })) {
          g = now;
          continue;
        }
        throw ProtocolError("reform: slot " + std::to_string(slot) + " joined generation " +
                            std::to_string(g) + " after it was full (members: " + join_ints(slots) + ")");
      }
      const int rank = static_cast<int>(self - slots.begin());
      const int size = static_cast<int>(slots.size());
      ReformInfo next = describe(g, joined, rank, had_state);
      const auto agreed = Clock::now();
      std::optional<ProcessGroup> formed;
      try {
        formed = ProcessGroup(
            std::make_shared<GenerationStore>(store, store::keys::reform_generation_key(root), g),
            store::keys::reform_generation_prefix(root, g), rank, size, options, hooks(g), stall / 2);
      } catch (const Error& e) {
        // A member died after joining, or while connecting (GenerationStore
        // noticed the generation move on): so do we. A peer that closed its
        // connections mid-connect, or never made one (killed before it did:
        // each connection has stall / 2 to come up, so the members of the
        // next generation do not count this slot as stalled), is one whose
        // agent has not yet told the generation (a node's loss waits for its
        // lease): wait for it as a failed collective does, kSettle at most.
        std::int64_t now = read_generation();
        if (now <= g && peer_failure(e)) {
          log::get("sdk")->warn(
              "reform: slot {} could not connect generation {} ({}); waiting up to {} s for the "
              "generation to move on",
              slot, g, e.what(), std::chrono::duration_cast<std::chrono::seconds>(kSettle).count());
          poll_until(std::min(deadline, Clock::now() + kSettle),
                     [&] { return (now = read_generation()) > g; });
        }
        if (now <= g) throw;
        g = now;
        continue;
      }
      if (group) {
        *group = std::move(*formed);
      } else {
        group = std::make_unique<ProcessGroup>(std::move(*formed));
      }
      generation = g;
      members = slots;
      has_state = true;  // the caller restores it from state_root (broadcast_state) before training on
      next.took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
      info = next;
      log::get("sdk")->info(
          "elastic group formed generation={} slot={} rank={} size={} state_root={} lost=[{}] "
          "new=[{}] took_ms={} (closing the old group {} ms, members {} ms, connecting {} ms)",
          g, slot, rank, size, next.state_root, join_ints(next.lost_slots), join_ints(next.new_slots),
          next.took.count() / 1000, drop_ms,
          std::chrono::duration_cast<std::chrono::milliseconds>(agreed - started).count() - drop_ms,
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - agreed).count());
      return;
    }
  }
};

ElasticGroup::ElasticGroup(const Context& ctx, ProcessGroupOptions options, ElasticOptions elastic)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.enabled = reform_mode();
  m.slot = ctx.rank;
  m.base_world = ctx.world_size;
  m.info.rank = ctx.rank;
  m.info.world_size = ctx.world_size;
  if (!m.enabled) {
    m.group = std::make_unique<ProcessGroup>(ctx, std::move(options));
    return;
  }
  if (!ctx.store) throw ConfigError("ElasticGroup: no store given (call ddp::init() first)");
  ignore_sigpipe();
  m.store = ctx.store;
  m.root = store::keys::reform_prefix(ctx.store_prefix);
  m.options = std::move(options);
  m.timeout = reform_timeout(elastic.reform_timeout);
  // At most half the reform timeout: the agent then has time to replace the
  // slot before the members give up.
  m.stall = std::min(stall_timeout(elastic.stall_timeout), m.timeout / 2);
  m.has_state = !parse_bool(env_or("DDP_REFORM_JOINING", "")).value_or(false);
  m.base_world = base_world(ctx.world_size);
  std::vector<int> candidates;
  for (int s = 0; s < ctx.world_size; ++s) candidates.push_back(s);
  m.join(-1, candidates, Clock::now());
  m.watch_generation();
}

ElasticGroup::~ElasticGroup() = default;

ProcessGroup& ElasticGroup::group() { return *impl_->group; }
bool ElasticGroup::enabled() const { return impl_->enabled; }
int ElasticGroup::rank() const { return impl_->group->rank(); }
int ElasticGroup::size() const { return impl_->group->size(); }
int ElasticGroup::slot() const { return impl_->slot; }
std::int64_t ElasticGroup::generation() const { return impl_->generation; }
const ReformInfo& ElasticGroup::info() const { return impl_->info; }

void ElasticGroup::check() {
  auto& m = *impl_;
  if (!m.enabled) return;
  const std::int64_t now = m.latest_generation();
  if (now > m.generation) {
    throw MembershipChanged(m.generation, "membership changed: generation " + std::to_string(m.generation) +
                                              " ended (now " + std::to_string(now) +
                                              "); call ElasticGroup::reform()");
  }
}

ReformInfo ElasticGroup::reform() {
  auto& m = *impl_;
  if (!m.enabled) {
    throw ConfigError("ElasticGroup::reform: DDP_REFORM is not 1 (run under ddprun --on_failure=reform)");
  }
  const auto started = Clock::now();
  // First close the old connections: peers blocked on this rank fail at once.
  if (m.reaper.joinable()) m.reaper.join();
  if (auto old = m.group->drop_backend())
    m.reaper = std::thread([b = std::move(old)]() mutable { b.reset(); });
  m.drop_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  m.join(m.generation, m.members, started);
  return m.info;
}

void broadcast_state(ProcessGroup& group, int root, const std::vector<std::span<float>>& buffers) {
  for (const auto& b : buffers) group.broadcast(b, root);
}

}  // namespace ddp
