"""What a SOURCE / MODEL argument names, loaded: a gatesweep model config, its state dict, and how
to get its tokenizer.

Accepted, in this order:
- a `model.pt` file, or a folder holding one: a trained trial (`RUN_DIR/model.pt`, with
  `run.json` naming its MLflow run) or a `gatesweep import` folder;
- a Hugging Face folder (`config.json` + `model.safetensors` or shards): Qwen3, Qwen3-MoE,
  Qwen3-Next (full-attention layers) or the paper's gated layout, see `hf_layouts`;
- a gatesweep export folder (`config.yaml` + `model.safetensors`, `gatesweep export --format gatesweep`);
- an MLflow run id (32 hex digits) whose `gatesweep.run_dir` holds the weights on this machine,
  or on the object store a runs folder there named (downloaded into this machine's scratch);
- a Hub name (`owner/name`) when online (`GATESWEEP_ONLINE=1`).
Anything else, or a damaged file, is an `InteropError`: one line naming the file.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gatedmodels import GatedTransformer, ModelConfig, build_meta
from gatedmodels.typedconfig import ConfigError
from orchestrator.core.bounds import MAX_LEN
from orchestrator.core.errors import UserError
from orchestrator.data import DataUnavailable
from orchestrator.data.prepare import DataSettings, resolve_tokenizer
from orchestrator.data.sources import ONLINE_ENV, online
from orchestrator.spec.files import load_yaml, read_text
from orchestrator.spec.trial import TrialConfig
from orchestrator.storage import BadLocation, Location
from orchestrator.storage.location import is_remote
from orchestrator.storage.scratch import scratch_for
from orchestrator.tracking import client, names, resolve_tracking_uri, sqlite_path

from . import hf_layouts
from .errors import InteropError
from .tokenizer_files import TOKENIZER_FILE, copy_for_gatesweep
from .weights_files import WEIGHTS_NAME, LazyTensors, check_headers, folder_headers, headers

RUN_ID = re.compile(r"[0-9a-f]{32}")
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+")
GATESWEEP_CONFIG = "config.yaml"
RUN_ID_KEY = "run_id"
"""model.pt's record of the MLflow run its weights were trained under (`trial.callbacks.artifacts`)."""
IMPORT_META = "import.json"
META_KEY = "gatesweep"
"""config.json key under which an export records the exact gatesweep model config."""


@dataclass
class Loaded:
    name: str
    """A short name for output folders and runs."""
    model_cfg: ModelConfig
    state: dict[str, torch.Tensor]
    kind: str
    """`trial` (a model.pt), `hf` (a Hugging Face folder) or `gatesweep` (an export folder)."""
    path: Path
    trial: Any = None
    """The TrialConfig of a trial or an import, else None."""
    run_id: str | None = None
    layout: str | None = None
    """The HF layout of an `hf` source."""
    tokenizer_file: Path | None = None
    """The tokenizer.json of an `hf` or `gatesweep` source."""
    notes: list[str] = field(default_factory=list)

    def tokenizer(self, tokenizer_file: str | None = None):
        """The gatesweep `Tokenizer` of the model (None for Bigram-Backcopy trials, which have none)."""
        if tokenizer_file:
            return copy_for_gatesweep(Path(tokenizer_file))
        if self.kind == "trial" and self.trial is None:
            raise InteropError(f"{self.path}: its trial config does not validate here, so its tokenizer is unknown (pass --tokenizer FILE)")
        if self.trial is not None and self.kind == "trial":
            if self.trial.data.source == "bigram-backcopy":
                return None
            try:
                return resolve_tokenizer(DataSettings.of(self.trial.data))
            except DataUnavailable as err:
                raise InteropError(f"{self.path}: its tokenizer {self.trial.data.tokenizer} cannot be built here ({err})") from None
        if self.tokenizer_file is None:
            raise InteropError(f"{self.path}: no {TOKENIZER_FILE} (pass --tokenizer FILE)")
        return copy_for_gatesweep(self.tokenizer_file)


MAX_CONFIG_BYTES = 16 << 20
"""config.json and run.json are a few kB; a larger one (or a device, a pipe) is refused unread."""


