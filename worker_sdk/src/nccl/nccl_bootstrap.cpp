#include "nccl/nccl_bootstrap.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <thread>

#include <cuda_runtime_api.h>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/store.hpp"

namespace ddp::detail {
namespace {

std::string who(const BackendConfig& config) {
  return "rank " + std::to_string(config.rank) + " of " + std::to_string(config.size) + " (group '" +
         config.options.name + "')";
}

std::string cuda_text(cudaError_t err) { return std::string(cudaGetErrorString(err)); }

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

std::string nccl_error_text(ncclResult_t result) {
  return std::string("NCCL error '") + ncclGetErrorString(result) + "' (" + std::to_string(static_cast<int>(result)) + ")";
}

int select_device(const BackendConfig& config) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    throw BackendError(who(config) + ": backend 'nccl' needs a CUDA device, but none is visible (" +
                       (err != cudaSuccess ? cuda_text(err) : std::string("0 devices")) +
                       "); use backend 'gloo' or check CUDA_VISIBLE_DEVICES");
  }
  int device = config.options.device;
  std::string source = "ProcessGroupOptions::device";
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = local != nullptr && *local != '\0' ? std::atoi(local) : config.rank;
    source = "LOCAL_RANK";
  }
  if (device >= count) {
    throw ConfigError(who(config) + ": " + source + "=" + std::to_string(device) + " has no GPU of its own: only " +
                      std::to_string(count) + " CUDA device(s) are visible on this host; fix --nproc_per_node (at most " +
                      std::to_string(count) + ") or CUDA_VISIBLE_DEVICES");
  }
  const cudaError_t set = cudaSetDevice(device);
  if (set != cudaSuccess) {
    throw BackendError(who(config) + ": cudaSetDevice(" + std::to_string(device) + ") failed: " + cuda_text(set));
  }
  return device;
}

void check_one_rank_per_gpu(const BackendConfig& config, int device) {
  char bus_id[64] = {};
  const cudaError_t err = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  if (err != cudaSuccess) {
    throw BackendError(who(config) + ": cannot read the PCI bus id of CUDA device " + std::to_string(device) + ": " +
                       cuda_text(err));
  }
  const std::string mine = hostname() + "|" + bus_id;
  config.store->set(config.key_prefix + "nccl/gpu/" + std::to_string(config.rank), mine);
  std::map<std::string, int> owner;
  for (int r = 0; r < config.size; ++r) {
    const std::string theirs =
        r == config.rank ? mine : config.store->get(config.key_prefix + "nccl/gpu/" + std::to_string(r), config.options.timeout);
    auto [it, inserted] = owner.emplace(theirs, r);
    if (!inserted) {
      const auto bar = theirs.find('|');
      throw ConfigError("ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " both use GPU " +
                        theirs.substr(bar + 1) + " on host " + theirs.substr(0, bar) +
                        ", but NCCL needs one GPU per rank: fix --nproc_per_node (at most the number of GPUs per "
                        "host) or CUDA_VISIBLE_DEVICES");
    }
  }
}

ncclComm_t init_communicator(const BackendConfig& config, std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  const std::string key = config.key_prefix + "nccl/unique_id";
  if (config.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw BackendError(who(config) + ": ncclGetUniqueId failed: " + nccl_error_text(r));
    config.store->set(key, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string value = config.store->get(key, timeout);
    if (value.size() != sizeof(id)) {
      throw BackendError(who(config) + ": the NCCL unique id under '" + key + "' has " + std::to_string(value.size()) +
                         " bytes, expected " + std::to_string(sizeof(id)) + " (an SDK version mismatch between ranks?)");
    }
    std::memcpy(&id, value.data(), sizeof(id));
  }

  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // lets us enforce the deadline and abort
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, config.size, id, config.rank, &nccl_config);
  const Deadline deadline = Deadline::after(timeout);
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state = ncclSuccess;
    if (comm != nullptr) ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) return comm;
    if (state != ncclInProgress) {
      r = state;
      break;
    }
    if (deadline.expired()) {
      ncclCommAbort(comm);
      throw TimeoutError("NCCL communicator init timed out after " + std::to_string(timeout.count()) + " ms on " +
                         who(config) + ": a peer joined the store but never initialised NCCL (crashed, stuck, or "
                         "unreachable over the network; NCCL_SOCKET_IFNAME selects the interface)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (comm != nullptr) ncclCommAbort(comm);
  throw BackendError("NCCL communicator init failed on " + who(config) + ": " + nccl_error_text(r) +
                     "; NCCL_DEBUG=INFO shows why");
}

}  // namespace ddp::detail
