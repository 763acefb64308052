#include "nccl/nccl_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "ddp/common/error.hpp"

namespace ddp::detail {
namespace {

// The major version of the CUDA runtime the build saw: its soname.
constexpr int kCudartMajor = CUDART_VERSION / 1000;

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dynamic loader error";
}

// dlopen of the first name that loads; on failure `error` holds the loader's
// message for each name tried.
void* open_first(const std::vector<std::string>& names, std::string& error) {
  for (const auto& name : names) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    error += (error.empty() ? "" : "; ") + dl_error();
  }
  return nullptr;
}

// The file behind a handle, as the loader resolved it.
std::string path_of(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  return dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
                 *map->l_name != '\0'
             ? map->l_name
             : fallback;
}

template <typename F>
bool resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string nccl_fix() {
  return std::string("install NCCL >= ") + nccl_version_text(kMinNcclVersion) + " (built against " +
         nccl_version_text(NCCL_VERSION_CODE) +
         ") and put its libnccl.so.2 on LD_LIBRARY_PATH or name it in " + kNcclLibraryEnv +
         ", or use backend 'gloo'";
}

std::unique_ptr<NcclApi> open_nccl(const std::string& who) {
  const std::string chosen = env_or_empty(kNcclLibraryEnv);
  const std::string name = chosen.empty() ? "libnccl.so.2" : chosen;
  std::string error;
  void* handle = open_first({name}, error);
  if (handle == nullptr) {
    throw BackendError(who + ": backend 'nccl' cannot load NCCL (" + error + "); " + nccl_fix());
  }
  auto api = std::make_unique<NcclApi>();
  api->library = path_of(handle, name);
  if (!resolve(handle, "ncclGetVersion", api->ncclGetVersion)) {
    throw BackendError(who + ": " + api->library + " is not an NCCL library (" + dl_error() + "); " +
                       nccl_fix());
  }
  const ncclResult_t r = api->ncclGetVersion(&api->version);
  if (r != ncclSuccess) {
    throw BackendError(who + ": ncclGetVersion of " + api->library + " failed (" +
                       std::to_string(static_cast<int>(r)) + "); " + nccl_fix());
  }
  // The version first: an old NCCL lacks symbols, and its version says more.
  if (api->version < kMinNcclVersion) {
    throw BackendError(
        who + ": NCCL " + nccl_version_text(api->version) + " (" + api->library +
        ") was loaded at run time, but backend 'nccl' needs NCCL >= " + nccl_version_text(kMinNcclVersion) +
        " (built against " + nccl_version_text(NCCL_VERSION_CODE) +
        "); put a newer libnccl.so.2 on LD_LIBRARY_PATH or name it in " + kNcclLibraryEnv +
        ", or use backend 'gloo'");
  }
#define DDP_RESOLVE(fn)                                                                          \
  if (!resolve(handle, #fn, api->fn)) {                                                          \
    throw BackendError(who + ": NCCL " + nccl_version_text(api->version) + " (" + api->library + \
                       ") lacks " #fn " (" + dl_error() + "); " + nccl_fix());                   \
  }
  DDP_NCCL_FUNCTIONS(DDP_RESOLVE)
#undef DDP_RESOLVE
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  if (api->version >= kScalableInitNcclVersion)
    resolve(handle, "ncclCommInitRankScalable", api->ncclCommInitRankScalable);
#endif
  return api;  // the handle stays open for the life of the process
}

std::unique_ptr<CudaApi> open_cuda(const std::string& who) {
  const std::string chosen = env_or_empty(kCudartLibraryEnv);
  const std::string soname = "libcudart.so." + std::to_string(kCudartMajor);
  const std::vector<std::string> names =
      chosen.empty() ? std::vector<std::string>{soname, "libcudart.so"} : std::vector<std::string>{chosen};
  const std::string fix = "install the CUDA " + std::to_string(kCudartMajor) + " runtime and put " + soname +
                          " on LD_LIBRARY_PATH or name it in " + kCudartLibraryEnv +
                          ", or use backend 'gloo'";
  std::string error;
  void* handle = open_first(names, error);
  if (handle == nullptr) {
    throw BackendError(who + ": backend 'nccl' cannot load the CUDA runtime (" + error + "); " + fix);
  }
  auto api = std::make_unique<CudaApi>();
  api->library = path_of(handle, names.front());
#define DDP_RESOLVE(fn)                                                                               \
  if (!resolve(handle, #fn, api->fn)) {                                                               \
    throw BackendError(who + ": the CUDA runtime " + api->library + " lacks " #fn " (" + dl_error() + \
                       "); " + fix);                                                                  \
  }
  DDP_CUDA_FUNCTIONS(DDP_RESOLVE)
  DDP_RESOLVE(cudaMalloc)
#undef DDP_RESOLVE
  api->cudaRuntimeGetVersion(&api->runtime_version);
  return api;
}

std::mutex g_mu;
std::unique_ptr<NcclApi> g_nccl;
std::unique_ptr<CudaApi> g_cuda;

}  // namespace

bool NcclApi::scalable_init() const {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  return ncclCommInitRankScalable != nullptr;
#else
  return false;
#endif
}

const NcclApi& load_nccl(const std::string& who) {
  std::lock_guard lock(g_mu);
  if (!g_nccl) g_nccl = open_nccl(who);
  return *g_nccl;
}

const CudaApi& load_cuda(const std::string& who) {
  std::lock_guard lock(g_mu);
  if (!g_cuda) g_cuda = open_cuda(who);
  return *g_cuda;
}

const CudaApi* try_load_cuda() noexcept {
  try {
    return &load_cuda("");
  } catch (...) {
    return nullptr;
  }
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string cuda_version_text(int code) {
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

}  // namespace ddp::detail