def bounded_text(path: Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`, or InteropError naming it."""

    try:
        return read_text(path, what=what, max_bytes=max_bytes)
    except UserError as err:
        raise InteropError(str(err)) from None


def locate(target: str, uri: str | None = None) -> Loaded:
    path = Path(target).expanduser()
    if path.is_file():
        if path.suffix != ".pt":
            raise InteropError(f"{target}: not a model.pt; give a trial folder, a model.pt, a Hugging Face folder or an MLflow run id")
        return load_trial(path)
    if path.is_dir():
        if (path / "model.pt").is_file():
            return load_trial(path / "model.pt")
        if (path / "config.json").exists() or (path / "config.json").is_symlink():  # read only if a regular file
            return load_hf(path)
        if (path / GATESWEEP_CONFIG).is_file() and (path / WEIGHTS_NAME).is_file():
            return load_gatesweep_export(path)
        raise InteropError(
            f"{target}: no model.pt (a trial folder), config.json (a Hugging Face folder) or "
            f"{GATESWEEP_CONFIG} + {WEIGHTS_NAME} (a gatesweep export) inside"
        )
    if RUN_ID.fullmatch(target):
        return load_trial(_run_weights(target, uri), run_id=target)
    if HUB_NAME.fullmatch(target):
        return load_hf(hub_folder(target), name=target.replace("/", "--"))
    raise InteropError(f"{target}: not a file, a folder, an MLflow run id or a Hub name (owner/name)")


def _run_weights(run_id: str, uri: str | None) -> Path:
    uri = uri or resolve_tracking_uri(None)
    db = sqlite_path(uri)
    if db is not None and not db.is_file():  # MLflow would create an empty store and then not find the run
        raise InteropError(f"run {run_id}: no store at {db}; pass --tracking-uri (or set MLFLOW_TRACKING_URI) to the run's store")
    try:
        run = client(uri).get_run(run_id)
    except Exception as err:  # MLflow raises its own exception types for a missing run
        raise InteropError(f"run {run_id}: not found in {uri} ({type(err).__name__})") from None
    run_dir = run.data.tags.get(names.RUN_DIR_TAG)
    if run_dir and is_remote(run_dir):
        return _remote_weights(run_id, run_dir)
    if not run_dir or not (Path(run_dir) / names.WEIGHTS_FILE).is_file():
        raise InteropError(f"run {run_id}: its weights are not on this machine ({names.RUN_DIR_TAG} = {run_dir})")
    return Path(run_dir) / names.WEIGHTS_FILE


def _remote_weights(run_id: str, run_dir: str) -> Path:
    """A trial of a runs folder on an object store: its model.pt and run.json downloaded into this
    machine's scratch folder (fetched again only when the stored object's size changed)."""
    try:
        remote = Location.parse(run_dir)
    except BadLocation as err:
        raise InteropError(f"run {run_id}: its folder tag is not a location ({err})") from None
    local = scratch_for(remote)
    try:
        weights = remote.child(names.WEIGHTS_FILE)
        if not weights.is_file():
            raise InteropError(f"run {run_id}: no {names.WEIGHTS_FILE} in {remote} (the trial has not finished?)")
        mine = local / names.WEIGHTS_FILE
        if not mine.is_file() or mine.stat().st_size != weights.size():
            weights.download(mine)
        meta = remote.child("run.json")
        if meta.is_file():
            meta.download(local / "run.json")
    except OSError as err:
        raise InteropError(f"run {run_id}: its weights in {remote} cannot be read ({' '.join(str(err).split())[:200]})") from None
    return local / names.WEIGHTS_FILE


def hub_folder(name: str) -> Path:
    if not online():
        raise InteropError(f"{name}: no such local folder, and a Hub name needs {ONLINE_ENV}=1 (the Hub is off by default)")
    from huggingface_hub import snapshot_download

    patterns = [
        "config.json",
        "*.safetensors",
        "model.safetensors.index.json",
        "tokenizer*",
        "special_tokens_map.json",
    ]  # no code: none is run
    try:
        return Path(snapshot_download(name, allow_patterns=patterns))
    except Exception as err:  # network and repository errors of huggingface_hub
        raise InteropError(f"{name}: cannot be downloaded from the Hub ({type(err).__name__}: {str(err)[:200]})") from None


def _trial_config(data: Any, where: str, notes: list[str]) -> tuple[Any, ModelConfig]:
    """(TrialConfig or None, ModelConfig). A trial config that no longer validates here (its
    corpus or tokenizer file lives on another machine) still gives its model: weights travel,
    data paths need not."""
    if not isinstance(data, dict):
        raise InteropError(f"{where}: its config is not a mapping")
    if isinstance(data.get("eval"), dict):
        data["eval"].pop("mmlu", None)  # trials trained before eval.tasks replaced eval.mmlu
    try:
        trial = TrialConfig.from_dict(data)
        return trial, trial.model
    except ConfigError as err:
        first = str(err).strip().splitlines()[0]
    try:
        model = ModelConfig.from_dict(data.get("model"))
    except (ConfigError, TypeError):
        raise InteropError(f"{where}: its config does not validate ({first})") from None
    notes.append(f"its trial config does not validate here ({first}); only its model section is used (pass --tokenizer FILE)")
    return None, model


def load_trial(model_pt: Path, run_id: str | None = None) -> Loaded:
    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle before it refuses it: one line is said below
            warnings.simplefilter("ignore")
            blob = torch.load(model_pt, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
        raise InteropError(
            f"{model_pt}: cannot be loaded as weights ({type(err).__name__}): damaged, truncated, or not a torch.save file of tensors"
        ) from None
    if not isinstance(blob, dict) or not isinstance(blob.get("model"), dict) or "config" not in blob:
        raise InteropError(f"{model_pt}: not a gatesweep weights file (expected {{'model': state dict, 'config': trial config}})")
    notes: list[str] = []
    trial, model_cfg = _trial_config(blob["config"], str(model_pt), notes)
    run_id = _weights_run(model_pt, blob.get(RUN_ID_KEY), run_id, notes)
    state = {k: v for k, v in blob["model"].items() if isinstance(v, torch.Tensor)}
    check_state(model_cfg, state, str(model_pt))
    return Loaded(
        name=model_pt.parent.name, model_cfg=model_cfg, state=state, kind="trial", path=model_pt, trial=trial, run_id=run_id, notes=notes
    )


def _max_numel(cfg: ModelConfig) -> int:
    """No tensor of a model can have more elements than the whole model."""
    return build_meta(cfg).num_params()


def _weights_run(model_pt: Path, trained_under: Any, asked: str | None, notes: list[str]) -> str | None:
    """The MLflow run these weights belong to: the one they were trained under (model.pt records
    it), which must be the run asked for (a run id) and the one the folder's run.json names (a newer
    run of the same folder writes run.json at once, its weights only at its end). Weights that
    record no run (imports, trials of older versions) take the run asked for or run.json's."""
    meta = model_pt.parent / "run.json"
    folder_run = None
    if meta.exists() or meta.is_symlink():  # read only as a bounded regular file (a device would be read forever)
        try:
            record = json.loads(bounded_text(meta, "run record", MAX_CONFIG_BYTES))
            folder_run = record.get("run_id") if isinstance(record, dict) else None
            if not isinstance(folder_run, str) or not RUN_ID.fullmatch(folder_run):
                raise ValueError(f"no run id in {type(record).__name__} {str(record)[:60]!r}")
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise InteropError(
                f"{meta}: not a trial's run record ({type(err).__name__}: {str(err)[:80]}); which MLflow run these weights "
                "belong to is unknown (give the run id instead, or move the weights out of this folder)"
            ) from None
    trained = trained_under if isinstance(trained_under, str) and RUN_ID.fullmatch(trained_under) else None
    if trained is None:
        if folder_run and not asked:
            notes.append(f"{model_pt.name} records no run id (written before gatesweep recorded it): taken as run.json's run {folder_run}")
        return asked or folder_run
    if asked and asked != trained:
        raise InteropError(
            f"run {asked}: its folder's {model_pt.name} was trained under run {trained}, not this one (a later run in the same "
            f"folder replaced it?); these are not run {asked}'s weights"
        )
    if folder_run and folder_run != trained:
        raise InteropError(
            f"{model_pt}: trained under MLflow run {trained}, but {meta.name} names run {folder_run} (a newer run of this folder that "
            f"has not written its weights yet?); `gatesweep eval {trained}` would score these weights in their own run"
        )
    return trained


def check_state(cfg: ModelConfig, state: dict[str, torch.Tensor], where: str) -> None:
    """The state dict has exactly the tensors (and shapes) `cfg`'s GatedTransformer has, each
    floating point (an integer or boolean tensor would be cast silently into the parameters)."""
    expected = {k: tuple(v.shape) for k, v in build_meta(cfg).state_dict().items()}
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or extra or wrong:
        what = (
            f"missing {missing[0]}"
            if missing
            else f"unexpected {extra[0]}"
            if extra
            else f"{wrong[0]} has shape {list(state[wrong[0]].shape)}, the config needs {list(expected[wrong[0]])}"
        )
        raise InteropError(f"{where}: the weights do not match the model config ({what})")
    for name, t in state.items():
        if not t.is_floating_point():
            raise InteropError(f"{where}: tensor {name} has dtype {str(t.dtype).removeprefix('torch.')}; weights must be floating point")


def read_config_json(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        data = json.loads(bounded_text(path, "config.json", MAX_CONFIG_BYTES))
    except ValueError as err:
        raise InteropError(f"{path}: not a readable JSON file ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise InteropError(f"{path}: not a JSON object")
    return data


def load_hf(folder: Path, name: str | None = None) -> Loaded:
    config = read_config_json(folder)
    where = str(folder / "config.json")
    cfg, layout = hf_layouts.config_from_hf(config, where, max_len=MAX_LEN)
    notes: list[str] = []
    cfg = _restore_exact(cfg, config.get(META_KEY), notes)
    infos = folder_headers(folder)  # headers only: unknown, integer or oversized tensors are refused before any is read
    check_headers(infos, str(folder), max_numel=_max_numel(cfg), skip=("mtp.",))
    hf_layouts.state_from_hf(cfg, layout, {k: v.meta() for k, v in infos.items()}, str(folder))  # names and shapes, nothing read
    state = hf_layouts.state_from_hf(cfg, layout, LazyTensors(infos), str(folder))
    tok = folder / TOKENIZER_FILE
    if layout == "official":
        notes.append("the paper's gated layout: q_proj rows grouped per KV head, read as the official modeling_qwen3.py splits them")
    return Loaded(
        name=name or folder.name,
        model_cfg=cfg,
        state=state,
        kind="hf",
        path=folder,
        layout=layout,
        tokenizer_file=tok if tok.exists() or tok.is_symlink() else None,
        notes=notes,
    )


def _restore_exact(cfg: ModelConfig, meta: Any, notes: list[str]) -> ModelConfig:
    """A gatesweep export records its model config in config.json; when the HF fields still
    describe the same architecture, that config is taken whole (preset name, initialisation,
    the aux-loss weight as trained), else the HF fields win and the record is ignored."""
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), dict):
        return cfg
    try:
        recorded = ModelConfig.from_dict(meta["model"])
    except ConfigError:
        notes.append(f"config.json's {META_KEY!r} record does not validate; the HF fields are used")
        return cfg
    if hf_layouts.architecture_key(recorded) != hf_layouts.architecture_key(cfg):
        notes.append(f"config.json was edited after export (its {META_KEY!r} record describes another model); the HF fields are used")
        return cfg
    return recorded.replace(max_seq_len=cfg.max_seq_len)


def load_gatesweep_export(folder: Path) -> Loaded:

    try:
        data = load_yaml(folder / GATESWEEP_CONFIG)
    except UserError as err:
        raise InteropError(str(err)) from None
    notes: list[str] = []
    trial, model_cfg = _trial_config(data, str(folder / GATESWEEP_CONFIG), notes)
    where = str(folder / WEIGHTS_NAME)
    infos = headers(folder / WEIGHTS_NAME)
    check_headers(infos, where, max_numel=_max_numel(model_cfg))
    check_state(model_cfg, {k: v.meta() for k, v in infos.items()}, where)  # names and shapes, nothing read
    lazy = LazyTensors(infos)
    state = {k: lazy[k] for k in lazy}
    tok = folder / TOKENIZER_FILE
    return Loaded(
        name=folder.name,
        model_cfg=model_cfg,
        notes=notes,
        state=state,
        kind="gatesweep",
        path=folder,
        trial=trial,
        tokenizer_file=tok if tok.exists() or tok.is_symlink() else None,
    )


def build_model(loaded: Loaded, dtype: torch.dtype | None = None, device: torch.device | str = "cpu"):
    """The GatedTransformer of `loaded` with its weights, in `dtype` (default: as stored)."""
    model = GatedTransformer(loaded.model_cfg)
    model.load_state_dict(loaded.state)  # copies into the float32 parameters, whatever the stored dtype
    model.to(dtype or stored_dtype(loaded.state))
    return model.to(device).eval()


def stored_dtype(state: dict[str, torch.Tensor]) -> torch.dtype:
    """The floating dtype most of the weights have."""
    counts: dict[torch.dtype, int] = {}
    for t in state.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=lambda k: counts[k]) if counts else torch.float32
