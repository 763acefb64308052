// The agent's side of process containment: every worker is started under
// ddp-guard (agent/guard/), which keeps the worker's whole process tree
// contained while the agent runs and after it dies (docs/agent-workers.md).
//
// Thread-safety: free functions; guard_executable() is computed once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddp::agent {

// ddp-guard beside the running executable, else in the install prefix; empty
// when neither exists (the agent then warns once and spawns workers directly).
const std::string& guard_executable();

// Every guard started from now on gets this fence file (fence_file.hpp);
// empty: none.
void set_guard_fence_file(const std::string& path);
std::string guard_fence_file();

// The guard's argv (after its own path) for running `executable args...`.
std::vector<std::string> guard_args(const std::string& executable, const std::vector<std::string>& args,
                                    std::chrono::milliseconds stop_timeout, int info_fd);

// What the guard wrote on its info fd.
struct GuardReport {
  pid_t worker_pid = -1;
  std::string cgroup;  // the worker's cgroup v2, empty when none
  std::string error;   // set when the worker could not be started
};

// The guard's report from everything it wrote on its info fd before closing it
// (`executable` names the worker in errors).
GuardReport parse_guard_report(const std::string& text, const std::string& executable);

// Kills and removes a worker cgroup its guard left behind (the guard was killed).
void release_cgroup(const std::string& path);

// Kills and removes, anywhere in the unified cgroup hierarchy, the cgroups of
// guards that are gone (ddprun and its guards were all SIGKILLed at once:
// agent/guard/stale_cgroups.hpp); one warning per cgroup.
void reap_stale_cgroups();

}  // namespace ddp::agent
