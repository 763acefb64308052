// Slurm's compact host and count lists, as Slurm puts them in a job's env
// (SLURM_JOB_NODELIST, SLURM_STEP_TASKS_PER_NODE), expanded without asking
// scontrol, so the launcher and the worker SDK read them on any node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

// Expands a Slurm hostlist: "gpu-a[001-003,007],gpu-b7" -> gpu-a001, gpu-a002,
// gpu-a003, gpu-a007, gpu-b7. Commas separate hosts outside brackets and ranges
// inside them; a range keeps the zero padding of its lower bound ("[08-10]"
// -> 08, 09, 10); several bracket groups in one name multiply out
// ("r[1-2]n[1-2]" -> r1n1, r1n2, r2n1, r2n2). Order is kept, duplicates too.
// Throws ConfigError naming `what` (the variable) on an unbalanced bracket, a
// bad or reversed range, an empty name, or more than kMaxHosts hosts.
std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what);

// Expands a Slurm count list: "2(x3),1" -> 2, 2, 2, 1. Throws ConfigError
// naming `what` on anything else.
std::vector<int> expand_count_list(std::string_view text, std::string_view what);

// The most hosts a list may expand to: bounds the memory a bad value can take.
inline constexpr std::size_t kMaxHosts = 1 << 20;

// The store port of a Slurm job step: in [kSlurmPortBase, kSlurmPortBase +
// kSlurmPortSpan), below Linux's ephemeral range (32768+), so that two jobs (or
// two steps of a job, up to four at a time) sharing a node get different ports.
// Two jobs collide only when their ids differ by a multiple of kSlurmPortSpan/4.
inline constexpr int kSlurmPortBase = 20000;
inline constexpr int kSlurmPortSpan = 12000;
int slurm_store_port(std::uint64_t job_id, std::uint64_t step_id);

}  // namespace ddp
