# What a worker sees of how it was started, as one JSON line per rank, for
# comparing a forked --preload worker with a fresh `python3 -u script.py`.
# argv[1] picks an ending: "exit3" (rank 1 calls sys.exit(3), once rank 0
# has printed: $MARKS/printed_0), "raise" (rank 0 raises), anything else: exit 0.
import ctypes
import json
import os
import signal
import sys
import time

import preload_sibling  # a module next to the script, found through sys.path[0]

libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
rank = os.environ["RANK"]
facts = {
    "name": __name__,
    "file": os.path.basename(__file__),
    "main_is_this": sys.modules["__main__"].__dict__ is globals(),
    "argv": [os.path.basename(sys.argv[0])] + sys.argv[1:],
    "path0_is_script_dir": sys.path[0] == os.path.dirname(os.path.realpath(__file__)),
    "sibling": preload_sibling.VALUE,
    "rank": rank,
    "local_rank": os.environ["LOCAL_RANK"],
    "c_env_rank": libc.getenv(b"RANK").decode(),
    "user_var": os.environ.get("PRELOAD_TEST_VAR"),
    "cwd": os.getcwd(),
    "sigint_default_python": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "sigchld_default": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
    "sigusr1_default": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
    "sigpipe_ignored": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "group_led_by_parent": os.getpgrp() == os.getppid(),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "stdout_tty": os.isatty(1),
    "unbuffered": not sys.stdout.line_buffering and sys.stdout.write_through,
}
print("FACTS " + json.dumps(facts, sort_keys=True))
print("rank %s torch preloaded=%s pid=%d" % (rank, "torch" in sys.modules, os.getpid()), flush=True)
marks = os.environ.get("MARKS")
if marks:
    open(os.path.join(marks, "printed_" + rank), "w").close()


def main():
    if sys.argv[1:2] == ["exit3"] and rank == "1":
        # Not before rank 0 has printed: the agent stops it once this rank fails.
        deadline = time.monotonic() + 60
        while marks and not os.path.exists(os.path.join(marks, "printed_0")) and time.monotonic() < deadline:
            time.sleep(0.01)
        sys.exit(3)
    if sys.argv[1:2] == ["raise"] and rank == "0":
        raise ValueError("raised by the script on rank 0")


if __name__ == "__main__":
    main()
