// What streaming workers left on the agent's terminal, shared by all workers'
// outputs (and the terminal relay): whose unfinished line the cursor ends,
// and, above the cursor, the rows a worker may still redraw in place.
//
// Two ranks drawing progress bars (tqdm: '\r' and the whole bar, again and
// again) would otherwise scroll the terminal: each switch from one rank to the
// other ends the first one's line with '\n', one new row per update. Instead,
// the line that '\n' ended stays that writer's row: when the writer redraws it
// ('\r' first) while the cursor is on a row below, the redraw goes to its row
// (save cursor, up N rows, erase the row, the redraw, restore cursor). One row
// per rank that draws a bar; torchrun's workers, writing to one terminal,
// redraw one shared row and end two.
//
// Rows are counted in the terminal's own rows: a line wider than the terminal
// wraps into several (the columns of the text written are counted, escape
// sequences skipped), and a row is redrawn in place only when it and its
// redraw fit one row and it is still on the screen. Without the terminal's size
// (not a terminal) nothing is redrawn in place: every switch starts a new row.
//
// Thread-safety: the agent's io thread only.
#pragma once

#include <string_view>
#include <vector>

namespace ddp::agent {

class ConsoleLine {
 public:
  // The writer whose unfinished line the cursor ends (its at_line_start flag),
  // and the fd it writes to; null: the cursor starts a row.
  int fd = -1;
  bool* at_line_start = nullptr;

  // The terminal's size; 0: unknown (no redraw above the cursor).
  void set_size(int cols, int rows);
  // `text` was written at the cursor; each '\n' in it ends the cursor's row
  // for good (the writer's own newline: nobody redraws that row).
  void advance(std::string_view text);
  // A '\n' written to end another writer's unfinished line: that row stays
  // its writer's, to redraw in place; the writer's flag stays false (its
  // line was cut: the '\n' it still owes is not written again).
  void end_line_keeping_owner();
  // The terminal's own echo of Enter ended the cursor's line (a prompt answered).
  void end_line_by_echo();
  // How many rows above the cursor `writer`'s row is, when it may be redrawn
  // in place by `redraw` (display columns of the whole redraw, its prefix
  // included); 0 when it may not (not above, wrapped, too wide, scrolled off).
  int rows_up_to(const bool* writer, int redraw_columns) const;
  // `writer`'s row above the cursor is finished (its redraw ended with '\n')
  // or abandoned (it writes something that is no redraw): no longer its.
  void release(const bool* writer);
  // Whether `writer` owns a row above the cursor.
  bool owns_row_above(const bool* writer) const;
  // A writer that goes away: nothing may point at it any more.
  void forget(const bool* writer);

  // Display columns `text` takes (UTF-8 characters; escape sequences, '\r'
  // and other controls take none; a tab up to the next multiple of 8).
  static int columns(std::string_view text);

 private:
  struct Row {
    bool* owner = nullptr;  // its writer's unfinished line; null: finished
    int height = 1;         // terminal rows it takes (a wrapped line more than one)
  };
  void push_cursor_row(bool* owner);
  void trim();
  int cursor_row_height() const;

  int cols_ = 0;
  int rows_ = 0;
  std::vector<Row> above_;  // rows above the cursor's, top first
  int cursor_col_ = 0;      // columns written on the cursor's row (its wrapped rows counted)
  int cursor_extent_ = 0;   // the most it ever held: its height
};

}  // namespace ddp::agent
