// Which local address Gloo's TCP transport listens on: one the other ranks can reach.
#pragma once

#include <string>

namespace ddp::detail {

struct GlooAddress {
  std::string iface;     // bind to this interface's address, or
  std::string hostname;  // bind to this address/name
  std::string reason;    // for the debug log and error messages
};

// In order (docs/worker-sdk.md, "Gloo network interface"):
//  1. `requested` (ProcessGroupOptions::interface), DDP_GLOO_IFNAME, GLOO_SOCKET_IFNAME;
//  2. 127.0.0.1 when the store host (DDP_STORE_ENDPOINT or MASTER_ADDR) is a
//     loopback address, or LOCAL_WORLD_SIZE == WORLD_SIZE (a single-host job);
//  3. the address the hostname resolves to, if it is not loopback and can be bound;
//  4. the local address of the route to the store host;
//  5. 127.0.0.1.
GlooAddress choose_gloo_address(const std::string& requested);

}  // namespace ddp::detail
