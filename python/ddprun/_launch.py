"""The console scripts: exec the installed binary with the same argv.

exec, not a child process: the binary gets our pid, our signals and our
terminal, and its exit status is the script's, as if it had been run directly.
"""
import os
import sys
from typing import List, NoReturn, Optional

# Installed by the CMake project under the package (pyproject.toml,
# wheel.install-dir): bin/, share/ddprun/, include/, lib/cmake/ddp/.
PREFIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_prefix")

# A broken install is a usage/config error for ddprun (docs/errors.md).
EXIT_BROKEN_INSTALL = 2


def binary(name: str) -> str:
    return os.path.join(PREFIX, "bin", name)


def exec_binary(name: str, argv: Optional[List[str]] = None) -> NoReturn:
    path = binary(name)
    args = sys.argv[1:] if argv is None else argv
    if not os.access(path, os.X_OK):
        print(
            f"{name}: error: {path} is missing or not executable (a broken install); "
            f"reinstall with: {sys.executable} -m pip install --force-reinstall ddprun",
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


def ddprun() -> NoReturn:
    exec_binary("ddprun")


def rendezvousd() -> NoReturn:
    exec_binary("ddp-rendezvousd")


def store() -> NoReturn:
    exec_binary("ddp-store")
