#include "ddp/common/installed_file.hpp"

#include <unistd.h>

#include <system_error>
#include <vector>

namespace ddp {

namespace fs = std::filesystem;

std::string find_installed(const fs::path& relative, const std::string& fallback, int mode) {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(self.parent_path().parent_path() / relative);
  candidates.emplace_back(fallback);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), mode) == 0) return c.string();
  }
  return "";
}

}  // namespace ddp
