#include "console_line.hpp"

#include <algorithm>

namespace ddp::agent {

int ConsoleLine::columns(std::string_view text) {
  int n = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b) {
      // CSI: parameters up to a final byte in 0x40..0x7e; else a two-byte escape.
      if (i + 1 < text.size() && text[i + 1] == '[') {
        i += 2;
        while (i < text.size() && (static_cast<unsigned char>(text[i]) < 0x40 || text[i] == 0x7f)) ++i;
      } else {
        ++i;
      }
    } else if (c == '\t') {
      n = (n / 8 + 1) * 8;
    } else if (c >= 0x20 && c != 0x7f && (c & 0xC0) != 0x80) {
      ++n;  // one column per UTF-8 character (wide characters are rare in bars)
    }
  }
  return n;
}

void ConsoleLine::set_size(int cols, int rows) {
  if (cols == cols_ && rows == rows_) return;
  cols_ = std::max(0, cols);
  rows_ = std::max(0, rows);
  // The terminal reflows its rows: what was counted above no longer holds.
  above_.clear();
  cursor_col_ = 0;
  cursor_extent_ = 0;
}

int ConsoleLine::cursor_row_height() const {
  if (cols_ <= 0 || cursor_extent_ == 0) return 1;
  return (cursor_extent_ + cols_ - 1) / cols_;
}

void ConsoleLine::advance(std::string_view text) {
  // Where the terminal row the cursor is on starts, in columns of the line
  // (with the wrap deferred at the last column, as xterm does).
  auto row_start = [this](int col) { return cols_ <= 0 || col == 0 ? 0 : (col - 1) / cols_ * cols_; };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      push_cursor_row(nullptr);
    } else if (c == '\r') {
      cursor_col_ = row_start(cursor_col_);
    } else if (c == '\b') {
      if (cursor_col_ > row_start(cursor_col_)) --cursor_col_;
    } else if (c == 0x1b || c == '\t' || (c >= 0x20 && c != 0x7f && (c & 0xC0) != 0x80)) {
      // One character, escape sequence or tab at a time, through columns().
      std::size_t end = i + 1;
      if (c == 0x1b && end < text.size()) {
        if (text[end] == '[') {
          ++end;
          while (end < text.size() && (static_cast<unsigned char>(text[end]) < 0x40 || text[end] == 0x7f))
            ++end;
        }
        ++end;
      }
      while (c >= 0x80 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
      end = std::min(end, text.size());
      if (c == '\t') {
        const int start = row_start(cursor_col_);
        cursor_col_ = start + ((cursor_col_ - start) / 8 + 1) * 8;
      } else {
        cursor_col_ += columns(text.substr(i, end - i));
      }
      cursor_extent_ = std::max(cursor_extent_, cursor_col_);
      i = end - 1;
    }
  }
}

void ConsoleLine::push_cursor_row(bool* owner) {
  if (cols_ <= 0 || rows_ <= 0) {
    above_.clear();  // nothing is redrawn in place without the terminal's size
  } else {
    above_.push_back({owner, cursor_row_height()});
  }
  cursor_col_ = 0;
  cursor_extent_ = 0;
  trim();
}

void ConsoleLine::end_line_keeping_owner() {
  // The owner's flag stays false: its line was cut, not finished (its own
  // '\n' may still come, WorkerOutput drops it then).
  push_cursor_row(at_line_start);
  at_line_start = nullptr;
  fd = -1;
}

void ConsoleLine::end_line_by_echo() {
  if (at_line_start == nullptr) return;
  *at_line_start = true;
  push_cursor_row(nullptr);
  at_line_start = nullptr;
  fd = -1;
}

bool ConsoleLine::owns_row_above(const bool* writer) const {
  return writer != nullptr &&
         std::any_of(above_.begin(), above_.end(), [writer](const Row& r) { return r.owner == writer; });
}

int ConsoleLine::rows_up_to(const bool* writer, int redraw_columns) const {
  if (cols_ <= 0 || rows_ <= 0 || redraw_columns > cols_) return 0;
  // From the cursor's terminal row up to the top of its line, then every row above.
  int up = (cursor_col_ == 0 ? 0 : (cursor_col_ - 1) / cols_) + 1;
  for (auto it = above_.rbegin(); it != above_.rend(); ++it) {
    if (it->owner == writer) return it->height == 1 && up <= rows_ - 1 ? up : 0;
    up += it->height;
  }
  return 0;
}

void ConsoleLine::release(const bool* writer) {
  for (auto& r : above_) {
    if (r.owner == writer) r.owner = nullptr;
  }
  trim();
}

void ConsoleLine::forget(const bool* writer) {
  release(writer);
  if (at_line_start == writer) {
    at_line_start = nullptr;
    fd = -1;
  }
}

void ConsoleLine::trim() {
  // Rows nobody can redraw any more need no counting once no open row is above them.
  while (!above_.empty() && above_.front().owner == nullptr) above_.erase(above_.begin());
  // Past the screen's height a row has scrolled off: it cannot be reached.
  int height = cursor_row_height();
  for (const auto& r : above_) height += r.height;
  while (!above_.empty() && height > rows_) {
    height -= above_.front().height;
    above_.erase(above_.begin());
    while (!above_.empty() && above_.front().owner == nullptr) {
      height -= above_.front().height;
      above_.erase(above_.begin());
    }
  }
}

}  // namespace ddp::agent
