// libFuzzer target: a guard request frame's payload as the guard server reads
// it (decode_request, agent/guard/guard_request.hpp). Input: the payload's
// bytes. Findings: a crash, a sanitizer report, an exception, or a request
// that decodes but does not re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "guard_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  std::string why;
  const auto r = ddp::guard::decode_request(payload, &why);
  if (!r) {
    if (why.empty()) __builtin_trap();  // a refusal always says why
    return 0;
  }
  // A decoded request is whole: it has a worker with an absolute path, and
  // encodes and decodes to the same request.
  if (r->argv.empty() || r->argv[0].empty() || r->argv[0][0] != '/') __builtin_trap();
  const auto again = ddp::guard::decode_request(ddp::guard::encode_request(*r), &why);
  if (!again || again->argv != r->argv || again->env != r->env || again->cwd != r->cwd ||
      again->fence_file != r->fence_file || again->stop_timeout != r->stop_timeout ||
      again->cpus.has_value() != r->cpus.has_value() || (r->cpus && !CPU_EQUAL(&*again->cpus, &*r->cpus))) {
    __builtin_trap();
  }
  return 0;
}
