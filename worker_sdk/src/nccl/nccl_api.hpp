// NCCL and the CUDA runtime, loaded at run time (dlopen) the first time an
// NCCL process group is created, never linked: a program built with the NCCL
// backend starts, and runs Gloo jobs, on a host that has neither library.
// Only the headers are used at build time, for types and constants; every
// NCCL/CUDA call of the backend goes through these tables.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

// The NCCL functions the backend calls (all present since 2.14).
#define DDP_NCCL_FUNCTIONS(X) \
  X(ncclGetErrorString)       \
  X(ncclGetUniqueId)          \
  X(ncclCommInitRankConfig)   \
  X(ncclCommGetAsyncError)    \
  X(ncclCommAbort)            \
  X(ncclCommDestroy)          \
  X(ncclAllReduce)            \
  X(ncclBroadcast)            \
  X(ncclAllGather)            \
  X(ncclReduceScatter)

// The CUDA runtime functions the backend calls.
#define DDP_CUDA_FUNCTIONS(X)  \
  X(cudaRuntimeGetVersion)     \
  X(cudaGetErrorString)        \
  X(cudaGetDeviceCount)        \
  X(cudaSetDevice)             \
  X(cudaDeviceGetPCIBusId)     \
  X(cudaStreamCreateWithFlags) \
  X(cudaStreamDestroy)         \
  X(cudaFree)                  \
  X(cudaEventCreateWithFlags)  \
  X(cudaEventRecord)           \
  X(cudaEventQuery)            \
  X(cudaEventDestroy)          \
  X(cudaStreamWaitEvent)       \
  X(cudaStreamSynchronize)     \
  X(cudaMemcpyAsync)

#define DDP_API_MEMBER(name) decltype(&::name) name = nullptr;

namespace ddp::detail {

// The oldest NCCL the backend runs with: ncclConfig_t, non-blocking init and
// ncclCommGetAsyncError polling arrived in 2.14.
inline constexpr int kMinNcclVersion = NCCL_VERSION(2, 14, 0);
// ncclCommInitRankScalable (several unique ids) arrived in 2.23.
inline constexpr int kScalableInitNcclVersion = NCCL_VERSION(2, 23, 0);

// Environment variables naming the library to load instead of the default
// soname (a path or a name dlopen resolves).
inline constexpr const char* kNcclLibraryEnv = "DDP_NCCL_LIBRARY";
inline constexpr const char* kCudartLibraryEnv = "DDP_CUDART_LIBRARY";

struct NcclApi {
  std::string library;  // the file loaded, as the dynamic loader resolved it
  int version = 0;      // ncclGetVersion
  decltype(&::ncclGetVersion) ncclGetVersion = nullptr;
  DDP_NCCL_FUNCTIONS(DDP_API_MEMBER)
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  // Null when the library loaded is older than 2.23 (one unique id then).
  decltype(&::ncclCommInitRankScalable) ncclCommInitRankScalable = nullptr;
#endif
  bool scalable_init() const;
};

struct CudaApi {
  std::string library;
  int runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
  DDP_CUDA_FUNCTIONS(DDP_API_MEMBER)
  // The header's C function (C++ adds template overloads): the cast picks it,
  // and fails to compile if the header has no such overload.
  decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc)) cudaMalloc = nullptr;
};

// libnccl.so.2 (or $DDP_NCCL_LIBRARY), loaded once per process; a failure is
// not remembered, the next group tries again. BackendError, one line starting
// with `who`, naming what was found (the loader's error, the version, the
// missing symbol) and what is needed (NCCL >= 2.14, LD_LIBRARY_PATH,
// DDP_NCCL_LIBRARY, or backend 'gloo').
const NcclApi& load_nccl(const std::string& who);

// libcudart.so.<major the build saw> falling back to libcudart.so (or
// $DDP_CUDART_LIBRARY); errors as for load_nccl.
const CudaApi& load_cuda(const std::string& who);
// The same without throwing: nullptr when the CUDA runtime cannot be loaded
// (backend "auto" on a host without CUDA).
const CudaApi* try_load_cuda() noexcept;

// "2.23.4" from an NCCL version code; "13.0" from a CUDA runtime version.
std::string nccl_version_text(int code);
std::string cuda_version_text(int code);

}  // namespace ddp::detail
