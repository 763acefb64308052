#include "nccl/nccl_bootstrap.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <thread>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/store/store.hpp"

namespace ddp::detail {
namespace {

std::string who(const BackendConfig& config) { return rank_text(config); }

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

std::string rank_text(const BackendConfig& config) {
  return "rank " + std::to_string(config.rank) + " of " + std::to_string(config.size) + " (group '" +
         config.options.name + "')";
}

std::string nccl_error_text(const NcclApi& nccl, ncclResult_t result) {
  return std::string("NCCL error '") + nccl.ncclGetErrorString(result) + "' (" +
         std::to_string(static_cast<int>(result)) + ")";
}

int select_device(const CudaApi& cuda, const BackendConfig& config) {
  int count = 0;
  const cudaError_t err = cuda.cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    throw BackendError(
        who(config) + ": backend 'nccl' needs a CUDA device, but the CUDA runtime " +
        cuda_version_text(cuda.runtime_version) + " (" + cuda.library + ") sees none (" +
        (err != cudaSuccess ? std::string(cuda.cudaGetErrorString(err)) : std::string("0 devices")) +
        "); use backend 'gloo' or check CUDA_VISIBLE_DEVICES and the NVIDIA driver");
  }
  int device = config.options.device;
  std::string source = "ProcessGroupOptions::device";
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = local != nullptr && *local != '\0' ? parse_int<int>(local).value_or(0) : config.rank;
    source = "LOCAL_RANK";
  }
  if (device >= count) {
    throw ConfigError(who(config) + ": " + source + "=" + std::to_string(device) +
                      " has no GPU of its own: only " + std::to_string(count) +
                      " CUDA device(s) are visible on this host; fix --nproc_per_node (at most " +
                      std::to_string(count) + ") or CUDA_VISIBLE_DEVICES");
  }
  const cudaError_t set = cuda.cudaSetDevice(device);
  if (set != cudaSuccess) {
    throw BackendError(who(config) + ": cudaSetDevice(" + std::to_string(device) +
                       ") failed: " + cuda.cudaGetErrorString(set));
  }
  return device;
}

void check_one_rank_per_gpu(const CudaApi& cuda, const BackendConfig& config, int device,
                            const Deadline& deadline) {
  char bus_id[64] = {};
  const cudaError_t err = cuda.cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  if (err != cudaSuccess) {
    throw BackendError(who(config) + ": cannot read the PCI bus id of CUDA device " + std::to_string(device) +
                       ": " + cuda.cudaGetErrorString(err));
  }
  const std::string mine = hostname() + "|" + bus_id;
  config.store->set(config.key_prefix + "nccl/gpu/" + std::to_string(config.rank), mine);
  std::map<std::string, int> owner;
  for (int r = 0; r < config.size; ++r) {
    const std::string theirs = r == config.rank
                                   ? mine
                                   : config.store->get(config.key_prefix + "nccl/gpu/" + std::to_string(r),
                                                       std::max(deadline.remaining(), Millis(1)));
    auto [it, inserted] = owner.emplace(theirs, r);
    if (!inserted) {
      const auto bar = theirs.find('|');
      throw ConfigError(
          "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " both use GPU " +
          theirs.substr(bar + 1) + " on host " + theirs.substr(0, bar) +
          ", but NCCL needs one GPU per rank: fix --nproc_per_node (at most the number of GPUs per "
          "host) or CUDA_VISIBLE_DEVICES");
    }
  }
}

int unique_id_count(int size, bool scalable, int ranks_per_root) {
  if (scalable && ranks_per_root > 0 && size > ranks_per_root)
    return (size + ranks_per_root - 1) / ranks_per_root;
  return 1;
}

int unique_id_root(int rank, int size, int ids) {
  // Ids spread evenly: the first size % ids roots serve one rank more. The same
  // split NCCL's documentation and torch's ProcessGroupNCCL use.
  const int per = size / ids;
  const int extra = size % ids;
  const int split = extra * (per + 1);
  if (rank < split) return rank % (per + 1) == 0 ? rank / (per + 1) : -1;
  return (rank - split) % per == 0 ? (rank - split) / per + extra : -1;
}

ncclComm_t init_communicator(const NcclApi& nccl, const BackendConfig& config, const Deadline& deadline,
                             const InitPlan& plan, InitTimings& timings) {
  using SteadyClock = std::chrono::steady_clock;
  const auto exchange_started = SteadyClock::now();
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(plan.ids));
  const std::string base = config.key_prefix + "nccl/unique_id";
  auto key_of = [&](int i) { return plan.ids == 1 ? base : base + "/" + std::to_string(i); };
  const int mine =
      plan.ids == 1 ? (config.rank == 0 ? 0 : -1) : unique_id_root(config.rank, config.size, plan.ids);
  if (mine >= 0) {
    const ncclResult_t r = nccl.ncclGetUniqueId(&ids[static_cast<std::size_t>(mine)]);
    if (r != ncclSuccess) {
      throw BackendError(who(config) + ": ncclGetUniqueId failed: " + nccl_error_text(nccl, r));
    }
    config.store->set(key_of(mine),
                      std::string_view(reinterpret_cast<const char*>(&ids[static_cast<std::size_t>(mine)]),
                                       sizeof(ncclUniqueId)));
  }
  for (int i = 0; i < plan.ids; ++i) {
    if (i == mine) continue;
    const std::string value = config.store->get(key_of(i), std::max(deadline.remaining(), Millis(1)));
    if (value.size() != sizeof(ncclUniqueId)) {
      throw BackendError(who(config) + ": the NCCL unique id under '" + key_of(i) + "' has " +
                         std::to_string(value.size()) + " bytes, expected " +
                         std::to_string(sizeof(ncclUniqueId)) + " (an SDK version mismatch between ranks?)");
    }
    std::memcpy(&ids[static_cast<std::size_t>(i)], value.data(), sizeof(ncclUniqueId));
  }
  const auto init_started = SteadyClock::now();
  timings.id_exchange = std::chrono::duration_cast<Millis>(init_started - exchange_started);

  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // lets us enforce the deadline and abort
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclSuccess;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  if (plan.ids > 1) {
    r = nccl.ncclCommInitRankScalable(&comm, config.size, config.rank, plan.ids, ids.data(), &nccl_config);
  } else {
    r = nccl.ncclCommInitRankConfig(&comm, config.size, ids[0], config.rank, &nccl_config);
  }
#else
  r = nccl.ncclCommInitRankConfig(&comm, config.size, ids[0], config.rank, &nccl_config);
#endif
  auto done = [&] {
    timings.nccl_init = std::chrono::duration_cast<Millis>(SteadyClock::now() - init_started);
  };
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state = ncclSuccess;
    if (comm != nullptr) nccl.ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) {
      done();
      return comm;
    }
    if (state != ncclInProgress) {
      r = state;  // a failed peer surfaces here (ncclRemoteError / ncclSystemError)
      break;
    }
    if (deadline.expired()) {
      nccl.ncclCommAbort(comm);
      done();
      throw TimeoutError("NCCL communicator init timed out after " + std::to_string(plan.timeout.count()) +
                         " ms on " + who(config) +
                         ": a peer joined the store but never initialised NCCL (crashed, "
                         "stuck, or unreachable over the network; NCCL_SOCKET_IFNAME selects the interface)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (comm != nullptr) nccl.ncclCommAbort(comm);
  done();
  throw BackendError("NCCL communicator init failed on " + who(config) + ": " + nccl_error_text(nccl, r) +
                     "; NCCL_DEBUG=INFO shows why");
}

}  // namespace ddp::detail
