"""Every name gatesweep writes into an MLflow store: tags, parent-run params and artifacts.

Writers (the trial, the trainable, the launcher) and readers (dashboards, `gatesweep ui`,
`gatesweep eval`) import these constants; no module spells a `gatesweep.*` name itself.

Tags of a sweep's **parent run**: `KIND_TAG = SWEEP_KIND`, `SWEEP_TAG`, `DRIVER_TAG`,
`TRACKING_URI_TAG`, `COUNTS_TAG` (at the end) and `REASON_TAG` (when the sweep itself failed);
its params are the `SWEEP_*_PARAM`s. Tags of a **trial's run**: `KIND_TAG = TRIAL_KIND`, `PARENT_TAG`, `SWEEP_TAG`,
`CONFIG_HASH_TAG`, `TRIAL_NAME_TAG`, one `axis_tag(path)` per varying axis, the trial's own
(`RUN_DIR_TAG`, `GATE_TAG`, `TASK_TAG`, `HOST_TAG`, `PID_TAG`, `NUMERICS_TAG`, `DEEPSPEED_TAG`, ...), and how it
ended (`OUTCOME_TAG`, with `REASON_TAG` or `STOPPED_TAG`: see `orchestrator.tracking.outcomes`).
A finished run that a later sweep reused carries `also_in_tag(sweep) = <that sweep's parent id>`.
Every trial run of a launch, its own and the ones it reused, carries `member_tag(sweep) = <the
launch's parent id>`: the one filter that lists a launch's trials in the MLflow UI
(`orchestrator.tracking.views`), and `group_tag(sweep) = <its group's label>` (`G1-elementwise`,
`G1-elementwise, size=small`: its values on the varied axes but the seeds), which the sweep's
saved view groups by, with `RUN_COLOR_TAG` set to its group's colour. The experiment's kind and the sweep's saved view are
experiment tags (`views.EXPERIMENT_KIND_TAG`, `views.view_tag`).
"""

from __future__ import annotations

# ---- MLflow's own tags that gatesweep sets ----------------------------------------------------
PARENT_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"

# ---- tags -------------------------------------------------------------------------------------
KIND_TAG = "gatesweep.kind"
"""What a run is: `sweep` (a sweep's parent run), `trial` (a trial's run, in a sweep or from
`gatesweep train`), `probe` (`gatesweep probe --log`). `tags.`gatesweep.kind` = 'trial'` in
`mlflow.search_runs` leaves the parents out."""
SWEEP_KIND = "sweep"
TRIAL_KIND = "trial"
PROBE_KIND = "probe"
SWEEP_TAG = "gatesweep.sweep"
"""The sweep's name, on its parent and on every trial it launched."""
DRIVER_TAG = "gatesweep.driver"
"""`host:pid` of the driver that launched (or resumed) the sweep."""
COUNTS_TAG = "gatesweep.counts"
"""JSON {status: trials} written when the sweep ends."""
TRACKING_URI_TAG = "gatesweep.tracking_uri"
"""The store's URI, credentials redacted (the `tracking.uri` param is never logged)."""
CONFIG_HASH_TAG = "gatesweep.config_hash"
TRIAL_NAME_TAG = "gatesweep.trial_name"
TUNE_TRIAL_ID_TAG = "gatesweep.tune_trial_id"
"""Ray Tune's trial id (Optuna trials: one run per Tune trial)."""
NODE_ID_TAG = "gatesweep.node_id"
RUN_DIR_TAG = "gatesweep.run_dir"
"""The trial's checkpoint and weights folder (absolute, on the machine that trained it)."""
GATE_TAG = "gatesweep.gate"
"""The gate's label (`none`, `G1-elementwise`, ...), on every trial run."""
TASK_TAG = "gatesweep.task"
"""The data source (`bigram-backcopy`, `shakespeare`, ...)."""
HOST_TAG = "gatesweep.host"
PID_TAG = "gatesweep.pid"
DEEPSPEED_TAG = "gatesweep.deepspeed"
"""The DeepSpeed config the engine was built with (JSON)."""
NUMERICS_TAG = "gatesweep.numerics"
"""What decides the trial's floating-point rounding besides its config and seed (JSON: processor,
the instruction set of torch's CPU kernels, threads, torch and its BLAS, the GPU and its math
settings, the environment variables that change them; `orchestrator.trial.numerics`)."""
NUMERICS_KEY_TAG = "gatesweep.numerics_key"
"""A short hash of `NUMERICS_TAG`: runs of one config and seed with equal keys repeat bit for bit."""
RESUMED_FROM_TAG = "gatesweep.resumed_from_step"
EVAL_WARNINGS_TAG = "gatesweep.eval_warnings"
"""Set when an evaluation's probe tensors held NaN or inf (its probe metrics are NaN): which, at which step."""
OUTCOME_TAG = "gatesweep.outcome"
"""How the trial ended: a key of `orchestrator.tracking.outcomes.STATUS`."""
REASON_TAG = "gatesweep.failure_reason"
STOPPED_TAG = "gatesweep.stopped_early"
"""Why the scheduler (ASHA) stopped the trial; its presence marks a scheduler stop."""
SYNTHETIC_TAG = "gatesweep.synthetic"
"""On runs the report benchmark makes up (benchmarks/report_scale.py)."""
WEIGHTS_SKIPPED_TAG = "gatesweep.weights_not_logged"
"""Why the trained weights were not logged as an artifact (larger than `MAX_WEIGHTS_ARTIFACT_BYTES`)."""
AXIS_PREFIX = "gatesweep.axis."
ALSO_IN_PREFIX = "gatesweep.also_in."
MEMBER_PREFIX = "gatesweep.in."
GROUP_PREFIX = "gatesweep.group."
RUN_COLOR_TAG = "mlflow.runColor"
"""MLflow's own tag for a run's colour in its UI (set to the colour of the run's group)."""


