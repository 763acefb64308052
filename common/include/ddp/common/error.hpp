// The one exception hierarchy of ddp. docs/errors.md says which errors are
// recoverable (retry, reconnect, re-rendezvous) and which are not.
#pragma once

#include <stdexcept>
#include <string>

namespace ddp {

// Base of every exception ddp throws across an API boundary.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user's configuration is wrong: a flag, an env variable, a file. Not recoverable;
// the message names what to fix. Maps to exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A deadline passed (a get, a wait, a connect, a collective). Often recoverable.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A socket could not connect, or a connection broke. Recoverable by reconnecting.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// The peer sent bytes that do not follow the protocol. The connection is dropped.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The store answered with an error status (auth failure, limit, missing lease, ...).
class StoreError : public Error {
 public:
  using Error::Error;
};

// Rendezvous could not complete (timeout, closed, too few nodes). Maps to exit code 3.
class RendezvousError : public Error {
 public:
  using Error::Error;
};

// The job cannot go on because nodes were excluded after failing too often
// (ddprun --max_node_failures), or this node is one of them. Maps to exit code 6.
class ExcludedError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// Not a failure: the job finished (every node of its round succeeded) while
// this node waited beside it to join, as a hot spare or a newcomer. Nothing
// is left for it to run; ddprun exits 0 with the message as one line.
class JobFinished : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// A collective backend (Gloo, NCCL) failed.
class BackendError : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside ddp: a bug, never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Text of errno value `err` ("Connection refused"), thread-safe.
std::string errno_text(int err);

}  // namespace ddp

// Invariant check: throws ddp::InternalError naming the file and line.
#define DDP_CHECK(cond, msg)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      throw ::ddp::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                 ": check '" #cond "' failed: " + (msg));                 \
    }                                                                                     \
  } while (0)
