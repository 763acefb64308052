// Where a ddp program (ddprun, ddp-rendezvousd, ...) finds a file of its own
// installation, such as a plugin: relative to its executable's prefix (the directory above its bin/), so a
// build tree, the wheel and any install prefix work alike, then at the path of the prefix it was built for.
#pragma once

#include <filesystem>
#include <string>

namespace ddp {

// The first of <executable's dir>/../`relative` and `fallback` that access(2)
// allows with `mode` (R_OK, X_OK); "" if neither.
std::string find_installed(const std::filesystem::path& relative, const std::string& fallback, int mode);

}  // namespace ddp
