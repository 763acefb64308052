// The store's auth token, read from a file the same way by every program that
// presents or checks it (ddprun, its workers, ddp-rendezvousd, ddp-store), so
// the two sides of a handshake always agree on the bytes.
#pragma once

#include <string>
#include <string_view>

namespace ddp {

// The token in `path`: the file's whole contents less trailing whitespace
// (spaces, tabs, CR, LF), so `echo TOKEN > file` and a file saved with CRLF
// both work. Leading whitespace is kept. Throws ConfigError naming `what` (the
// flag or variable the path came from) and the file:
//   "<what> <path>: cannot read: <errno text>"
//   "<what> <path>: file is empty; put the token in it"   (also all whitespace)
std::string read_token_file(const std::string& path, std::string_view what);

}  // namespace ddp
