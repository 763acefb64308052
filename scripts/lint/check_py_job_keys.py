#!/usr/bin/env python3
"""Checks that Python spells the re-form keys as job_keys.cpp does.

python/ddprun/_reform_keys.py is the one place Python spells the store keys of
--on_failure=reform; rendezvous/src/store/job_keys.cpp is the one place C++
does. Each reform_* function of job_keys.cpp is read (its return expression:
string literals, its parameters, std::to_string and calls of the other
reform_* functions), evaluated on sample arguments, and compared with the
Python function of the same name. A reform_* function of either side that
the other lacks is reported too (a Python-only one says `py-only:` in its
docstring).

Usage: check_py_job_keys.py [SOURCE_DIR]. Prints one line per mismatch and
exits 1 if there is any.
"""
import importlib.util
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

FUNC = re.compile(r"std::string (reform_\w+)\(([^)]*)\)\s*\{\s*return (.*?);\s*\}", re.S)


def cxx_functions(text):
    """name -> (parameter names, the return expression as Python)."""
    out = {}
    for name, params, expr in FUNC.findall(text):
        names = [p.split()[-1].lstrip("&") for p in params.split(",") if p.strip()]
        py = re.sub(r"std::to_string\((\w+)\)", r"str(\1)", expr)
        py = py.replace("std::string(", "(")
        out[name] = (names, " ".join(py.split()))
    return out


def main() -> int:
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(src, "rendezvous", "src", "store", "job_keys.cpp")) as f:
        cxx = cxx_functions(f.read())
    spec = importlib.util.spec_from_file_location("_reform_keys",
                                                  os.path.join(src, "python", "ddprun", "_reform_keys.py"))
    py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(py)
    samples = {"worker_prefix": "/run/worker/round_3/", "reform_prefix": "/run/worker/round_3/reform/",
               "slot": 7, "generation": 12}
    bad = []
    scope = {}

    def call(name):
        names, expr = cxx[name]
        return lambda *args: eval(expr, dict(scope), dict(zip(names, args)))  # noqa: S307

    for name in cxx:
        scope[name] = call(name)
    for name, (names, _) in sorted(cxx.items()):
        fn = getattr(py, name, None)
        if fn is None:
            bad.append(f"_reform_keys.py: no {name}() as in job_keys.cpp")
            continue
        args = [samples[n] for n in names]
        want, got = scope[name](*args), fn(*args)
        if want != got:
            bad.append(f"_reform_keys.py: {name}{tuple(args)} is '{got}', job_keys.cpp says '{want}'")
    for name in dir(py):
        fn = getattr(py, name)
        if name.startswith("reform_") and name not in cxx and "py-only:" not in (fn.__doc__ or ""):
            bad.append(f"_reform_keys.py: {name}() has no counterpart in job_keys.cpp (say py-only: why)")
    for line in bad:
        print(line)
    if not bad:
        print(f"check_py_job_keys: {len(cxx)} re-form key functions spelled alike in C++ and Python")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
