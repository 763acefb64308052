// The agent's parts, made and wired once per run before the first rendezvous:
// what each part reports goes to the coordinator (agent.cpp) or to another part.
#include <boost/asio/post.hpp>

#include "agent_impl.hpp"
#include "containment.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/rdzv/backend.hpp"

namespace ddp::agent {

namespace asio = boost::asio;

void Agent::Impl::set_up() {
  const auto fence = services.fence();
  cfg.rendezvous.on_fence_deadline = [fence](std::chrono::steady_clock::time_point t) { fence->publish(t); };
  // Runs on the joining thread: the event log is the io thread's.
  cfg.rendezvous.on_spare = [this](std::int64_t round) {
    asio::post(io, [this, round] { observers.emit("spare", {{"waiting_beside_round", round}}); });
  };
  cfg.rendezvous.take_places = cfg.on_failure == OnFailure::kReform;
  std::shared_ptr<rdzv::RendezvousHandler> handler =
      initial_handler ? std::move(initial_handler) : rdzv::create_handler(cfg.rendezvous, cfg.node);
  rdzv = std::make_unique<RendezvousCalls>(io, handler);
  rdzv->on_event([this](std::int64_t round, rdzv::RoundEvent e, const std::string& detail) {
    on_round_event(round, e, detail);
  });
  watch_departures();     // agent_node_loss.cpp
  rdzv->connect_store();  // while the rest is set up here
  run_dir.emplace(cfg.log_dir, cfg.rendezvous.run_id,
                  cfg.redirects.any() || cfg.tee.any() || !cfg.duplicate_stdout_filters.empty() ||
                      !cfg.duplicate_stderr_filters.empty());
  if (fence->open(run_dir->path() / RunDir::kFence)) set_guard_fence_file(fence->path());
  if (!cfg.log_dir.empty()) log->info("worker logs in {}", run_dir->path().string());
  // A pipe that cannot be made fails before this node joins anything.
  services.start(run_dir->path(), [this](const TimerRequest& r) { group->on_timer_request(r); });
}

void Agent::Impl::make_parts() {
  runner = std::make_unique<ProcessRunner>(io, /*prestart_guard_server=*/true);
  terminal = std::make_unique<AgentTerminal>(io, cfg, log);
  make_group(rdzv->handler());
  terminal->open([this](const winsize& size) { group->resize_ptys(size); });
  services.start_torch_store();
  if (!cfg.preload.empty()) services.wait_cgroups_reaped();
  start_preload();
}

void Agent::Impl::make_group(const std::shared_ptr<rdzv::RendezvousHandler>& handler) {
  const auto record = [this](const WorkerFailure& f, std::function<void()> done = {}) {
    if (life.have_round())
      return records.record(*rdzv, group->attempt(), life.round().round, f, std::move(done));
    if (done) done();
  };
  WorkerGroupEvents events;
  events.spawn_reported = [this](int lr, pid_t pid) { observers.spawn_reported(lr, pid); };
  events.exited = [this](const Worker& w) {
    observers.worker_exited(w);
    // Every agent's re-forms must know: a finished worker joins none.
    if (reform.active() && life.is(Phase::kRunning) && w.exited_ok()) reform.finished(life.round());
  };
  events.failed = [this, record] {
    if (!group->failures().empty()) record(root_failure());
    on_local_failure();
  };
  events.succeeded = [this] { after_local_success(); };
  events.hung = [this](const Worker& w, const HangInfo& h, std::chrono::milliseconds late) {
    observers.emit("worker_hang",
                   {{"rank", w.rank},
                    {"local_rank", w.local_rank},
                    {"pid", w.pid},
                    {"source", h.source},
                    {"scope", h.scope},
                    {"detail", h.detail},
                    {"missed_rank", h.missed_rank >= 0 ? nlohmann::json(h.missed_rank) : nlohmann::json()},
                    {"waiting", h.waiting},
                    {"late_ms", late.count()}});
  };
  events.hang_recorded = [this, record](const WorkerFailure& f, std::function<void()> recorded) {
    // Never inside this call (an attempt's record may be in already): the
    // kill, and the report that stops the group, follow the report below.
    auto later = [this, recorded = std::move(recorded)] { boost::asio::post(io, recorded); };
    if (reform.active()) return later();  // the other nodes' workers learn of it through the store
    record(f, std::move(later));
    records.set_reported(true);
    rdzv->report_failure(describe_failure(f), [this](const std::string& m) {
      log->warn("could not report the hang to the other nodes: {}", m);
    });
  };
  events.stopped = [this] {
    if (life.is(Phase::kStopping)) on_all_stopped();
  };
  events.heartbeat_ages = [this] {
    observers.publish_status();
    stragglers->tick();
  };
  StragglerWatch::Hooks straggler_hooks;
  straggler_hooks.emit = [this](const std::string& event, nlohmann::json f) {
    observers.emit(event, std::move(f));
  };
  straggler_hooks.changed = [this] { observers.publish_status(); };
  straggler_hooks.act = [this](const Straggler& s) {
    const int lr = life.have_round() ? s.rank - life.round().rank_offset : -1;
    if (lr < 0 || lr >= cfg.nproc_per_node) return;  // another node's rank: that node acts
    HangInfo info;
    info.source = "straggler";
    info.detail = straggler_detail(s, cfg.liveness.straggler_factor);
    group->kill_named(lr, std::move(info));
  };
  straggler_hooks.own_step_s = [this](int rank) -> std::optional<double> {
    const int lr = life.have_round() ? rank - life.round().rank_offset : -1;
    if (lr < 0 || lr >= cfg.nproc_per_node) return std::nullopt;
    const auto hb = group ? group->heartbeats().status(lr) : std::nullopt;
    return hb ? hb->step_s : -1.0;
  };
  stragglers = std::make_unique<StragglerWatch>(io, cfg, life, log, std::move(straggler_hooks));
  stragglers->attach(handler);
  observers.attach_stragglers(*stragglers);
  group = std::make_unique<WorkerGroup>(io, cfg, *runner, *run_dir, *terminal, log, std::move(events));
  observers.attach(handler, *group);
  observers.attach_startup(startup);
}

}  // namespace ddp::agent
