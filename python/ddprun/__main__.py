"""`python -m ddprun ARGS`: ddprun itself; `python -m ddprun --cmake-prefix`
prints the prefix to give CMake (CMAKE_PREFIX_PATH) for find_package(ddp)."""
import sys

from ddprun import _launch


def main() -> None:
    if sys.argv[1:] == ["--cmake-prefix"]:
        print(_launch.PREFIX)
        return
    _launch.exec_binary("ddprun")


if __name__ == "__main__":
    main()