def axis_tag(path: str) -> str:
    """The tag holding a trial's value on the axis `path` (`gatesweep.axis.train.lr`)."""
    return AXIS_PREFIX + path


def axis_of(tag: str) -> str | None:
    """The axis path of an axis tag, None for any other tag."""
    return tag[len(AXIS_PREFIX) :] if tag.startswith(AXIS_PREFIX) else None


def also_in_tag(sweep: str) -> str:
    """The tag a reused finished run carries for sweep `sweep` (value: that sweep's parent id)."""
    return ALSO_IN_PREFIX + sweep


def member_tag(sweep: str) -> str:
    """The tag every trial run of a launch of `sweep` carries (value: the launch's parent id)."""
    return MEMBER_PREFIX + sweep


def group_tag(sweep: str, salt: int = 0) -> str:
    """The tag holding a trial's group in sweep `sweep` (value: the group's label, its values on
    the varied axes but the seeds): `gatesweep.group.NAME`, or `gatesweep.group.NAME:SALT` where
    the plain one would give two groups one colour in the MLflow UI (`views.group_key`)."""
    return GROUP_PREFIX + sweep + (f":{salt}" if salt else "")


def is_group_tag(tag: str) -> bool:
    return tag.startswith(GROUP_PREFIX)


def is_seed_axis(path: str) -> bool:
    """`train.seed`, `data.bigram.seed`, ...: axes that replicate a configuration."""
    return path.rsplit(".", 1)[-1] == "seed"


# ---- params of a sweep's parent run -----------------------------------------------------------
SWEEP_CELLS_PARAM = "sweep.cells"
SWEEP_TRIALS_PARAM = "sweep.trials"
SWEEP_EXCLUDED_PARAM = "sweep.excluded"
SWEEP_DUPLICATES_PARAM = "sweep.duplicates"
SWEEP_SEARCH_PARAM = "sweep.search"
"""`grid` or `optuna`."""
SWEEP_AXES_PARAM = "sweep.axes"
"""Comma-separated dotted paths of the axes that vary (`-` when none)."""
SWEEP_SPACE_PARAM = "sweep.space"
"""Optuna sweeps: comma-separated dotted paths of `search.space` (`-` when empty)."""

# ---- artifacts --------------------------------------------------------------------------------
CONFIG_ARTIFACT = "config.yaml"
"""The trial's fully resolved config."""
DEEPSPEED_ARTIFACT = "deepspeed.json"
SPIKES_ARTIFACT = "spikes.json"
"""{"rules": ..., "events": [{"step", "loss", "rule", ...}]}: the loss spikes of a trial."""
PROBES_ARTIFACT = "probes.json"
"""Probe data behind the plots (`orchestrator.evals.heldout.probes_artifact`)."""
LOSS_CURVE_PLOT = "loss_curve.png"
FIRST_TOKEN_PLOT = "first_token_attn.png"
ATTENTION_MAP_PLOT = "attention_map.png"
GATE_HISTOGRAM_PLOT = "gate_hist.png"
TRACEBACK_ARTIFACT = "failure_traceback.txt"
"""The traceback of a trial that crashed unexpectedly."""
SUMMARY_ARTIFACT = "summary.md"
"""The end-of-sweep table on the parent run (`orchestrator.launch.summary.summary_markdown`)."""
REPORT_DIR = "report"
"""Folder on the parent run where `gatesweep report` (and the end of a sweep) logs its files."""
WEIGHTS_DIR = "model"
"""Folder of a trial's run holding its trained weights, `model/model.pt` (the trial's
RUN_DIR/model.pt: `{"model": state_dict, "config": resolved trial config}`)."""
WEIGHTS_FILE = "model.pt"
MAX_WEIGHTS_ARTIFACT_BYTES = 256 << 20
"""Weights larger than this stay in the run folder only (tag `WEIGHTS_SKIPPED_TAG` says why)."""
