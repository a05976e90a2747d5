"""Ray's own command line (`ray start`, `ray stop`, ...) with the head guard installed first:

    python -m orchestrator.runtime.ray_cli start --head --include-dashboard false ...

A head started this way makes no cloud-metadata probe (`netpolicy.guard_ray_head`); a Ray the
guard was not written for fails to start a head, naming both versions. `import orchestrator`
installs no guard: the entry points that start a Ray head install it (this one, and
`orchestrator.ray.cluster.RayCluster` for the local Ray of a sweep). Both start their nodes with
`NODE_DEFAULTS` (`node_defaults`).
"""

from __future__ import annotations

import os
import sys

from orchestrator.runtime import netpolicy

NODE_DEFAULTS = {
    # When its first driver connects, a node starts one idle Python worker per CPU for tasks without
    # a runtime environment. Every sweep has one (its variables, `RayCluster.start`), so no trial
    # ever runs in them: they cost each sweep on a local Ray about 1 CPU-s, and an idle node
    # 0.85 CPU-s a minute each (measured, Ray 2.60). Ray starts the workers trials need when they
    # need them. A value already in the environment wins.
    "RAY_prestart_worker_first_driver": "0",
}
"""Ray's settings for the nodes gatesweep starts (Ray reads them from the environment of each
node's processes when they start)."""


def node_defaults() -> None:
    """`NODE_DEFAULTS` into this process's environment, where not set already, for the Ray node it starts."""
    for key, value in NODE_DEFAULTS.items():
        os.environ.setdefault(key, value)


def main(argv: list[str] | None = None) -> int:
    """Ray's CLI on `argv` (default: this process's arguments) once the guard is installed."""
    netpolicy.guard_ray_head()
    node_defaults()
    from ray.scripts.scripts import cli  # Ray's CLI (a click group), imported only when it runs

    return cli.main(args=sys.argv[1:] if argv is None else argv, prog_name="ray")


if __name__ == "__main__":
    sys.exit(main())
