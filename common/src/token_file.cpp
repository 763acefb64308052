#include "ddp/common/token_file.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "ddp/common/error.hpp"

namespace ddp {

std::string read_token_file(const std::string& path, std::string_view what) {
  const std::string where = std::string(what) + " " + path;
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(where + ": cannot read: " + errno_text(errno));
  std::stringstream ss;
  errno = 0;
  ss << in.rdbuf();
  std::string token = ss.str();
  // A directory opens, then fails to read (EISDIR).
  if (token.empty() && errno != 0) throw ConfigError(where + ": cannot read: " + errno_text(errno));
  const auto last = token.find_last_not_of(" \t\r\n");
  token.resize(last == std::string::npos ? 0 : last + 1);
  if (token.empty()) throw ConfigError(where + ": file is empty; put the token in it");
  return token;
}

}  // namespace ddp
