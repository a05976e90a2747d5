"""Ray's own command line (`ray start`, `ray stop`, ...) with the head guard installed first:

    python -m orchestrator.runtime.ray_cli start --head --include-dashboard false ...

A head started this way makes no cloud-metadata probe (`netpolicy.guard_ray_head`); a Ray the
guard was not written for fails to start a head, naming both versions. `import orchestrator`
installs no guard: the entry points that start a Ray head install it (this one, and
`orchestrator.ray.cluster.RayCluster` for the local Ray of a sweep).
"""

from __future__ import annotations

import sys

from orchestrator.runtime import netpolicy


def main(argv: list[str] | None = None) -> int:
    """Ray's CLI on `argv` (default: this process's arguments) once the guard is installed."""
    netpolicy.guard_ray_head()
    from ray.scripts.scripts import cli  # Ray's CLI (a click group), imported only when it runs

    return cli.main(args=sys.argv[1:] if argv is None else argv, prog_name="ray")


if __name__ == "__main__":
    sys.exit(main())
