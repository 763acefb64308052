// The etcd backend: the c10d-style dynamic rendezvous run unchanged over an
// EtcdStore (node liveness = etcd leases, round closing = etcd txns, fan-out =
// etcd watches). Workers cannot speak etcd, so each round's group rank 0 hosts
// a StoreServer for them (torch's TCPStore protocol included) and publishes
// its address in etcd. Private to ddp_rdzv.
#pragma once

#include <memory>

#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::rdzv::detail {

// The EtcdStore of config.etcd, checked with one request. Requests give up
// within the keep-alive window, as the c10d client does, so a lost cluster is
// reported as a lost store. Throws ConfigError (exit 2) naming the endpoint
// when etcd is unreachable, is not etcd, or the TLS settings do not match.
std::shared_ptr<store::Store> open_etcd_store(const RendezvousConfig& config);

// Thread-safety: as RendezvousHandler.
class EtcdHandler final : public RendezvousHandler {
 public:
  EtcdHandler(const RendezvousConfig& config, const NodeSpec& self);
  ~EtcdHandler() override;

  std::string backend() const override { return "etcd"; }
  RendezvousResult next_rendezvous() override;
  void report_failure(const std::string& reason) override { inner_->report_failure(reason); }
  void report_success() override { inner_->report_success(); }
  bool all_succeeded() override { return inner_->all_succeeded(); }
  void close(const std::string& reason) override { inner_->close(reason); }
  void set_event_callback(RoundEventCallback cb) override { inner_->set_event_callback(std::move(cb)); }
  std::shared_ptr<store::Store> store() override { return etcd_; }
  // A lost node's place (docs/reform.md, "A lost node"); the agent keeps group
  // rank 0's, whose node hosts the workers' store, from being offered.
  void set_departure_callback(DepartureCallback cb) override {
    inner_->set_departure_callback(std::move(cb));
  }
  Place settle_place(const Departure& d, bool offer, bool may_shrink) override {
    return inner_->settle_place(d, offer, may_shrink);
  }
  void set_newcomer_callback(std::function<void(std::int64_t, const std::string&)> cb) override {
    inner_->set_newcomer_callback(std::move(cb));
  }
  void admit_newcomers(std::int64_t round, bool admit, const std::string& detail) override {
    inner_->admit_newcomers(round, admit, detail);
  }

 private:
  RendezvousConfig config_;
  NodeSpec self_;
  std::shared_ptr<store::Store> etcd_;
  std::unique_ptr<RendezvousHandler> inner_;  // the dynamic handler over etcd_
  // Started the first time this node is a group rank 0, kept for later rounds
  // (each round's workers use their own key prefix on it).
  std::unique_ptr<store::StoreServer> worker_store_;
};

}  // namespace ddp::rdzv::detail
