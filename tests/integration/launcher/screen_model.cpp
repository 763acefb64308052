#include "screen_model.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ddp::test {

std::vector<std::string> screen_rows(const std::string& bytes, int cols) {
  // Each cell holds one UTF-8 character's bytes.
  std::vector<std::vector<std::string>> rows(1);
  std::size_t row = 0;
  int col = 0;
  bool wrap_pending = false;  // the last column was written: the next character wraps
  // ESC 7 / ESC 8 (DECSC / DECRC): the cursor saved and restored.
  std::size_t saved_row = 0;
  int saved_col = 0;
  bool saved_wrap = false;
  auto ensure_row = [&] {
    if (rows.size() <= row) rows.resize(row + 1);
  };
  for (std::size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\r') {
      col = 0;
      wrap_pending = false;
      ++i;
    } else if (c == '\n') {
      ++row;
      ensure_row();
      wrap_pending = false;
      ++i;
    } else if (c == '\b') {
      col = std::max(0, col - 1);
      wrap_pending = false;
      ++i;
    } else if (c == 0x1b) {
      std::size_t j = i + 1;
      if (j < bytes.size() && bytes[j] == '[') {
        ++j;
        std::string params;
        while (j < bytes.size() && (std::isdigit(static_cast<unsigned char>(bytes[j])) != 0 ||
                                    bytes[j] == ';' || bytes[j] == '?')) {
          params += bytes[j++];
        }
        const int n = params.empty() || params[0] == '?' ? 1 : std::max(1, std::atoi(params.c_str()));
        const char f = j < bytes.size() ? bytes[j] : '\0';
        auto& line = rows[row];
        if (f == 'K' && params == "2") line.clear();
        if (f == 'K' && params != "2" && static_cast<std::size_t>(col) < line.size())
          line.resize(static_cast<std::size_t>(col));
        if (f == 'A') row = row >= static_cast<std::size_t>(n) ? row - static_cast<std::size_t>(n) : 0;
        if (f == 'B') row += static_cast<std::size_t>(n);
        if (f == 'C') col = std::min(cols - 1, col + n);
        if (f == 'D') col = std::max(0, col - n);
        ensure_row();
        wrap_pending = false;
        i = j + 1;
      } else {
        if (j < bytes.size() && bytes[j] == '7') {
          saved_row = row;
          saved_col = col;
          saved_wrap = wrap_pending;
        } else if (j < bytes.size() && bytes[j] == '8') {
          row = saved_row;
          col = saved_col;
          wrap_pending = saved_wrap;
          ensure_row();
        }
        i = j + 1;  // a two-byte escape (ESC =, ESC >, ESC 7, ESC 8, ...)
      }
    } else if (c < 0x20) {
      ++i;  // other controls (bell, ...) show nothing
    } else {
      std::size_t len = 1;
      while (i + len < bytes.size() && (static_cast<unsigned char>(bytes[i + len]) & 0xC0) == 0x80) ++len;
      if (wrap_pending) {
        ++row;
        col = 0;
        ensure_row();
        wrap_pending = false;
      }
      auto& line = rows[row];
      if (line.size() <= static_cast<std::size_t>(col)) line.resize(static_cast<std::size_t>(col) + 1, " ");
      line[static_cast<std::size_t>(col)] = bytes.substr(i, len);
      if (col == cols - 1) {
        wrap_pending = true;
      } else {
        ++col;
      }
      i += len;
    }
  }
  std::vector<std::string> out;
  for (const auto& cells : rows) {
    std::string text;
    for (const auto& cell : cells) text += cell.empty() ? " " : cell;
    text.erase(text.find_last_not_of(' ') + 1);
    out.push_back(text);
  }
  return out;
}

}  // namespace ddp::test
