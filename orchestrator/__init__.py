"""orchestrator: sweep files, trials (DeepSpeed training + evaluation), MLflow tracking, Ray Tune launch, CLI."""

__version__ = "0.1.0"

# Loopback only by default: telemetry off (RAY_USAGE_STATS_ENABLED=0, MLFLOW_DISABLE_TELEMETRY=true,
# DO_NOT_TRACK=1 as defaults, before anything imports mlflow or starts Ray). The guard against a Ray
# head's cloud-metadata probe is installed by the entry points that start a head, not here: see
# orchestrator/runtime/netpolicy.py.
from .runtime import netpolicy as _netpolicy

_netpolicy.telemetry_off_by_default()
