"""The console scripts: exec the installed binary with the same argv.

exec, not a child process: the binary gets our pid, our signals and our
terminal, and its exit status is the script's, as if it had been run directly.
"""
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds to import, at every launch: names quoted
    from typing import Dict, List, NoReturn, Optional, Tuple

# Installed by the CMake project under the package (pyproject.toml,
# wheel.install-dir): bin/, share/ddprun/, include/, lib/cmake/ddp/.
PREFIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_prefix")

# A broken install is a usage/config error for ddprun (docs/errors.md).
EXIT_BROKEN_INSTALL = 2

# What each binary needs from the wheel besides itself. ddprun alone would
# warn and go on without ddp-guard (or take an older one from the source
# install's prefix) and refuse --preload without the zygote: in a wheel, a
# missing one is a broken install, told before anything starts.
NEEDS: "Dict[str, Tuple[str, ...]]" = {
    "ddprun": ("bin/ddp-guard", "share/ddprun/ddp_zygote.py", "share/ddprun/ddp_zygote_fork.py",
               "share/ddprun/ddp_zygote_worker.py", "share/ddprun/python/sitecustomize.py"),
}


def binary(name: str) -> str:
    return os.path.join(PREFIX, "bin", name)


def reinstall_command() -> str:
    """How to reinstall: from the wheel file or URL pip installed it from
    (PEP 610's direct_url.json), else by name from the index."""
    source = "ddprun"
    try:
        import json
        from importlib import metadata

        text = metadata.distribution("ddprun").read_text("direct_url.json")
        url = json.loads(text)["url"] if text else ""
        if url.startswith("file://"):
            from urllib.parse import unquote, urlparse

            url = unquote(urlparse(url).path)
        source = url or source
    except Exception:  # noqa: BLE001 - any doubt: the plain name
        pass
    return f"{sys.executable} -m pip install --force-reinstall {source}"


def broken_file(name: str) -> "Optional[str]":
    """'PATH is missing' (or 'is not executable', 'is not readable') for the
    first file `name` needs that is not usable; None when all are."""
    for rel in ("bin/" + name,) + NEEDS.get(name, ()):
        path = os.path.join(PREFIX, rel)
        mode, what = (os.X_OK, "executable") if rel.startswith("bin/") else (os.R_OK, "readable")
        if not os.path.isfile(path):
            return f"{path} is missing"
        if not os.access(path, mode):
            return f"{path} is not {what}"
    return None


def exec_binary(name: str, argv: "Optional[List[str]]" = None) -> "NoReturn":
    path = binary(name)
    args = sys.argv[1:] if argv is None else argv
    broken = broken_file(name)
    if broken is not None:
        print(
            f"{name}: error: {broken} (a broken install); "
            f"reinstall with: {reinstall_command()}",
            file=sys.stderr,
        )
        sys.exit(EXIT_BROKEN_INSTALL)
    if name == "ddprun" and not os.environ.get("DDP_PYTHON") and not os.environ.get("PYTHON_EXEC"):
        # Python workers run with this interpreter (the venv ddprun was
        # installed in, where the user's torch is) unless told otherwise;
        # --python still wins over DDP_PYTHON.
        os.environ["DDP_PYTHON"] = sys.executable
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name] + args)


def ddprun() -> "NoReturn":
    exec_binary("ddprun")


def rendezvousd() -> "NoReturn":
    exec_binary("ddp-rendezvousd")


def store() -> "NoReturn":
    exec_binary("ddp-store")
