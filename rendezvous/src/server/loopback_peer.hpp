// Which local process is at the other end of a loopback TCP connection, and
// what one of its environment variables says. Linux only (/proc); every
// lookup may fail (the client already closed, another namespace, no access),
// and then answers nullopt.
//
// The torch store proxy uses it to tell ddprun's local ranks apart while
// they all share one MASTER_PORT: the connecting process (or its nearest
// ancestor that has the variable) carries LOCAL_RANK in its environment.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddp::store::server {

// The pid owning the client socket 127.0.0.1:`peer_port` connected to
// 127.0.0.1:`server_port`, searched among the descendants of `ancestor`.
std::optional<pid_t> loopback_peer_pid(std::uint16_t server_port, std::uint16_t peer_port, pid_t ancestor);

// `name` from the environment `pid` was started with, or from that of its
// nearest ancestor below `stop_at` that has it.
std::optional<std::string> process_env(pid_t pid, const std::string& name, pid_t stop_at);

}  // namespace ddp::store::server
