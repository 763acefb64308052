// Bringing up an NCCL communicator through our store: device choice, the
// one-rank-per-GPU check, the ncclUniqueId exchange and non-blocking init.
#pragma once

#include <chrono>
#include <string>

#include <nccl.h>

#include "backend.hpp"

namespace ddp::detail {

// Picks and sets the CUDA device of this rank (options.device, else LOCAL_RANK).
// ConfigError when LOCAL_RANK has no device of its own.
int select_device(const BackendConfig& config);

// Exchanges "host|PCI bus id" of every rank through the store and throws
// ConfigError when two ranks of the group share one GPU, which NCCL refuses
// ("Duplicate GPU detected"): the message says to fix --nproc_per_node or
// CUDA_VISIBLE_DEVICES.
void check_one_rank_per_gpu(const BackendConfig& config, int device);

// Rank 0 creates the ncclUniqueId and publishes it under the group's key;
// every rank then runs ncclCommInitRankConfig with blocking = 0 and polls it
// until `timeout`, aborting the half-built communicator on timeout or error.
ncclComm_t init_communicator(const BackendConfig& config, std::chrono::milliseconds timeout);

// "NCCL error 'unhandled system error' (2)".
std::string nccl_error_text(ncclResult_t result);

}  // namespace ddp::detail
