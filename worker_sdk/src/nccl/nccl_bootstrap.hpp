// Bringing up an NCCL communicator through our store: device choice, the
// one-rank-per-GPU check, the ncclUniqueId exchange and non-blocking init.
#pragma once

#include <chrono>
#include <string>

#include "backend.hpp"
#include "ddp/common/deadline.hpp"
#include "nccl/nccl_api.hpp"

namespace ddp::detail {

// "rank 0 of 2 (group 'default')", the start of every message.
std::string rank_text(const BackendConfig& config);

// Picks and sets the CUDA device of this rank (options.device, else LOCAL_RANK).
// BackendError naming the CUDA runtime loaded when no device is visible;
// ConfigError when LOCAL_RANK has no device of its own.
int select_device(const CudaApi& cuda, const BackendConfig& config);

// Exchanges "host|PCI bus id" of every rank through the store and throws
// ConfigError when two ranks of the group share one GPU, which NCCL refuses
// ("Duplicate GPU detected"): the message says to fix --nproc_per_node or
// CUDA_VISIBLE_DEVICES.
void check_one_rank_per_gpu(const CudaApi& cuda, const BackendConfig& config, int device,
                            const Deadline& deadline);

// How many ncclUniqueIds a communicator of `size` ranks bootstraps from: one,
// or, when `scalable` (NCCL >= 2.23 both in the headers built against and in
// the library loaded: NcclApi::scalable_init), one per `ranks_per_root` ranks,
// for ncclCommInitRankScalable.
int unique_id_count(int size, bool scalable, int ranks_per_root);
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
ncclComm_t init_communicator(const NcclApi& nccl, const BackendConfig& config, const Deadline& deadline,
                             const InitPlan& plan, InitTimings& timings);

// "NCCL error 'unhandled system error' (2)".
std::string nccl_error_text(const NcclApi& nccl, ncclResult_t result);

}  // namespace ddp::detail
