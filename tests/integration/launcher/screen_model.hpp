// What a terminal of a given width shows for the bytes written to it: enough
// of a VT100 to tell a line redrawn in place from lines that scroll. Handles
// printable text (one column per UTF-8 character), auto-wrap at the right
// margin (deferred, as xterm's), '\r', '\n', '\b', and the CSI sequences
// K and 2K (erase to the end of the line, the whole line), A/B/C/D (cursor
// moves), and ESC 7 / ESC 8 (save and restore the cursor); other escape
// sequences are skipped.
//
// Thread-safety: plain value type.
#pragma once

#include <string>
#include <vector>

namespace ddp::test {

// The rows written since the start, trailing blanks trimmed (the scrollback and
// the screen as one list: rows that scrolled off stay in it).
std::vector<std::string> screen_rows(const std::string& bytes, int cols);

}  // namespace ddp::test
