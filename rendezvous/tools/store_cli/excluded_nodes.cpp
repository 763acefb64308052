#include "excluded_nodes.hpp"

#include <cstdio>

#include "ddp/common/printable.hpp"
#include "ddp/store/job_keys.hpp"
#include "store_commands.hpp"

namespace ddp::store_cli {

int list_excluded(store::Store& store, const std::string& rdzv_id) {
  const std::string dir = store::keys::excluded_prefix(rdzv_id);
  for (const auto& kv : store.list(dir).kvs) {
    std::printf("%s\t%s\n", printable(kv.key.substr(dir.size())).c_str(), printable(kv.value).c_str());
  }
  return kExitOk;
}

int readmit_excluded(store::Store& store, const std::string& rdzv_id, const std::string& host) {
  if (!store.remove(store::keys::excluded_key(rdzv_id, host))) {
    std::fprintf(stderr, "ddp-store: host '%s' is not excluded from job '%s' (ddp-store excluded list)\n",
                 printable(host).c_str(), printable(rdzv_id).c_str());
    return kExitNotFound;
  }
  std::printf("re-admitted %s to job %s\n", printable(host).c_str(), printable(rdzv_id).c_str());
  return kExitOk;
}

}  // namespace ddp::store_cli
