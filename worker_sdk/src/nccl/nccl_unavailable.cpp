// Built instead of the NCCL backend when CUDA/NCCL were not found at configure time.
#include "backend.hpp"
#include "ddp/common/error.hpp"

namespace ddp {

bool nccl_available() { return false; }

namespace detail {

bool cuda_device_present() { return false; }

std::unique_ptr<Backend> make_nccl_backend(const BackendConfig&) {
  throw ConfigError(
      "backend 'nccl' requested, but this ddp SDK was built without NCCL "
      "(configure with CUDA and NCCL available, DDP_WITH_NCCL=ON); use backend 'gloo'");
}

}  // namespace detail
}  // namespace ddp
