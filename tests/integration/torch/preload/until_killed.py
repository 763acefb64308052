# Attempt 0 waits to be killed (with the zygote it was forked from); later
# attempts say whether torch was preloaded, then exit 0.
import os
import sys
import time

restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
print(
    "rank %s restart=%s torch preloaded=%s" % (os.environ["RANK"], restart, "torch" in sys.modules),
    flush=True,
)
if restart == "0":
    open(os.path.join(os.environ["MARKS"], "waiting_" + os.environ["RANK"]), "w").close()
    while True:
        time.sleep(3600)
