// Bad nodes kept out (docs/agent-recovery.md, "Bad nodes kept out"): the agent counts
// its own workers' failures (RestartLimits); the K-th within the window excludes its host from
// the job (the rendezvous handler records it where every later join and
// `ddp-store excluded` see it) and the agent exits 6, so a scheduler can drain
// the host and requeue; the job goes on without it while MIN nodes are left.
#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

void Agent::Impl::exclude_this_node(const std::string& why, const std::string& last_failure) {
  life.enter(Phase::kClosing);
  const std::string host = cfg.node.host;
  const std::string text = why + "; last: " + last_failure;
  observers.emit("node_excluded", {{"host", host}, {"reason", text}});
  const std::string readmit =
      "`ddp-store excluded readmit --rdzv_id " + cfg.rendezvous.run_id + " " + host + "` re-admits it";
  rdzv->exclude_self(
      text,
      [this, host, text, readmit](const rdzv::Exclusion& ex) {
        std::string all;
        for (const auto& e : ex.excluded) all.append(all.empty() ? "" : ", ").append(e);
        if (ex.closed) {
          finish(ExitCode::kExcluded,
                 "node " + host + " excluded (" + text + "); the job stopped: " + std::to_string(ex.left) +
                     " node(s) left, below --nnodes MIN=" + std::to_string(cfg.rendezvous.min_nodes) +
                     "; excluded: " + all);
          return;
        }
        finish(ExitCode::kExcluded, "node " + host + " excluded from run_id=" + cfg.rendezvous.run_id + " (" +
                                        text + "); the job goes on with " + std::to_string(ex.left) +
                                        " node(s); " + readmit);
      },
      [this, host, text](const std::string& m) {
        finish(ExitCode::kExcluded, "node " + host + " excluded (" + text +
                                        "), but the exclusion could not be recorded in the store: " + m);
      });
}

}  // namespace ddp::agent
