"""Bounds shared by the trial config sections (a value beyond them would overflow, hang or fail late)."""

from __future__ import annotations

import re

MAX_STEPS = 100_000_000
"""Most optimizer steps (and step intervals) of a trial."""
MAX_LEN = 1_048_576
"""Longest sequence, prompt or context in tokens."""
MAX_BATCH = 65_536
"""Largest batch (sequences or prompts per pass)."""
SEED = (0, 2**63 - 1)
"""Seeds: what numpy's generators (non-negative) and torch.manual_seed (64 bits) both accept."""


_PARAM_KEY = re.compile(r"[/\w.\- :]{1,250}")
"""What MLflow accepts as a param or metric name (mlflow.utils.validation), 250 characters at most."""
