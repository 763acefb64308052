// Our Store seen through Gloo's rendezvous::Store interface, under a prefix so
// every process group instance has its own keys.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::detail {

// Thread-safe as the underlying Store is. Gloo's get() has no timeout of its
// own, so every blocking call uses the group's timeout, also where Gloo
// passes one: its context's, which the backend shortens while connecting to
// bound each connection's wait, not the wait for the peers' addresses.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<store::Store> store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<store::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddp::detail
