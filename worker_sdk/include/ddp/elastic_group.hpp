// ElasticGroup: a process group that survives a lost rank in-process
// (ddprun --on_failure=reform). The membership protocol is docs/reform.md;
// the training-loop pattern is docs/reform.md, "Writing a trainer: `ddp::ElasticGroup`".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/process_group.hpp"

namespace ddp {

struct Context;

// Thrown by a collective of an ElasticGroup's group when a peer is gone, and by
// ElasticGroup::check() when the job's generation moved on. Catch it, call
// ElasticGroup::reform(), restore state with broadcast_state() and go on.
class MembershipChanged : public Error {
 public:
  MembershipChanged(std::int64_t generation, const std::string& what)
      : Error(what), generation_(generation) {}
  // The generation that was left.
  std::int64_t generation() const { return generation_; }

 private:
  std::int64_t generation_;
};

// The outcome of the latest (re)form.
struct ReformInfo {
  std::int64_t generation = 0;
  int rank = 0;
  int world_size = 1;
  int state_root = 0;                 // new rank of the lowest-slot member that holds state
  bool had_state = true;              // this process held state before (false: a newcomer)
  std::vector<int> lost_slots;        // slots of the previous generation not in this one
  std::vector<int> new_slots;         // slots that joined without state
  std::chrono::microseconds took{0};  // reform() call (or construction) to group ready
};

struct ElasticOptions {
  // How long joining a generation waits for its members. Env DDP_REFORM_TIMEOUT
  // (seconds) overrides. Passing it throws ddp::TimeoutError naming the slots
  // that never joined.
  std::chrono::milliseconds reform_timeout = std::chrono::minutes(5);
  // How long the members of a re-form wait for a slot that never joins (a
  // survivor stopped, or stuck in the kernel) before they name it under the
  // store's R/stalled key, again every as long while it lasts; the agent that
  // runs the slot then kills and replaces it (docs/reform.md). Env
  // DDP_REFORM_STALL_TIMEOUT (seconds) overrides; 0: never. At most half the
  // reform timeout is used, so that the slot is replaced before the members
  // give up. Keep it longer than a replacement takes to start and join (a
  // torch import, a big model's load).
  std::chrono::milliseconds stall_timeout = std::chrono::seconds(30);
};

// Thread-safety: like ProcessGroup for the collectives of group(); check(),
// reform() and the accessors must be called from one thread (the training loop),
// and reform() only while no other thread uses group().
class ElasticGroup {
 public:
  // Joins the current generation (docs/reform.md) and forms its process group.
  // Without DDP_REFORM=1 it is a plain ProcessGroup over ctx:
  // collectives throw as before, check() never throws, reform() throws
  // ddp::ConfigError. Keeps a reference to nothing in ctx but its store.
  explicit ElasticGroup(const Context& ctx, ProcessGroupOptions options = {}, ElasticOptions elastic = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The same object across re-forms: a Reducer built on it stays valid.
  ProcessGroup& group();
  bool enabled() const;
  int rank() const;  // in the current generation
  int size() const;
  int slot() const;  // RANK as first started; never changes
  std::int64_t generation() const;
  const ReformInfo& info() const;  // of the latest (re)form

  // Throws MembershipChanged when R/generation passed ours. Call it at step
  // boundaries. No round trip: the store pushes R/generation's changes to a
  // watch the group keeps (one store read per call where the store cannot
  // watch). A no-op when not enabled().
  void check();
  // Drops the old communicators (Gloo: the connections, so peers blocked on
  // this rank fail at once; NCCL: ncclCommAbort), joins the next generation and
  // forms its group in place of the old one. Throws ddp::TimeoutError when the
  // members do not all join within the reform timeout, ddp::ConfigError when
  // not enabled().
  ReformInfo reform();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Broadcasts every buffer from `root` (state without a checkpoint: parameters,
// optimizer state, counters). Every rank passes buffers of the same sizes, in
// the same order.
void broadcast_state(ProcessGroup& group, int root, const std::vector<std::span<float>>& buffers);

}  // namespace ddp
