// The floor under a store server's cost per request: a bare echo server
// (Boost.Asio, TCP on 127.0.0.1, Nagle off, one loop thread, as
// ddp-rendezvousd) replaying the writes a run of simulated clients made, with
// the same sizes and count per client, each answered with as many bytes as the
// store sent back after it, in one write. Its loop thread's CPU is what the
// kernel and the least user code charge for that traffic on this machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::bench {

// One client write and the bytes the server sent back before the client's next.
struct FloorStep {
  std::uint32_t sent = 0;
  std::uint32_t received = 0;
};
using FloorTrace = std::vector<FloorStep>;

struct FloorResult {
  double server_cpu_us = 0;  // the echo server's loop thread, connect to close
  long writes = 0;           // client writes replayed
  double wall_s = 0;
  std::string error;  // empty when every client finished
};

// Runs the echo server on a thread of its own and one client per trace, all
// at once on this thread (at most `max_connecting` connects in flight), each
// through its trace, then closes them all, as ddp-bench rendezvous does.
FloorResult run_echo_floor(const std::vector<FloorTrace>& traces, int max_connecting);

// CPU time of every thread of process `pid` so far, in microseconds, from its
// CPU clock (clock_getcpuclockid: nanoseconds, where /proc counts 10 ms ticks);
// -1 when unreadable.
double process_cpu_us(int pid);

// process_cpu_us(pid) once that process has gone idle (under 0.1 ms of CPU in
// 30 ms, waiting at most 3 s): a server is still handling the closes of the
// last connections when the last client is done.
double settled_cpu_us(int pid);

}  // namespace ddp::bench
