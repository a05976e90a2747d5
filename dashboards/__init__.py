"""dashboards: read a sweep's runs from MLflow and compare them (tables, plots, HTML report). Never writes training state.

In a notebook: `dashboards.results(sweep)` (one row per trial) and `dashboards.history(sweep,
metrics=[...])` (curves, long form) give pandas DataFrames (`dashboards.results`); every mistake
of the caller's raises `dashboards.ResultsError`."""

from .results import ResultsError, history, results

__all__ = ["ResultsError", "history", "results"]
