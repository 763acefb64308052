#!/usr/bin/env python3
"""Checks that production code reads numbers out of text through parse.hpp.

common/include/ddp/common/parse.hpp is the one way ddp reads integers,
booleans and durations (whole string, range checked, one message naming the
flag or variable). std::stoi and its kin throw std::invalid_argument with no
name in it and accept trailing text; strtol, atoi and atof accept anything.
This check refuses a call of any of them, or of std::from_chars, outside
common/, unless a comment on the line, or above it in its paragraph, says
`number-parse-ok:` and why parse.hpp does not fit (a field scanned in place
in /proc/<pid>/stat, a process that links no library).

tests/ and bench/ may parse anything. Usage: check_number_parse.py
[SOURCE_DIR]. Prints one line per call (file:line) and exits 1 if there is any.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_source  # noqa: E402

CALL = re.compile(r"\b(sto(i|l|ul|ll|ull|f|d|ld)|strto(l|ll|ul|ull|d|f|ld|imax|umax)|ato(i|l|ll|f)"
                  r"|from_chars)\s*\(")


def found(line):
    m = CALL.search(cxx_source.LITERAL.sub('""', line))
    if not m:
        return None
    return (f"{m.group(1)} reads a number by hand; use parse_int, parse_bool or parse_duration of "
            "ddp/common/parse.hpp, or mark it 'number-parse-ok: <why>' in a comment")


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    return cxx_source.report(cxx_source.violations(src, ("common" + os.sep,), found, "number-parse-ok:"))

if __name__ == "__main__":
    sys.exit(main())
