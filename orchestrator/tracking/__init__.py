"""The MLflow contract: what gatesweep writes into a store and how it reads it back.

- `names`: every tag, parent-run param and artifact name (`gatesweep.*`);
- `state`: `run_state(status, tags)`, a run's state (finished, failed, stopped, interrupted,
  killed, running, scheduled) and reason, for every reader;
- `store`: tracking URIs (resolution, `sqlite_path`, `redact_uri`), the lock-guarded client,
  experiments and the one paginator, `search_all`;
- `logger`: `RunLogger`, the buffered, retrying, no-duplicate metric logger;
- `outcomes`: how a trial ends (the failure model);
- `provenance`: package versions and git state recorded with each run;
- `views`: what the MLflow UI shows: the experiment's kind (model training), each sweep's saved
  view of its runs table and charts, the URLs gatesweep prints;
- `inputs`: the data set of a trial as an MLflow dataset input.

Everything importers use is re-exported here: `from orchestrator.tracking import client`.
"""

from __future__ import annotations

from . import inputs, names, views
from .logger import MAX_PARAM_LEN, RunLogger, StoreCalls
from .provenance import git_state, numerics, numerics_key, numerics_label, numerics_tags, package_versions
from .state import STATES, RunState, run_outcome, run_state
from .store import (
    PAGE,
    SCHEMES,
    all_experiments,
    all_pages,
    artifacts_folder,
    client,
    database_driver,
    default_artifact_root,
    file_store_path,
    get_or_create_experiment,
    quoted,
    redact_uri,
    resolve_tracking_uri,
    scheme_of,
    search_all,
    sqlite_path,
    sqlite_uri,
)

__all__ = [
    "MAX_PARAM_LEN",
    "PAGE",
    "SCHEMES",
    "STATES",
    "RunLogger",
    "RunState",
    "StoreCalls",
    "all_experiments",
    "all_pages",
    "artifacts_folder",
    "client",
    "database_driver",
    "default_artifact_root",
    "file_store_path",
    "get_or_create_experiment",
    "git_state",
    "inputs",
    "names",
    "numerics",
    "numerics_key",
    "numerics_label",
    "numerics_tags",
    "package_versions",
    "quoted",
    "redact_uri",
    "resolve_tracking_uri",
    "run_outcome",
    "run_state",
    "scheme_of",
    "search_all",
    "sqlite_path",
    "sqlite_uri",
    "views",
]
