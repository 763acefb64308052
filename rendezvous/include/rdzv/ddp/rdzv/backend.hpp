// The rendezvous backends, their names and aliases: the one list the launcher,
// create_handler and the agent dispatch on (docs/rendezvous.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/common/endpoint.hpp"

namespace ddp::rdzv {

enum class Backend {
  kStandalone,  // one node, in-process store
  kStatic,      // --node_rank + --master_addr/--master_port; node 0 hosts the store
  kC10d,        // dynamic, over ddp-rendezvousd or the store the hosting agent runs
  kEtcd,        // dynamic, over an etcd v3 cluster
};

// The backend a name or alias stands for: "standalone", "static", "c10d"
// (aliases "dynamic", "ddp"), "etcd" (alias "etcd-v2", which torchrun scripts
// use; it speaks etcd's v3 API). nullopt for any other name.
std::optional<Backend> parse_backend(std::string_view name);

// The canonical name of `b` ("c10d" for kC10d).
std::string_view backend_name(Backend b);

// "static, c10d (alias dynamic, ddp), etcd (alias etcd-v2) or standalone", for
// the message that rejects an unknown name.
std::string backend_choices();

// True for the backends whose store is etcd rather than a ddp store.
inline bool uses_etcd(Backend b) { return b == Backend::kEtcd; }

// The etcd cluster members of --rdzv_endpoint ("h1:2379,https://h2:2379").
// Throws ConfigError naming `what` for an empty list or a bad member.
std::vector<Endpoint> parse_etcd_endpoints(std::string_view text, std::string_view what);

}  // namespace ddp::rdzv
