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

// Why the ELF file at `path` cannot be loaded whole, or "" when its headers
// hold together: a regular file, ELF magic, and every program header's and
// the section header table's bytes within the file's size. A plugin cut short
// (an interrupted copy, a full disk) would otherwise be mapped by dlopen and
// kill the process with SIGBUS at the first touch past its end. The reason
// reads after the path: "is 4096 bytes, but its ELF headers place data up to
// byte 45063 (cut short: an interrupted copy or a full disk?)".
std::string elf_file_problem(const std::string& path);

}  // namespace ddp
