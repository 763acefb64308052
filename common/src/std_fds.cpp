#include "ddp/common/std_fds.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ddp {

void open_closed_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number: `fd` itself, since the ones below it are open.
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0 && null_fd != fd) ::close(null_fd);
  }
}

}  // namespace ddp
