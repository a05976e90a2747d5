"""How a gatesweep process behaves: loopback only, signals as Ctrl-C, whether a process runs.

- `netpolicy`: telemetry off, loopback checks, the guard that keeps a local Ray head from probing
  cloud metadata;
- `signals`: SIGTERM and SIGHUP stop a driver the way Ctrl-C does; later signals are noted;
- `pids`: whether a process runs on this host (a lock's, a lease's or a staged folder's holder).
"""
