// A program started with stdin, stdout or stderr closed (`ddprun ... >&-`,
// a careless service unit) would hand those numbers to the first files and
// sockets it opens, and then write log lines and worker output into them.
#pragma once

namespace ddp {

// Opens /dev/null on each of fds 0, 1 and 2 that is closed. Call first thing
// in main(), before any thread or file exists.
void open_closed_std_fds();

}  // namespace ddp
