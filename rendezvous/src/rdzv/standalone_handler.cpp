#include "standalone_handler.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/tcp_store.hpp"
#include "keys.hpp"

namespace ddp::rdzv {

namespace {
// Workers on this machine only; binding loopback keeps a laptop's job off the network.
constexpr const char* kLoopback = "127.0.0.1";
}  // namespace

StandaloneHandler::StandaloneHandler(const RendezvousConfig& config, const NodeSpec& self)
    : config_(config), self_(self) {
  detail::validate_run_id(config_.run_id);
  access_.server = detail::host_store(config_, kLoopback, 0);
  log::get("rdzv")->debug("standalone store started endpoint={}:{} run_id={}", kLoopback,
                          access_.server->port(), config_.run_id);
}

StandaloneHandler::~StandaloneHandler() {
  // The client goes first: its I/O thread must not outlive the server it talks to
  // in a way that makes it spin on reconnects during teardown.
  {
    std::lock_guard<std::mutex> lock(mu_);
    access_.client.reset();
  }
  access_.server->stop();
}

RendezvousResult StandaloneHandler::next_rendezvous() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_reason_.empty()) {
    throw RendezvousError("rendezvous of run_id=" + config_.run_id + " is closed: " + closed_reason_);
  }
  RendezvousResult r;
  r.round = next_round_++;
  r.group_rank = 0;
  r.group_world_size = 1;
  r.rank_offset = 0;
  r.world_size = self_.local_world_size;
  r.nodes = {self_};
  r.store_endpoint = Endpoint{kLoopback, access_.server->port()};
  r.worker_prefix = detail::worker_prefix(config_.run_id, r.round);
  in_round_ = true;
  succeeded_ = false;
  return r;
}

void StandaloneHandler::report_failure(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  succeeded_ = false;
  log::get("rdzv")->info("worker failure reported run_id={} round={} reason={}", config_.run_id,
                         next_round_ - 1, reason);
}

void StandaloneHandler::report_success() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_round_) succeeded_ = true;
}

bool StandaloneHandler::all_succeeded() {
  std::lock_guard<std::mutex> lock(mu_);
  return succeeded_;
}

void StandaloneHandler::close(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_reason_ = reason.empty() ? "closed" : reason;
}

std::shared_ptr<store::Store> StandaloneHandler::store() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!access_.client) {
    store::TcpStoreOptions opts;
    opts.endpoint = Endpoint{kLoopback, access_.server->port()};
    opts.token = config_.token;
    access_.client = std::make_shared<store::TcpStore>(opts);
  }
  return access_.client;
}

}  // namespace ddp::rdzv
