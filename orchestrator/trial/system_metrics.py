"""System metrics of a trial (CPU, memory, disk, network; GPU utilisation and memory when
`nvidia-ml-py` is installed) through MLflow's own `SystemMetricsMonitor`, logged as
`system/...` into the trial's run, so a run page's "System metrics" tab and the chart view's
"System metrics" section show them.

The monitor samples every `SAMPLING_S` seconds in a thread of the trial's main process (MLflow's
`MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` overrides it) and continues the steps of a retried or
resumed run. On `stop()` one last sample is logged, so that even a trial shorter than the
interval has a point. It never fails a trial: a store that refuses a point ends the monitoring.
"""

from __future__ import annotations

import logging
from typing import Any

SAMPLING_S = 5.0


class SystemMetrics:
    def __init__(self, run_id: str, tracking_uri: str, *, resume: bool = True, sampling_s: float = SAMPLING_S):
        self.run_id, self.tracking_uri, self.resume, self.sampling_s = run_id, tracking_uri, resume, sampling_s
        self.monitor: Any = None

    def start(self) -> bool:
        """Start sampling; False when MLflow's monitor cannot run here."""
        try:
            logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # no "started/stopped" lines per trial
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self.monitor = SystemMetricsMonitor(
                self.run_id, sampling_interval=self.sampling_s, resume_logging=self.resume, tracking_uri=self.tracking_uri
            )
            self.monitor.start()
        except Exception:
            self.monitor = None
            return False
        return True

    def stop(self) -> None:
        """Stop the thread, then log one final sample (the run must still be RUNNING)."""
        monitor, self.monitor = self.monitor, None
        if monitor is None:
            return
        try:
            monitor.finish()
            monitor.collect_metrics()
            monitor.publish_metrics(monitor.aggregate_metrics())
            monitor.mlflow_logger.flush()
        except Exception:
            pass
