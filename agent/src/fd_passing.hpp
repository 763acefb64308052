// Blocking I/O on a Unix socket to a helper process the agent starts workers
// through (the preload zygote, the guard server): a message sent with file
// descriptors attached, and one reply line read with a deadline.
//
// Thread-safety: free functions on caller-owned fds; they block, so they run
// on the process runner's spawner thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

namespace ddp::agent {

// Sends all of `text` on `conn`, with `fds` attached (SCM_RIGHTS) to its
// first part. False (with `error`, naming `peer`) when the send failed.
bool send_with_fds(int conn, const std::string& text, std::span<const int> fds, const std::string& peer,
                   std::string& error);

// One line from stream socket `conn` (without its '\n'), waiting at most
// `timeout`; what follows the line stays unread. False (with `error`, naming `peer`) on a
// timeout, EOF, or a line longer than `max_bytes`.
bool read_line(int conn, std::chrono::milliseconds timeout, std::size_t max_bytes, const std::string& peer,
               std::string& line, std::string& error);

}  // namespace ddp::agent
