// Bytes from outside (a store key or value, a record's field) made safe to
// show on a terminal and still readable: escape sequences a value carries
// would otherwise move the cursor, retitle the window or rewrite what the
// operator sees.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddp {

enum class Newlines : std::uint8_t {
  kEscape,  // "\n" and "\t" too: one record per line (list, watch, tables)
  kKeep,    // newlines and tabs as they are: one value on its own (get)
};

// Valid UTF-8 that prints is kept as it is (names in any script). Escaped,
// C-style: a backslash as "\\"; "\n", "\t", "\r"; other control bytes and
// DEL as "\x1b"; bytes that are not valid UTF-8 as "\xff"; the C1 controls
// and the invisible format characters a terminal may act on (bidirectional
// overrides, zero-width characters, line and paragraph separators) as
// "\u202e". Escaping the backslash makes the result unambiguous: it decodes
// back to the same bytes.
std::string printable(std::string_view bytes, Newlines newlines = Newlines::kEscape);

// For a message bound for a terminal that may carry outside text (a log line,
// an error line, a report): the text as it is when nothing in it would be
// escaped but a backslash, else printable(text, Newlines::kKeep). Clean text
// keeps its backslashes as they are; text that had to be escaped is escaped
// whole, so that it still decodes back to the same bytes.
std::string terminal_safe(std::string_view text);
// True when printable(text, Newlines::kKeep) would change more than backslashes.
bool needs_escape(std::string_view text);

}  // namespace ddp
