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

ROOTS = ["agent", "common", "launcher", "rendezvous", "worker_sdk"]
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


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(src, root)):
            for name in files:
                if not name.endswith((".cpp", ".hpp", ".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src)
                if rel in ALLOWED:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                for i, line in enumerate(lines):
                    if not CALL.search(line):
                        continue
                    if "json-parse-ok:" in line or "json-parse-ok:" in comment_above(lines, i):
                        continue
                    bad.append(f"{rel}:{i + 1}: nlohmann's parser called directly; read outside JSON "
                               "with ddp::parse_json and a bound from json_input.hpp, or say "
                               "'json-parse-ok: <why it is bounded>' on the line above")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
