// Built instead of the Gloo backend when Gloo was not found at configure time.
#include "backend.hpp"
#include "ddp/common/error.hpp"

namespace ddp::detail {

std::unique_ptr<Backend> make_gloo_backend(const BackendConfig&) {
  throw ConfigError(
      "backend 'gloo' requested, but this ddp SDK was built without Gloo "
      "(install libgloo-dev and reconfigure)");
}

}  // namespace ddp::detail
