# A module that starts a native thread at import, as an OpenMP pool does: one
# the threading module never sees, and a fork would not copy.
import ctypes

_libc = ctypes.CDLL(None)
_thread = ctypes.c_ulong()
_libc.pthread_create(ctypes.byref(_thread), None, ctypes.cast(_libc.pause, ctypes.c_void_p), None)
