// Bringing up an NCCL communicator through our store: device choice, the
// one-rank-per-GPU check, the ncclUniqueId exchange and non-blocking init.
#pragma once

#include <chrono>
#include <string>

#include <nccl.h>

#include "backend.hpp"
#include "ddp/common/deadline.hpp"

namespace ddp::detail {

// Picks and sets the CUDA device of this rank (options.device, else LOCAL_RANK).
// ConfigError when LOCAL_RANK has no device of its own.
int select_device(const BackendConfig& config);

// Exchanges "host|PCI bus id" of every rank through the store and throws
// ConfigError when two ranks of the group share one GPU, which NCCL refuses
// ("Duplicate GPU detected"): the message says to fix --nproc_per_node or
// CUDA_VISIBLE_DEVICES.
void check_one_rank_per_gpu(const BackendConfig& config, int device, const Deadline& deadline);

// The oldest NCCL the backend runs with: ncclConfig_t, non-blocking init and
// ncclCommGetAsyncError polling arrived in 2.14.
inline constexpr int kMinNcclVersion = NCCL_VERSION(2, 14, 0);

// ncclGetVersion of the library loaded at run time; BackendError naming the
// version found and the one needed when it is older than kMinNcclVersion.
int check_nccl_version(const BackendConfig& config);
// "2.23.4" from an NCCL version code.
std::string nccl_version_text(int code);

// How many ncclUniqueIds a communicator of `size` ranks bootstraps from: one,
// or (NCCL >= 2.23, both the headers built against and the library loaded) one
// per `ranks_per_root` ranks, for ncclCommInitRankScalable.
int unique_id_count(int size, int runtime_version, int ranks_per_root);
// The index of the unique id `rank` creates, or -1 when it creates none.
int unique_id_root(int rank, int size, int ids);

struct InitPlan {
  int ids = 1;
  std::chrono::milliseconds timeout{0};  // the whole init's budget, for messages
};
struct InitTimings {
  std::chrono::milliseconds id_exchange{0};  // creating and fetching the unique id(s) through the store
  std::chrono::milliseconds nccl_init{0};    // ncclCommInitRank{Config,Scalable} until ready
};

// The id roots create ncclUniqueIds and publish them under the group's keys;
// every rank then runs ncclCommInitRankConfig (one id) or
// ncclCommInitRankScalable (several) with blocking = 0 and polls
// ncclCommGetAsyncError until `deadline`, aborting the half-built communicator
// (ncclCommAbort) on timeout or when an error — a failed peer — surfaces.
ncclComm_t init_communicator(const BackendConfig& config, const Deadline& deadline, const InitPlan& plan,
                             InitTimings& timings);

// "NCCL error 'unhandled system error' (2)".
std::string nccl_error_text(ncclResult_t result);

}  // namespace ddp::detail
