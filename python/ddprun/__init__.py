"""ddprun from pip: the launcher's binaries, its C++ SDK, and `ddprun.liveness`.

The console scripts `ddprun`, `ddp-rendezvousd` and `ddp-store` (and
`python -m ddprun`) run the binaries installed under `ddprun/_prefix/bin`;
`python -m ddprun --cmake-prefix` prints the prefix for `find_package(ddp)`.
Importing this package imports nothing else: `ddprun.liveness` stays cheap.
"""
