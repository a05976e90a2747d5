"""Where gatesweep points the MLflow UI: the experiment's kind (model training), the URLs it
prints (the runs page in model-training mode, in a sweep's saved view), the parent run's
description with its links, and the search filters of a launch's trial runs."""

from __future__ import annotations

from .. import names

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
"""MLflow's kind for model-training experiments (`genai_development` is the GenAI one)."""
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY_PARAM = "viewStateShareKey"
WORKFLOW_PARAM = "workflowType"
TRAINING_WORKFLOW = "machine_learning"


def mark_training_experiment(cl, experiment) -> None:
    """Tag an experiment as model training, unless it already has a kind (a user's choice stays)."""
    tags = getattr(experiment, "tags", None) or {}
    if EXPERIMENT_KIND_TAG not in tags:
        cl.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)


def view_id(sweep: str) -> str:
    """The saved view's id (a sweep name is letters, digits, '.', '_', '-': URL-safe)."""
    return f"gatesweep-{sweep}"


def view_tag(sweep: str) -> str:
    return VIEW_TAG_PREFIX + view_id(sweep)


def runs_url(base: str, experiment_id: str, sweep: str | None = None) -> str:
    """The runs table of the experiment in model-training mode, in the sweep's saved view."""
    query = (f"{VIEW_KEY_PARAM}={view_id(sweep)}&" if sweep else "") + f"{WORKFLOW_PARAM}={TRAINING_WORKFLOW}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def run_url(base: str, experiment_id: str, run_id: str, artifact: str | None = None) -> str:
    """A run's page (its artifact `artifact` selected, when given), in model-training mode."""
    tail = f"/artifacts/{artifact}" if artifact else ""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}{tail}?{WORKFLOW_PARAM}={TRAINING_WORKFLOW}"


def parent_note(description: str, experiment_id: str, parent_id: str, sweep: str) -> str:
    """The parent run's description (markdown, shown on its page): links to the comparison
    report on this run and to the sweep's runs table first (MLflow folds long descriptions), then
    the sweep's own description."""
    # hash links, relative to wherever the UI is served (a server's --static-prefix included)
    report = run_url("", experiment_id, parent_id, f"{names.REPORT_DIR}/report.html").lstrip("/")
    md = run_url("", experiment_id, parent_id, f"{names.REPORT_DIR}/report.md").lstrip("/")
    table = runs_url("", experiment_id, sweep).lstrip("/")
    links = (
        f"**Comparison report**: [report.html]({report}) · [report.md]({md}) (artifacts `{names.REPORT_DIR}/` of this run, "
        f"written when the sweep ends and by `gatesweep report {sweep}`). **Trials**: [the runs table of sweep {sweep}]({table}). "
        "This run's metrics `<metric>/<configuration>` are each configuration's mean over its finished seeds."
    )
    return f"{links}\n\n{description.strip()}" if description and description.strip() else links


def member_filter(sweep: str, parent_id: str) -> str:
    """The search filter of a launch's trial runs: its children and the finished runs it reused
    both carry `gatesweep.in.<sweep> = <parent id>` (MLflow's filters have no OR)."""
    return f"tags.`{names.member_tag(sweep)}` = '{parent_id}'"


def children_filter(parent_id: str) -> str:
    """The filter for sweeps launched before member tags: the parent's children."""
    return f"tags.`{names.PARENT_TAG}` = '{parent_id}'"
