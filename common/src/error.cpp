#include "ddp/common/error.hpp"

#include <cstring>

namespace ddp {

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = ::strerror_r(err, buf, sizeof(buf));
  return text;
}

}  // namespace ddp
