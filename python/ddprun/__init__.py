"""ddprun from pip: the launcher's binaries, its C++ SDK, `ddprun.liveness`, and
`ddprun.elastic` (in-process re-form for torch 2.x trainers, docs/reform.md).

The console scripts `ddprun`, `ddp-rendezvousd` and `ddp-store` (and
`python -m ddprun`) run the binaries installed under `ddprun/_prefix/bin`;
`python -m ddprun --cmake-prefix` prints the prefix for `find_package(ddp)`.
Importing this package imports nothing else: `ddprun.liveness` stays cheap
(`ddprun.elastic` imports torch when used).
"""
