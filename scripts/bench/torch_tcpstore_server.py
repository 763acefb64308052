#!/usr/bin/python3
"""PyTorch's own TCPStore server for scripts/bench/tcpstore_vs_torch.sh.

Creates torch.distributed.TCPStore(HOST, 0, 1, True) — in torch 1.13 the
server is the C++ TCPStoreMasterDaemon thread, the Python side only holds it —
writes the bound port to PORT_FILE and sleeps until killed.
Usage: /usr/bin/python3 torch_tcpstore_server.py HOST PORT_FILE
"""
import datetime
import os
import signal
import sys

import torch.distributed as dist

host, port_file = sys.argv[1], sys.argv[2]
store = dist.TCPStore(host, 0, 1, True, datetime.timedelta(seconds=60))
tmp = port_file + ".tmp"
with open(tmp, "w") as f:
    f.write(str(store.port))
os.replace(tmp, port_file)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
