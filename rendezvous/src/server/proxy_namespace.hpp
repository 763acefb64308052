// The key namespace a TorchStoreProxy puts its clients in: pure code, no
// sockets, unit-tested. Rewrites the native Requests the TCPStore codec
// produces on their way to the job's store, and the Responses on their way back.
//
// A torch client names keys as "/<key>" (its TCPStore adds the "/"); the store
// holds them as "<prefix><key>", prefix "/<run_id>/worker/round_<k>/", so
// `ddp-store list /<run_id>/worker/` shows them by job and round. A key
// without the leading "/" (no torch client sends one) maps to "<prefix><key>"
// too and comes back from a listing with a "/".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

#include "ddp/store/protocol.hpp"

namespace ddp::store::server {

class ProxyNamespace {
 public:
  // `prefix` must end with "/" (the caller checks).
  explicit ProxyNamespace(std::string prefix) : prefix_(std::move(prefix)) {}

  const std::string& prefix() const { return prefix_; }
  std::string to_store(std::string_view client_key) const;
  // The client's name for a store key under the prefix; the key unchanged otherwise.
  std::string to_client(std::string_view store_key) const;

  // Puts every key of `req` under the prefix. GETNUMKEYS becomes a listing of
  // the prefix (the store's own count would include every other job's keys),
  // remembered by id so that from_store() answers it with the count.
  void to_store(Request& req);
  // Strips the prefix from returned keys; turns a listing that answers
  // GETNUMKEYS into its count.
  void from_store(Response& resp);

 private:
  std::string prefix_;
  std::unordered_set<std::uint32_t> num_keys_ids_;
};

}  // namespace ddp::store::server
