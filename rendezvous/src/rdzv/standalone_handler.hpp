// `--standalone`: one node, the store hosted in this process on 127.0.0.1 and
// a free port (no fixed-port collisions between jobs on one machine).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "ddp/rdzv/rendezvous.hpp"
#include "store_access.hpp"

namespace ddp::rdzv {

// Thread-safety: as RendezvousHandler; an internal mutex guards the state.
// Owns the StoreServer; destroying the handler stops it. One node: a failure
// is nobody else's news (the agent restarts its own workers), and with no
// other node to fail, leave or wait, and the store in this process, there are
// no round events.
class StandaloneHandler final : public RendezvousHandler {
 public:
  StandaloneHandler(const RendezvousConfig& config, const NodeSpec& self);
  ~StandaloneHandler() override;

  std::string backend() const override { return "standalone"; }
  RendezvousResult next_rendezvous() override;
  void report_failure(const std::string& reason) override;
  void report_success() override;
  bool all_succeeded() override;
  void close(const std::string& reason) override;
  void set_event_callback(RoundEventCallback /*cb*/) override {}
  std::shared_ptr<store::Store> store() override;

 private:
  RendezvousConfig config_;
  NodeSpec self_;
  std::mutex mu_;
  detail::StoreAccess access_;  // its client is created on the first store() call
  std::int64_t next_round_ = 0;
  bool in_round_ = false;
  bool succeeded_ = false;
  std::string closed_reason_;  // non-empty once closed
};

}  // namespace ddp::rdzv
