#include "observers.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "ddp/common/logging.hpp"
#include "ddp/store/job_keys.hpp"
#include "failure_record.hpp"

namespace ddp::agent {

namespace {

// How long run() waits at the end for the last status write to land.
constexpr std::chrono::milliseconds kStatusFlushTimeout{2000};

// A worker the kernel's OOM killer ended, in an event or its status record.
void add_oom(nlohmann::json& j, const Worker& w) {
  if (!w.oom_killed) return;
  j["oom_killed"] = true;
  j["memory_peak_bytes"] = w.memory_peak_bytes >= 0 ? nlohmann::json(w.memory_peak_bytes) : nlohmann::json();
  j["reason"] = "killed by the kernel OOM killer" + (w.memory_peak.empty() ? "" : " (" + w.memory_peak + ")");
}

}  // namespace

std::string status_key(const std::string& run_id, const std::string& node_id) {
  return store::keys::agent_status_key(run_id, node_id);
}

Observers::Observers(const AgentConfig& cfg, const Lifecycle& life) : cfg_(cfg), life_(life) {}

void Observers::open() {
  if (!cfg_.event_log.empty()) event_log_ = std::make_unique<EventLog>(cfg_.event_log);
  status_caller_ = std::make_unique<BlockingCaller>();
}

void Observers::attach(std::shared_ptr<rdzv::RendezvousHandler> handler, const WorkerGroup& group) {
  handler_ = std::move(handler);
  group_ = &group;
}

void Observers::emit(const std::string& event, nlohmann::json fields) {
  if (!event_log_) return;
  fields["run_id"] = cfg_.rendezvous.run_id;
  fields["node"] = cfg_.node.node_id;
  fields["round"] = life_.have_round() ? nlohmann::json(life_.round().round) : nlohmann::json(nullptr);
  fields["restart_count"] = life_.restart_count();
  event_log_->write(event, fields);
}

void Observers::spawn_reported(int local_rank, pid_t pid) {
  if (started_attempt_ == group_->attempt()) {
    // A replacement within the running attempt (--on_failure=reform): a line
    // of its own as soon as it reports, even while another replacement is
    // still starting; the attempt's startup times stay the group's.
    emit("worker_start",
         {{"attempt", group_->attempt()},
          {"ranks", nlohmann::json::array({group_->workers()[static_cast<std::size_t>(local_rank)].rank})},
          {"pids", nlohmann::json::array({pid})},  // -1: could not start
          {"replacement", true}});
  }
  // The group's worker_start is one line, once every spawn has reported; a
  // fast worker may already have exited by then, so its exit line waits.
  if (group_->pending_spawns() > 0) return;
  if (started_attempt_ != group_->attempt()) {
    started_attempt_ = group_->attempt();
    nlohmann::json ranks = nlohmann::json::array();
    nlohmann::json pids = nlohmann::json::array();
    for (const auto& w : group_->workers()) {
      ranks.push_back(w.rank);
      pids.push_back(w.local_rank == local_rank ? pid : w.pid);  // -1: could not start
    }
    emit("worker_start", {{"attempt", group_->attempt()}, {"ranks", ranks}, {"pids", pids}});
    if (startup_) {
      startup_->spawned();
      emit_startup("startup");
    }
  }
  for (int lr : deferred_exits_) worker_exited(group_->workers()[static_cast<std::size_t>(lr)]);
  deferred_exits_.clear();
  publish_status();
}

void Observers::emit_startup(const std::string& event) {
  if (!startup_) return;
  auto f = startup_->fields();
  f["attempt"] = group_ ? group_->attempt() : 0;
  emit(event, std::move(f));
}

void Observers::worker_exited(const Worker& w) {
  if (group_->pending_spawns() > 0) {
    deferred_exits_.push_back(w.local_rank);
    return;
  }
  nlohmann::json f = {{"rank", w.rank},
                      {"local_rank", w.local_rank},
                      {"pid", w.pid},
                      {"exit_code", nullptr},
                      {"signal", nullptr}};
  if (WIFSIGNALED(w.wait_status)) {
    f["signal"] = WTERMSIG(w.wait_status);
  } else {
    f["exit_code"] = WEXITSTATUS(w.wait_status);
  }
  add_oom(f, w);
  emit("worker_exit", f);
  publish_status();
}

void Observers::finished(int code, const std::string& error) {
  std::string reason = error;
  if (code == exit_code(ExitCode::kOk)) {
    emit("success", {{"exit_code", 0}});
    if (reason.empty()) reason = "all workers succeeded";
  } else if (code == exit_code(ExitCode::kFailed) || code == exit_code(ExitCode::kConfig) ||
             code == exit_code(ExitCode::kRendezvous) || code == exit_code(ExitCode::kNoProgress) ||
             code == exit_code(ExitCode::kUnhealthy) || code == exit_code(ExitCode::kExcluded)) {
    emit("failure", {{"exit_code", code}, {"reason", reason}});
  } else if (reason.empty() && code > 128) {
    reason = "stopped by " + signal_name(code - 128);
  }
  emit("shutdown", {{"exit_code", code}, {"reason", reason}});
  // A node stopped by a signal did not fail: the operator (or systemd) stopped it.
  publish_status(code == 0 ? "succeeded" : code > 128 ? "stopped" : "failed");
}

void Observers::publish_status(const std::string& final_state) {
  if (!life_.have_round() || !status_caller_ || !handler_ || !group_) return;
  const auto& round = life_.round();
  nlohmann::json ws = nlohmann::json::array();
  for (const auto& w : group_->workers()) {
    std::string state = "starting";
    if (w.done) {
      state = w.exited_ok() ? "succeeded" : "failed";
    } else if (w.spawned) {
      state = "running";
    }
    nlohmann::json wj = {{"local_rank", w.local_rank}, {"rank", w.rank}, {"pid", w.pid}, {"state", state}};
    if (w.done) add_oom(wj, w);
    // Seconds since its latest heartbeat, as of "updated" (docs/agent-liveness.md).
    if (const auto hb = group_->heartbeats().status(w.local_rank); hb && w.spawned && !w.done) {
      if (hb->age_s >= 0) wj["heartbeat_age_s"] = hb->age_s;
      wj["heartbeats"] = hb->beats;
      if (!hb->section.empty()) wj["section"] = hb->section;
      // Step times (docs/agent-diagnosis.md, "Stragglers"): what the deciding agent compares.
      if (hb->step_s >= 0) {
        wj["step_s"] = hb->step_s;
        wj["steps"] = hb->steps;
      }
    }
    ws.push_back(std::move(wj));
  }
  auto record = record_base(final_state.empty() ? phase_name(life_.phase()) : final_state);
  record["group_rank"] = round.group_rank;
  record["group_world_size"] = round.group_world_size;
  record["rank_first"] = round.rank_offset;
  record["rank_last"] = round.rank_offset + cfg_.nproc_per_node - 1;
  record["round"] = round.round;
  record["workers"] = std::move(ws);
  record["startup"] = startup_ ? startup_->fields() : nlohmann::json(nullptr);
  if (stragglers_) record["stragglers"] = stragglers_->named_json();
  write_record(record);
}

nlohmann::json Observers::record_base(const std::string& state) const {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return {
      {"node", cfg_.node.node_id},
      {"host", cfg_.node.host},
      {"hostname", host},
      {"restart_count", life_.restart_count()},
      {"max_restarts", cfg_.max_restarts},
      {"state", state},
      {"updated", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
  };
}

void Observers::write_record(const nlohmann::json& record) {
  write_key(status_key(cfg_.rendezvous.run_id, cfg_.node.node_id),
            record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Observers::write_key(std::string key, std::string value) {
  status_caller_->call([h = handler_, key = std::move(key), value = std::move(value)] {
    try {
      h->store()->set(key, value);
    } catch (const std::exception&) {
      // Status is advisory; the rendezvous path reports a lost store itself.
    }
  });
}

void Observers::publish_failure(const FailureReport& report, const WorkerFailure& root,
                                const std::string& summary) {
  if (!status_caller_ || !handler_) return;
  const std::int64_t round = life_.have_round() ? life_.round().round : -1;
  write_key(store::keys::agent_failure_key(cfg_.rendezvous.run_id, cfg_.node.node_id),
            failure_record(report, root, summary, cfg_.node.node_id, round));
}

bool Observers::flush(bool store_lost) {
  if (!status_caller_) return true;
  if (store_lost) {
    // The store is gone: waiting for writes to it would only delay the exit.
    return !status_caller_->busy();
  }
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  status_caller_->call([done] { done->set_value(); });
  // A store write is stuck: the caller must not run static destructors under it.
  return f.wait_for(kStatusFlushTimeout) == std::future_status::ready;
}

void Observers::publish_unhealthy(const std::string& reason, int failures) {
  if (!status_caller_ || !handler_) return;
  auto record = record_base("unhealthy: " + reason);
  record["health"] = {{"reason", reason}, {"failures", failures}};
  record["workers"] = nlohmann::json::array();
  // The workers it would start, and after a round the place it held there (a
  // restart round may give it other ranks): what the job is missing.
  record["local_world_size"] = cfg_.nproc_per_node;
  if (life_.have_round()) {
    const auto& round = life_.round();
    record["round"] = round.round;
    record["group_rank"] = round.group_rank;
    record["group_world_size"] = round.group_world_size;
    record["rank_first"] = round.rank_offset;
    record["rank_last"] = round.rank_offset + cfg_.nproc_per_node - 1;
  }
  write_record(record);
}

}  // namespace ddp::agent
