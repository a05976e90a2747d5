"""How a gatesweep process behaves: loopback only (`netpolicy`: telemetry off, loopback checks,
the guard that keeps a local Ray head from probing cloud metadata), signals (`signals`: SIGTERM and
SIGHUP stop a driver the way Ctrl-C does) and whether a process still runs (`pids`)."""
