// What the agent tells the outside world about its lifecycle: --event_log
// lines and the status record other tools (`ddp-store status`) read from the
// store. Both are written on lifecycle events only, never on a timer.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// How long run() waits at the end for the last status write to land.
constexpr std::chrono::milliseconds kStatusFlushTimeout{2000};

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kRendezvous: return "rendezvous";
    case Phase::kRunning: return "running";
    case Phase::kStopping: return "stopping";
    case Phase::kSucceeded: return "succeeded";
    case Phase::kClosing: return "closing";
    case Phase::kDone: return "exited";
  }
  return "unknown";
}

}  // namespace

std::string status_key(const std::string& run_id, const std::string& node_id) {
  return "/" + run_id + "/agent/status/" + node_id;
}

void Agent::Impl::open_observers() {
  if (!cfg.event_log.empty()) event_log = std::make_unique<EventLog>(cfg.event_log);
  status_caller = std::make_unique<BlockingCaller>();
}

void Agent::Impl::emit(const std::string& event, nlohmann::json fields) {
  if (!event_log) return;
  fields["run_id"] = cfg.rendezvous.run_id;
  fields["node"] = cfg.node.node_id;
  fields["round"] = have_round ? nlohmann::json(round.round) : nlohmann::json(nullptr);
  fields["restart_count"] = restart_count;
  event_log->write(event, fields);
}

void Agent::Impl::announce_rendezvous_start() {
  // Called as a new rendezvous begins: the phase still says why the last
  // round ended (the first round has none).
  if (!have_round) return;
  if (restart_count != restarts_announced) {
    restarts_announced = restart_count;
    std::string reason = "another node's workers failed";
    if (phase == Phase::kStopping && stop_reason == StopReason::kLocalFailure &&
        !failures.empty()) {
      const auto& root = failures[FailureReport{"", "", 0, 0, 0, failures}.root_cause()];
      reason = "rank " + std::to_string(root.rank) + " on " + root.host + ": " + root.how();
    } else if (!last_event_detail.empty()) {
      reason += " (" + last_event_detail + ")";
    }
    emit("restart", {{"reason", reason}});
  } else {
    emit("scale", {{"reason", last_event_detail.empty() ? "membership changed" : last_event_detail}});
  }
  publish_status();
}

void Agent::Impl::note_spawned(int local_rank, pid_t pid) {
  // worker_start is one line for the group, once every spawn has reported;
  // a fast worker may already have exited by then, so its exit line waits.
  if (pending_spawns > 0) return;
  if (pid >= 0) {
    // on_spawned records the same right after this; the status below needs it now.
    workers[static_cast<std::size_t>(local_rank)].pid = pid;
    workers[static_cast<std::size_t>(local_rank)].spawned = true;
  }
  nlohmann::json ranks = nlohmann::json::array();
  nlohmann::json pids = nlohmann::json::array();
  for (const auto& w : workers) {
    ranks.push_back(w.rank);
    pids.push_back(w.local_rank == local_rank ? pid : w.pid);  // -1: could not start
  }
  emit("worker_start", {{"attempt", attempt}, {"ranks", ranks}, {"pids", pids}});
  for (int lr : deferred_exits) emit_worker_exit(workers[static_cast<std::size_t>(lr)]);
  deferred_exits.clear();
  publish_status();
}

void Agent::Impl::emit_worker_exit(const Worker& w) {
  if (pending_spawns > 0) {
    deferred_exits.push_back(w.local_rank);
    return;
  }
  nlohmann::json f = {{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", w.pid},
                      {"exit_code", nullptr}, {"signal", nullptr}};
  if (WIFSIGNALED(w.wait_status)) {
    f["signal"] = WTERMSIG(w.wait_status);
  } else {
    f["exit_code"] = WEXITSTATUS(w.wait_status);
  }
  emit("worker_exit", f);
  publish_status();
}

void Agent::Impl::emit_finish(int code, const std::string& error) {
  std::string reason = error.empty() ? final_reason : error;
  if (code == 0) {
    emit("success", {{"exit_code", 0}});
    if (reason.empty()) reason = "all workers succeeded";
  } else if (code == 1 || code == 2 || code == 3) {
    emit("failure", {{"exit_code", code}, {"reason", reason}});
  } else if (reason.empty() && code > 128) {
    reason = "stopped by " + signal_name(code - 128);
  }
  emit("shutdown", {{"exit_code", code}, {"reason", reason}});
  publish_status(code == 0 ? "succeeded" : "failed");
}

void Agent::Impl::publish_status(const std::string& final_state) {
  if (!have_round || !status_caller || !handler) return;
  nlohmann::json ws = nlohmann::json::array();
  for (const auto& w : workers) {
    std::string state = "starting";
    if (w.done) {
      state = WIFEXITED(w.wait_status) && WEXITSTATUS(w.wait_status) == 0 ? "succeeded" : "failed";
    } else if (w.spawned) {
      state = "running";
    }
    ws.push_back({{"local_rank", w.local_rank}, {"rank", w.rank}, {"pid", w.pid}, {"state", state}});
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const nlohmann::json record = {
      {"node", cfg.node.node_id},
      {"host", cfg.node.host},
      {"hostname", host},
      {"group_rank", round.group_rank},
      {"group_world_size", round.group_world_size},
      {"rank_first", round.rank_offset},
      {"rank_last", round.rank_offset + cfg.nproc_per_node - 1},
      {"round", round.round},
      {"restart_count", restart_count},
      {"max_restarts", cfg.max_restarts},
      {"state", final_state.empty() ? phase_name(phase) : final_state},
      {"workers", ws},
      {"updated", std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch()).count()},
  };
  status_caller->call([h = handler, key = status_key(cfg.rendezvous.run_id, cfg.node.node_id),
                       value = record.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace)] {
    try {
      h->store()->set(key, value);
    } catch (const std::exception&) {
      // Status is advisory; the rendezvous path reports a lost store itself.
    }
  });
}

void Agent::Impl::flush_status() {
  if (!status_caller) return;
  if (result.exit_code == 3) {
    // The store is gone: waiting for writes to it would only delay the exit.
    if (status_caller->busy()) result.abandon_process = true;
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  status_caller->call([done] { done->set_value(); });
  if (f.wait_for(kStatusFlushTimeout) != std::future_status::ready) {
    // A store write is stuck: the caller must not run static destructors under it.
    result.abandon_process = true;
  }
}

}  // namespace ddp::agent
