#!/usr/bin/env python3
"""Checks that #include lines follow the dependency rules of the conventions.

  common <- store <- store_server;  store <- rdzv <- agent <- launcher;  store <- sdk

A file may include headers of its own component, of the components it links
directly (PUBLIC or PRIVATE in its CMakeLists.txt), and of what those expose
publicly; nothing of an executable's directory. Third-party rules: public
headers (*/include/*) name no Asio, Boost.Process, NCCL, CUDA, Gloo, CLI11 or
full nlohmann/json; Boost.Process only in the agent's process runner; CLI11
only in executables and the launcher's options library.

tests/ and bench/ may include anything. Usage: check_includes.py [SOURCE_DIR].
Prints one line per violation (file:line: what and the rule) and exits 1 if
there is any.
"""
import os
import re
import sys

# Component of a file, by the longest matching path prefix.
COMPONENTS = [
    ("common/", "common"),
    ("rendezvous/include/store/", "store"),
    ("rendezvous/src/store/", "store"),
    ("rendezvous/src/torchstore/", "torch_codec"),
    ("rendezvous/include/store_server/", "store_server"),
    ("rendezvous/src/server/", "store_server"),
    ("rendezvous/include/etcd_store/", "etcd_store"),
    ("rendezvous/src/etcd/", "etcd_store"),
    ("rendezvous/include/rdzv/", "rdzv"),
    ("rendezvous/src/rdzv/", "rdzv"),
    ("rendezvous/tools/rendezvousd/", "tool:ddp-rendezvousd"),
    ("rendezvous/tools/store_cli/", "tool:ddp-store"),
    ("agent/guard/", "guard"),
    ("agent/", "agent"),
    ("launcher/", "launcher"),
    ("worker_sdk/examples/", "tool:examples"),
    ("worker_sdk/", "sdk"),
]

# What each component links: (public, private), as in its CMakeLists.txt.
LINKS = {
    "common": ([], []),
    "store": (["common"], []),
    "torch_codec": (["store"], []),
    "store_server": (["store"], ["torch_codec"]),
    "etcd_store": (["store"], []),
    "rdzv": (["store", "store_server"], ["etcd_store"]),
    # The guard reads common's exit_code.hpp (constants only) and links nothing.
    "guard": ([], ["common"]),
    "agent": (["rdzv", "common"], ["store_server", "guard"]),
    "launcher": (["agent"], []),
    "sdk": (["store", "common"], ["store_server"]),
    # The daemon is the store server plus its settings; the failpoints build
    # reaches the server's private failpoints header.
    "tool:ddp-rendezvousd": ([], ["store_server"]),
    "tool:ddp-store": ([], ["store", "common"]),
    "tool:examples": ([], ["sdk"]),
}

# Include roots searched for "ddp/..." headers, in the order the compiler would.
INCLUDE_ROOTS = [
    "common/include",
    "rendezvous/include/store",
    "rendezvous/include/store_server",
    "rendezvous/include/etcd_store",
    "rendezvous/include/rdzv",
    "agent/include",
    "launcher/include",
    "worker_sdk/include",
]

# Known breaks of the rules, reported but not failed: (file, included name).
# Each entry is a debt; delete it with the include it excuses.
KNOWN = set()

SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc")
SKIP_DIRS = ("tests/", "bench/", "build", ".git/")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# (pattern of the included name, where it is allowed (path prefixes; None: in
# no public header), rule text).
THIRD_PARTY = [
    (re.compile(r"^boost/process"), ["agent/src/process_runner.cpp", "agent/src/process_runner_child.hpp",
                                    "agent/src/process_runner_child.cpp"],
     "Boost.Process is included in the agent's process runner only"),
    (re.compile(r"^CLI/"), ["launcher/src/", "rendezvous/tools/", "worker_sdk/examples/"],
     "CLI11 only in executables and the launcher's options library"),
]
NOT_IN_PUBLIC_HEADERS = re.compile(
    r"^(boost/asio|boost/process|nccl|cuda|gloo/|CLI/|nlohmann/json\.hpp$)")


def component_of(path):
    best = None
    for prefix, comp in COMPONENTS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, comp)
    return best[1] if best else None


def allowed(comp):
    """comp, what it links, and the public closure of those."""
    public, private = LINKS.get(comp, ([], []))
    out = {comp}
    todo = list(public) + list(private)
    while todo:
        c = todo.pop()
        if c in out:
            continue
        out.add(c)
        todo.extend(LINKS.get(c, ([], []))[0])
    return out


def resolve(root, including, name):
    """Repository-relative path of an included file, or None when not ours."""
    here = os.path.dirname(including)
    candidates = [os.path.join(here, name)] + [os.path.join(r, name) for r in INCLUDE_ROOTS]
    for c in candidates:
        rel = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, rel)):
            return rel
    return None


def sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not (rel_dir + d + "/").startswith(SKIP_DIRS))
        for f in sorted(filenames):
            if f.endswith(SOURCE_SUFFIXES):
                yield rel_dir + f


def check(root):
    problems = []
    known = []
    for path in sources(root):
        comp = component_of(path)
        if comp is None:
            continue
        ok = allowed(comp)
        public_header = "/include/" in "/" + path
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                name = m.group(2)
                where = "%s:%d" % (path, lineno)
                if public_header and NOT_IN_PUBLIC_HEADERS.match(name):
                    problems.append("%s: public header includes <%s>; public headers expose no "
                                    "Asio, Boost.Process, NCCL, CUDA, Gloo, CLI11 or full nlohmann/json"
                                    % (where, name))
                for pattern, places, rule in THIRD_PARTY:
                    if pattern.match(name) and not any(path.startswith(p) for p in places):
                        problems.append("%s: includes <%s>: %s" % (where, name, rule))
                target = resolve(root, path, name)
                if target is None:
                    continue
                to = component_of(target)
                if to is None or to in ok:
                    continue
                if to.startswith("tool:"):
                    why = "nothing depends on an executable"
                else:
                    why = "%s may include only %s" % (comp, ", ".join(sorted(ok)))
                text = "%s: %s includes %s (%s): %s" % (where, comp, name, to, why)
                (known if (path, name) in KNOWN else problems).append(text)
    return problems, known


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems, known = check(os.path.abspath(root))
    for k in known:
        print("known, not failed: " + k)
    for p in problems:
        print(p)
    if problems:
        print("check_includes: %d include(s) against the dependency rules (docs/architecture.md)"
              % len(problems))
        return 1
    print("check_includes: every include follows the dependency rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
