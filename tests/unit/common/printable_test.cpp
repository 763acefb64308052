#include "ddp/common/printable.hpp"

#include <catch2/catch.hpp>
#include <string>

using ddp::Newlines;
using ddp::printable;

TEST_CASE("printable keeps text that prints, in any script") {
  CHECK(printable("gpu1 running 901,902") == "gpu1 running 901,902");
  CHECK(printable("Zürich 東京 ✓") == "Zürich 東京 ✓");
  CHECK(printable("") == "");
}

TEST_CASE("printable escapes terminal control sequences so they show as text") {
  // A colour, a window title set with BEL, a screen clear.
  CHECK(printable("a\x1b[31mRED\x1b]0;title\x07") == "a\\x1b[31mRED\\x1b]0;title\\x07");
  CHECK(printable("\x1b[2J") == "\\x1b[2J");
  CHECK(printable(std::string("nul\0del\x7f", 8)) == "nul\\x00del\\x7f");
  CHECK(printable("cr\rover") == "cr\\rover");
}

TEST_CASE("printable escapes newlines and tabs, or keeps them for a value shown alone") {
  CHECK(printable("k\tv\nPUT fake") == "k\\tv\\nPUT fake");
  CHECK(printable("line 1\n\tline 2", Newlines::kKeep) == "line 1\n\tline 2");
  CHECK(printable("still\r\x1b", Newlines::kKeep) == "still\\r\\x1b");
}

TEST_CASE("printable escapes bytes that are not UTF-8, and invisible code points") {
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc3") == "\\xc3");                    // truncated
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");           // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("\xc2\x9b") == "\\u009b");              // C1 CSI
  CHECK(printable("abc\u202edcba") == "abc\\u202edcba");  // right-to-left override
  CHECK(printable("zero\u200bwidth") == "zero\\u200bwidth");
  CHECK(printable("\U000e0041") == "\\U000e0041");  // a tag character
}

TEST_CASE("printable escapes the backslash, so the result reads back to the same bytes") {
  CHECK(printable("C:\\dir") == "C:\\\\dir");
  CHECK(printable("\\x1b") == "\\\\x1b");
  CHECK(printable("\x1b") != printable("\\x1b"));
}

TEST_CASE("terminal_safe leaves clean text alone, backslashes included, and escapes the rest whole") {
  using ddp::needs_escape;
  using ddp::terminal_safe;
  CHECK(terminal_safe("C:\\dir and a\tb\nnext line Zürich") == "C:\\dir and a\tb\nnext line Zürich");
  CHECK_FALSE(needs_escape("plain\n\ttext \\ with backslash"));
  // Once anything is escaped, backslashes are too: the text decodes back whole.
  CHECK(terminal_safe("a\\b \x1b[31mred\x07\nnext") == "a\\\\b \\x1b[31mred\\x07\nnext");
  CHECK(needs_escape("cr\r"));
  CHECK(needs_escape("\xff"));
  CHECK(needs_escape("\xe2\x80\xae"));  // U+202E, a right-to-left override
  CHECK(needs_escape("\xc2\x9b"));      // U+009B, a C1 CSI
  CHECK(terminal_safe("") == "");
}
