"""Reading C++ sources for the lint checks: the production files, their code
without comments, and their string literals, line by line."""
import os
import re

# The production components; tests/ and bench/ may spell anything.
ROOTS = ["agent", "common", "launcher", "rendezvous", "worker_sdk"]
SUFFIXES = (".cpp", ".hpp", ".h", ".cc")
LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def production_files(src):
    """(relative path, absolute path) of every production C++ file, sorted."""
    out = []
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(src, root)):
            for name in files:
                if name.endswith(SUFFIXES):
                    path = os.path.join(dirpath, name)
                    out.append((os.path.relpath(path, src), path))
    return sorted(out)


def code_lines(path):
    """The file's lines with comments blanked (literals kept), raw strings
    and character literals left as they are."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    i, n = 0, len(text)
    in_block = False
    line = []
    while i < n:
        c = text[i]
        if c == "\n":
            out.append("".join(line))
            line = []
            i += 1
            continue
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
            else:
                i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if c == '"':
            m = LITERAL.match(text, i)
            if m:
                line.append(m.group(0))
                i = m.end()
                continue
        if c == "'":
            m = re.compile(r"'(?:[^'\\\n]|\\.)*'").match(text, i)
            if m:
                line.append(m.group(0))
                i = m.end()
                continue
        line.append(c)
        i += 1
    out.append("".join(line))
    return out


def each_line(src, skip=(), code=True):
    """(relative path, 0-based line number, line, the file's raw lines) for
    every line of every production file not in `skip` (paths, or directory
    prefixes ending in os.sep); `code`: with comments blanked."""
    for rel, path in production_files(src):
        if rel in skip or any(rel.startswith(s) for s in skip if s.endswith(os.sep)):
            continue
        raw = raw_lines(path)
        for i, line in enumerate(code_lines(path) if code else raw):
            yield rel, i, line, raw


def raw_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def marked(raw, i, marker):
    """Whether line i, or a comment in the lines above it up to the last blank
    line (its paragraph), carries `marker`."""
    if marker in raw[i]:
        return True
    j = i - 1
    while j >= 0 and raw[j].strip():
        if raw[j].strip().startswith("//") and marker in raw[j]:
            return True
        j -= 1
    return False


def violations(src, skip, found, marker, code=True, excused=None):
    """"file:line: message" for each production line where found(line) gives
    a message, unless excused(raw lines, i, marker) (default: marked)."""
    excused = excused or marked
    bad = []
    for rel, i, line, raw in each_line(src, skip, code):
        message = found(line)
        if message and not excused(raw, i, marker):
            bad.append(f"{rel}:{i + 1}: {message}")
    return bad


def report(bad):
    """Prints each violation on a line; the exit code: 1 if there is any."""
    for b in bad:
        print(b)
    return 1 if bad else 0
