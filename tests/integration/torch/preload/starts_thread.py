# A module that starts a thread at import, which a fork would not copy.
import threading

_stop = threading.Event()
threading.Thread(target=_stop.wait, name="import-time-poller", daemon=True).start()
