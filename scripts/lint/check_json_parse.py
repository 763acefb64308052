#!/usr/bin/env python3
"""Checks that production code parses JSON only through ddp::parse_json.

JSON from outside the process (error files, store records, config files, etcd
replies, agent lines) must be read with a bound on its size and depth
(common/include/ddp/common/json_input.hpp says why). A call of nlohmann's own
parse, accept or sax_parse elsewhere would skip that bound, so this check
refuses one outside common/src/json_input.cpp unless the line, or the comment
just above it, says `json-parse-ok:` and why the input is bounded.

tests/ and bench/ may parse anything. Usage: check_json_parse.py [SOURCE_DIR].
Prints one line per violation (file:line) and exits 1 if there is any.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_source  # noqa: E402

ALLOWED = {os.path.join("common", "src", "json_input.cpp")}
CALL = re.compile(r"\bjson::(parse|accept|sax_parse|from_cbor|from_msgpack|from_bson|from_ubjson)\s*\(")


def comment_above(lines, i):
    """The // comment lines just above line i, joined."""
    out = []
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("//"):
        out.append(lines[j])
        j -= 1
    return "\n".join(out)


def found(line):
    if not CALL.search(line):
        return None
    return ("nlohmann's parser called directly; read outside JSON with ddp::parse_json and a bound "
            "from json_input.hpp, or say 'json-parse-ok: <why it is bounded>' on the line above")


def excused(lines, i, marker):
    return marker in lines[i] or marker in comment_above(lines, i)


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    return cxx_source.report(cxx_source.violations(src, ALLOWED, found, "json-parse-ok:", code=False,
                                                   excused=excused))

if __name__ == "__main__":
    sys.exit(main())
