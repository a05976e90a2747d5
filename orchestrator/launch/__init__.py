"""One launch of a sweep from the driver: lock, runs, cluster, Tune, outcome, state, preflight and summary.

One launch of a sweep from the driver: `launcher.Launcher.run` (lock, runs, cluster, Tune,
outcome), the MLflow side (`runs`: parent and child runs, reading outcomes back), the driver's own
state (`state`: state.json; `lock`: one driver per sweep; SIGTERM/SIGHUP as Ctrl-C through `orchestrator.runtime.signals`),
checks before anything is written (`preflight`) and the end-of-sweep table (`summary`)."""
