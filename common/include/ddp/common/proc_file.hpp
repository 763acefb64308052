// Reading /proc without exceptions. A process can exit between the open of
// one of its /proc files and the read, which then fails with ESRCH, and
// std::ifstream turns a failed read into an exception (libstdc++'s
// basic_filebuf::underflow throws whatever the stream's exception mask).
// Code that scans other processes must expect them to vanish at any moment:
// these answer nullopt instead.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace ddp {

// Everything left to read from `fd` (not closed here); nullopt on a read error.
std::optional<std::string> read_fd_to_end(int fd);

// The whole of the file at `path`; nullopt when it cannot be opened or read.
std::optional<std::string> read_proc_file(const std::string& path);

// The parent of `pid` from /proc/<pid>/stat; nullopt when the process is gone.
std::optional<pid_t> proc_parent(pid_t pid);

}  // namespace ddp
