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
  turns this off (Ray 2.60). `guard_ray_head()` makes a head started from this process skip that
  API server when the dashboard is off and usage stats are disabled: the only thing it would do
  is the probe (a ray.init() cluster sends no "disabled" report either). `import orchestrator`
  installs the guard lazily (Ray is not imported until Ray itself is).
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


def _patch_services(services) -> None:
    original = services.start_api_server
    if getattr(original, "_gatesweep_guard", False):
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
            try:
                _patch_services(module)
            except Exception:  # a Ray without this function: nothing to guard
                pass

        spec.loader.exec_module = exec_and_patch
        return spec


def guard_ray_head() -> None:
    """Idempotent: patch now if Ray is imported, else when it is."""
    module = sys.modules.get(_SERVICES)
    if module is not None:
        try:
            _patch_services(module)
        except Exception:
            pass
        return
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def install() -> None:
    telemetry_off_by_default()
    guard_ray_head()
