#include "etcd_handler.hpp"

#include <algorithm>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/etcd_store.hpp"
#include "dynamic_handler.hpp"
#include "keys.hpp"
#include "retry_notice.hpp"
#include "store_access.hpp"

namespace ddp::rdzv::detail {

std::shared_ptr<store::Store> open_etcd_store(const RendezvousConfig& config) {
  store::EtcdStoreOptions o;
  o.endpoints =
      config.etcd.endpoints.empty() ? std::vector<Endpoint>{config.endpoint} : config.etcd.endpoints;
  for (const auto& ep : o.endpoints) {
    if (ep.host.empty() || ep.port == 0)
      throw ConfigError("--rdzv_endpoint: etcd rendezvous needs HOST:PORT[,HOST:PORT...], got '" +
                        ep.to_string() + "'");
  }
  o.prefix = config.etcd.prefix;
  o.https = config.etcd.https;
  o.ca_file = config.etcd.cacert;
  o.cert_file = config.etcd.cert;
  o.key_file = config.etcd.key;
  o.request_timeout = std::max(config.keep_alive_interval, std::chrono::milliseconds(1000));
  std::string where;
  for (const auto& ep : o.endpoints) {
    if (!where.empty()) where += ',';
    where += ep.to_string();
  }
  // As for the built-in store: the first contact waits for etcd as long as the
  // join timeout (saying early and then every 30 s that it cannot reach it);
  // later requests give up within the keep-alive window, so that a dead etcd
  // is reported as lost instead of retried for the whole join timeout.
  auto first = o;
  first.connect_timeout = std::max(config.join_timeout, std::chrono::milliseconds(1));
  first.on_unreachable = RetryNotice(where, first.connect_timeout, "--rdzv_conf join_timeout");
  try {
    store::EtcdStore(first).ping();
  } catch (const NetworkError& e) {
    throw ConfigError("cannot reach the rendezvous store at " + where + " (--rdzv_endpoint) after waiting " +
                      seconds_text(first.connect_timeout) + ": " + e.what());
  }
  o.connect_timeout = std::max(keep_alive_window(config), std::chrono::milliseconds(1000));
  return std::make_shared<store::EtcdStore>(o);
}

EtcdHandler::EtcdHandler(const RendezvousConfig& config, const NodeSpec& self)
    : config_(config), self_(self), etcd_(open_etcd_store(config)) {
  StoreAccess access;
  access.client = etcd_;
  // Arrivals are counted by create revision, not on a shared counter that
  // every joiner would have to compare-and-swap (arrival_step.hpp).
  auto arrivals = etcd_arrivals(std::static_pointer_cast<store::EtcdStore>(etcd_), self_.local_world_size);
  inner_ = std::make_unique<DynamicHandler>(config_, self_, std::move(access), std::move(arrivals));
}

EtcdHandler::~EtcdHandler() {
  inner_.reset();  // revokes this node's lease before the worker store goes
  worker_store_.reset();
}

RendezvousResult EtcdHandler::next_rendezvous() {
  auto res = inner_->next_rendezvous();
  const auto key = round_prefix(config_.run_id, res.round) + "worker_store";
  if (res.group_rank == 0) {
    if (!worker_store_) worker_store_ = host_store(config_, "0.0.0.0", 0);
    res.store_endpoint = Endpoint{self_.host, worker_store_->port()};
    etcd_->set(key, res.store_endpoint.to_string());
    log::get("rdzv")->info("hosting the workers' store run_id={} round={} endpoint={}", config_.run_id,
                           res.round, res.store_endpoint.to_string());
  } else {
    std::string text;
    try {
      text = etcd_->get(key, config_.close_timeout);
    } catch (const TimeoutError&) {
      throw RendezvousError("round " + std::to_string(res.round) + " of run '" + config_.run_id +
                            "': group rank 0 did not publish the workers' store within " +
                            seconds_text(config_.close_timeout) + " (key " + key + " in etcd)");
    }
    res.store_endpoint = parse_endpoint(text, key);
  }
  return res;
}

}  // namespace ddp::rdzv::detail
