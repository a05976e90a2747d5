"""Loopback only, unless the user points gatesweep elsewhere.

Nothing gatesweep starts may listen on or connect to anything but loopback (127.0.0.0/8, ::1)
unless the user passes a non-loopback `--address` or tracking URI. Three things stood in the way:

- telemetry: Ray's usage stats and MLflow's telemetry client (which resolves and contacts its
  config host from every process that imports mlflow). `telemetry_off_by_default()` sets
  `TELEMETRY_ENV` as defaults (a user's own values win); `import orchestrator` calls it, so the
  driver, the local Ray it starts (GCS, raylet, agents and workers inherit the environment),
  `gatesweep train` and `gatesweep ui`'s MLflow server all have them. MLflow reads them when
  `mlflow` is imported, Ray when its processes start. (MLflow honours DO_NOT_TRACK only when it
  is "true"; MLFLOW_DISABLE_TELEMETRY=true is what turns it off. DO_NOT_TRACK=1 is the
  consoledonottrack.com convention, honoured by huggingface_hub.)
- Ray's cloud-metadata probe: a head node always starts Ray's API server (`dashboard.py`); with
  `include_dashboard=False` it hosts one module, `UsageStatsHead`, whose `run()` calls
  `usage_lib.get_cluster_config_to_report()` before it looks at RAY_USAGE_STATS_ENABLED. With no
  `~/ray_bootstrap_config.yaml` that calls `get_cloud_from_metadata_requests()`: HTTP requests
  to 169.254.169.254 (Azure, AWS) and to metadata.google.internal (a DNS query). No Ray setting
  turns this off in Ray 2.60: `run()` calls it unconditionally, `services.start_api_server`
  hard-codes `--modules-to-load=UsageStatsHead` for a head without a dashboard, and the only way
  around the probe, an existing `~/ray_bootstrap_config.yaml`, is what the cluster launcher
  writes (Tune reads its presence as "on a launched cluster"). So `guard_ray_head()` patches
  Ray's private `ray._private.services.start_api_server`: a head started from this process skips
  that API server when the dashboard is off and usage stats are disabled, the only thing it
  would do being the probe (a ray.init() cluster sends no "disabled" report either). The patch
  is written for `RAY_GUARDED` only: with any other Ray, a head started from a gatesweep process
  fails with `RayGuardError` naming both versions, instead of probing silently
  (`require_ray_head_guard()` says so before `RayCluster` starts a local Ray). `import
  orchestrator` does not install the guard: the entry points that start a head do, explicitly
  (`RayCluster.start` for a sweep's local Ray, `python -m orchestrator.runtime.ray_cli start
  --head` for a cluster's head); a Ray worker starts no head and needs none.
- the world-size-1 process group: see `orchestrator.trial.distributed` (an in-process store, gloo and
  NCCL on the loopback interface).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import ipaddress
import os
import sys

#: telemetry switches set as defaults in every process gatesweep starts (forward them to Ray
#: workers on remote clusters too: orchestrator.ray.cluster.PASS_ENV)
TELEMETRY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}


def telemetry_off_by_default(environ=None) -> None:
    env = os.environ if environ is None else environ
    for key, value in TELEMETRY_ENV.items():
        env.setdefault(key, value)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) and `localhost`; not 0.0.0.0 / :: (all interfaces)."""
    host = host.strip("[]").split("%")[0]
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (`lo` on Linux, `lo0` on macOS)."""
    try:
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(getattr(a, "address", None) == "127.0.0.1" for a in addrs):
                return name
    except Exception:
        pass
    return "lo0" if sys.platform == "darwin" else "lo"


# ---- Ray: no cloud-metadata probe from a head started here ------------------------------

_SERVICES = "ray._private.services"
RAY_GUARDED = "2.60.0"
"""The Ray whose source the guard was checked against (`ray/dashboard/modules/usage_stats`,
`ray/_private/services.py`, `ray/_common/usage/usage_lib.py`); pyproject pins it."""
_problem: str | None = None
"""Why the guard is not installed (another Ray), once Ray's services module has been imported."""


class RayGuardError(RuntimeError):
    """A local Ray head would be started without the guard (a Ray it was not written for)."""


def _ray_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return "unknown"


def _guard_problem(services) -> str | None:
    installed = _ray_version()
    original = getattr(services, "start_api_server", None)
    if installed == RAY_GUARDED and callable(original):
        return None
    return (
        f"gatesweep keeps a local Ray head off the network with a patch of Ray's private "
        f"ray._private.services.start_api_server written for Ray {RAY_GUARDED}, and Ray {installed} is installed: "
        f"its head could probe cloud metadata (169.254.169.254, metadata.google.internal). Install "
        f"ray[tune,train]=={RAY_GUARDED}, or check the new Ray for a setting that stops UsageStatsHead's probe "
        "and update orchestrator/runtime/netpolicy.py"
    )


def _patch_services(services) -> None:
    global _problem
    original = getattr(services, "start_api_server", None)
    if getattr(original, "_gatesweep_guard", False):
        return
    _problem = _guard_problem(services)
    if _problem is not None:
        problem = _problem

        def refuse(*args, **kwargs):
            raise RayGuardError(problem)

        if callable(original):  # any head this process starts fails loudly rather than probing
            refuse._gatesweep_guard = True
            refuse.__wrapped__ = original
            services.start_api_server = refuse
        return

    def start_api_server(include_dashboard, *args, **kwargs):
        if include_dashboard is False:
            from ray._common.usage import usage_lib

            if not usage_lib.usage_stats_enabled():
                return "", None  # what Ray returns for a head without a dashboard, minus the process
        return original(include_dashboard, *args, **kwargs)

    start_api_server._gatesweep_guard = True
    start_api_server.__wrapped__ = original
    services.start_api_server = start_api_server


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ray._private.services right after Ray imports it (no Ray import before that)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _SERVICES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_services(module)  # another Ray is recorded, never raised here: `import ray` must work

        spec.loader.exec_module = exec_and_patch
        return spec


def guard_ray_head() -> None:
    """Idempotent: patch now if Ray is imported, else when it is."""
    module = sys.modules.get(_SERVICES)
    if module is not None:
        _patch_services(module)
        return
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def require_ray_head_guard() -> None:
    """RayGuardError (one line, both versions) unless the guard is installed: call it before
    starting a local Ray head."""
    guard_ray_head()
    importlib.import_module(_SERVICES)  # runs the import hook if Ray is not imported yet
    if _problem is not None:
        raise RayGuardError(_problem)
