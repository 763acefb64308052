#!/usr/bin/env python3
"""Checks that only job_keys spells a job's store keys.

rendezvous/include/store/ddp/store/job_keys.hpp builds and parses every key a
ddprun job writes ("/<run>/rdzv/round_<r>/node/<i>", "/<run>/worker/...",
"/<run>/agent/status/<node>"), so that a change of layout is one change. A
string literal in production code that spells a piece of such a path
("/rdzv/", "/agent/", "/worker/", "round_", "rdzv/round") is a second copy:
call the job_keys function instead, or add one there. #include lines and
comments are not looked at; a line that must spell one anyway says
`job-key-ok:` and why (in a comment on the line or above it in its paragraph).

Usage: check_job_keys.py [SOURCE_DIR]. Prints one line per literal
(file:line) and exits 1 if there is any.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_source  # noqa: E402

ALLOWED = {
    os.path.join("rendezvous", "include", "store", "ddp", "store", "job_keys.hpp"),
    os.path.join("rendezvous", "src", "store", "job_keys.cpp"),
}
KEY = re.compile(r"(^|/)(rdzv|agent|worker|reform)/|/(rdzv|agent|worker)$|round_|rdzv/round")


def found(line):
    if line.lstrip().startswith("#include"):
        return None
    for lit in cxx_source.LITERAL.findall(line):
        if KEY.search(lit[1:-1]):
            return (f"{lit} spells a job's store key; build it with a function of "
                    "ddp/store/job_keys.hpp (add one there if none fits)")
    return None


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    return cxx_source.report(cxx_source.violations(src, ALLOWED, found, "job-key-ok:"))

if __name__ == "__main__":
    sys.exit(main())
