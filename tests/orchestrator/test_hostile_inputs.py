"""Hostile and malformed inputs beyond the corpus of bad_sweeps/: sweep files, trial files, --set
overrides and launch flags that used to pass validation and fail later (after runs were written),
crash with a traceback, exhaust memory or hang. Each must exit 2 with the field named and what is
allowed, no traceback, and nothing written (no mlflow.db, no runs/).

The file cases run in one `gatesweep validate` process (each file reported on its own); the
override cases call the CLI in-process; the launch cases (unreachable services) run `gatesweep
run` / `train` as a user would, against ports on 127.0.0.1 that nobody listens on. The preflight
checks are also tested against a real tiny HTTP server on 127.0.0.1 and a real `mlflow server`
with MLflow's basic-auth app.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from orchestrator.core.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "sweeps" / "quickstart.yaml")
EXAMPLE = str(ROOT / "examples" / "bigram_g1.yaml")
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
ENV.pop("GATESWEEP_ONLINE", None)
ENV.pop("MLFLOW_TRACKING_URI", None)

SWEEP = "name: x\nbase: {model: {size: tiny}, data: {source: bigram-backcopy}}\n"
SHORT = "name: x\nbase: {model: {size: tiny}, data: {source: bigram-backcopy}, train: {steps: 100, eval_every: 50}}\n"
TRIAL = "model: {size: tiny}\n"
TEXT = "model: {size: tiny}\ndata: {source: shakespeare}\n"


def alias_bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "name: x\n" + "\n".join(lines) + "\n"


def huge_grid() -> str:
    axes = [
        "train.seed",
        "train.lr",
        "train.batch_size",
        "train.grad_accum",
        "train.warmup_steps",
        "data.seq_len",
        "train.weight_decay",
        "train.min_lr_ratio",
        "eval.batches",
        "train.log_every",
    ]
    return SWEEP + "grid:\n" + "".join(f"  {a}: [1, 2, 3, 4]\n" for a in axes)


# id -> (file content (str, bytes or a function), text the error must contain)
FILES: dict[str, tuple] = {
    # numbers: NaN, infinities, overflow, integers beyond their field, floats where integers go
    "lr_nan": (SWEEP.replace("bigram-backcopy}", "bigram-backcopy}, train: {lr: .nan}"), "train.lr: got nan; expected a finite number"),
    "lr_inf_in_grid": (SWEEP + "grid: {train.lr: [0.001, .inf]}\n", "grid.train.lr[1]: got inf; expected a finite number"),
    "lr_overflowing_string": (TRIAL + "train: {lr: 1e999}\n", "train.lr: got '1e999'; expected a finite number"),
    "seed_beyond_64_bits": (TRIAL + "train: {seed: 18446744073709551616}\n", "train.seed: got 18446744073709551616; allowed: 0..2**63-1"),
    "seed_negative": (TRIAL + "train: {seed: -1}\n", "train.seed: got -1; allowed: 0..2**63-1"),
    "seq_len_1e20": (TRIAL + "data: {seq_len: 1e20}\n", "data.seq_len: got '1e20'; expected an integer"),
    "seq_len_float_1e20": (TRIAL + "data: {seq_len: 1.0e+20}\n", "data.seq_len: got 1e+20; expected an integer"),
    "seq_len_huge": (TRIAL + "data: {seq_len: 10000000}\n", "data.seq_len: got 10000000; allowed: 2..1,048,576"),
    "resources_cpus_inf": (SWEEP + "resources: {cpus_per_worker: .inf}\n", "resources.cpus_per_worker: got inf; expected a finite number"),
    "resources_gpus_nan": (SWEEP + "resources: {gpus_per_worker: .nan}\n", "resources.gpus_per_worker: got nan; expected a finite number"),
    "resources_gpus_1e9": (SWEEP + "resources: {gpus_per_worker: 1.0e+9}\n", "resources.gpus_per_worker: got 1000000000.0; allowed: 0..64"),
    "resources_gpus_fraction_above_one": (
        SWEEP + "resources: {gpus_per_worker: 1.5}\n",
        "resources.gpus_per_worker: got 1.5; allowed: a share of one",
    ),
    "resources_cpus_too_fine": (
        SWEEP + "resources: {cpus_per_worker: 0.00001}\n",
        "resources.cpus_per_worker: got 1e-05; allowed: multiples of 0.0001",
    ),
    "max_concurrent_huge": (
        SWEEP + "resources: {max_concurrent: 1000000000}\n",
        "resources.max_concurrent: got 1000000000; allowed: 0..10,000",
    ),
    "workers_huge": (SWEEP + "resources: {workers_per_trial: 100000}\n", "resources.workers_per_trial: got 100000; allowed: 1..4096"),
    "retries_huge": (SWEEP + "retries: 1000000\n", "retries: got 1000000; allowed: 0..100"),
    "steps_negative": (TRIAL + "train: {steps: -5}\n", "train.steps: got -5; allowed: 1..100,000,000"),
    "steps_boolean": (TRIAL + "train: {steps: true}\n", "train.steps: got True; expected an integer"),
    "lr_list": (TRIAL + "train: {lr: [0.1]}\n", "train.lr: got [0.1]; expected a number"),
    "lr_zero": (TRIAL + "train: {lr: 0}\n", "train.lr: got 0.0; allowed: > 0"),
    "betas_one": (TRIAL + "train: {betas: [0.9, 1.0]}\n", "train.betas: got [0.9, 1.0]; allowed: two numbers in [0, 1)"),
    "betas_three": (TRIAL + "train: {betas: [0.9, 0.95, 0.99]}\n", "train.betas: got [0.9, 0.95, 0.99]; allowed: two numbers"),
    "grad_accum_zero": (TRIAL + "train: {grad_accum: 0}\n", "train.grad_accum: got 0; allowed: 1..65,536"),
    "grad_clip_negative": (TRIAL + "train: {grad_clip: -1}\n", "train.grad_clip: got -1.0; allowed: >= 0"),
    "batch_size_huge": (TRIAL + "train: {batch_size: 1000000}\n", "train.batch_size: got 1000000; allowed: 1..65,536"),
    "val_fraction_one": (TRIAL + "data: {val_fraction: 1}\n", "data.val_fraction: got 1.0; allowed: between 0 and 1"),
    "max_chars_negative": (TRIAL + "data: {max_chars: -1}\n", "data.max_chars: got -1; allowed: >= 1"),
    "bigram_vocab_huge": (TRIAL + "data: {bigram: {vocab_size: 1000000}}\n", "data.bigram.vocab_size: got 1000000; allowed: 4..4096"),
    "spike_window_huge": (TRIAL + "train: {spikes: {window: 1000000000}}\n", "train.spikes.window: got 1000000000; allowed: 2..1,000,000"),
    "seq_len_above_learned_positions": (
        "model: {size: tiny, position_encoding: learned, max_seq_len: 64}\ndata: {seq_len: 128}\n",
        "data.seq_len: got 128; learned positions allow at most model.max_seq_len (64)",
    ),
    "d_model_huge": (TRIAL.replace("tiny}", "tiny, d_model: 1000000}"), "model.d_model: got 1000000; allowed: 1..65,536"),
    "norm_eps_zero": (TRIAL.replace("tiny}", "tiny, norm_eps: 0}"), "model.norm_eps: got 0.0; allowed: > 0"),
    "rope_betas_swapped": (
        TRIAL.replace("tiny}", "tiny, rope: {beta_fast: 1, beta_slow: 32}}"),
        "model.rope.beta_slow: got 32.0 with beta_fast 1.0",
    ),
    "sink_eps_above_one": (TRIAL + "eval: {sink_eps: 2}\n", "eval.sink_eps: got 2.0; allowed: 0..1"),
    # the scheduler: settings Ray Tune rejects once the runs are written
    "grace_above_steps": (
        SHORT + "scheduler: {type: asha, grace_period: 500}\n",
        "scheduler.grace_period: got 500; allowed: <= train.steps of every trial (100",
    ),
    "max_t_negative": (SHORT + "scheduler: {type: asha, max_t: -1}\n", "scheduler.max_t: got -1; allowed: 0..100,000,000"),
    "max_t_below_grace": (
        SHORT + "scheduler: {type: asha, grace_period: 50, max_t: 20}\n",
        "scheduler.max_t: got 20; allowed: 0 (train.steps) or >= grace_period (50)",
    ),
    "scheduler_unknown_metric": (
        SHORT + "scheduler: {type: asha, metric: val_acc}\n",
        "scheduler.metric: got 'val_acc'; allowed: val_loss",
    ),
    "scheduler_gate_metric_ungated_arm": (
        SHORT + "grid: {model.gate.position: [none, G1]}\nscheduler: {type: asha, metric: gate_score_mean}\n",
        "scheduler.metric: got 'gate_score_mean', which trial none does not report",
    ),
    "scheduler_final_only_metric": (
        SHORT + "scheduler: {type: asha, metric: tokens_per_s}\n",
        "tokens_per_s is reported only when a trial ends",
    ),
    "scheduler_without_evaluations": (
        SWEEP.replace("bigram-backcopy}", "bigram-backcopy}, train: {steps: 100, eval_every: 0}")
        + "scheduler: {type: asha, grace_period: 10}\n",
        "scheduler: ASHA stops trials at their evaluations",
    ),
    "reduction_factor_huge": (
        SHORT + "scheduler: {type: asha, reduction_factor: 1.0e+6}\n",
        "scheduler.reduction_factor: got 1000000.0; allowed: <= 1000",
    ),
    # Optuna: every value a dimension can sample must suit its field
    "search_unknown_metric": (
        SWEEP + "search: {type: optuna, metric: accuracy, space: {train.lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n",
        "search.metric: got 'accuracy'; allowed: val_loss",
    ),
    "search_benchmark_metric_not_run": (
        SWEEP + "search: {type: optuna, metric: mmlu/acc, space: {train.lr: {loguniform: [1.0e-4, 1.0e-2]}}}\n",
        "search.metric: got 'mmlu/acc', which trial",
    ),
    "choice_of_invalid_gate": (
        SWEEP + "search: {type: optuna, space: {model.gate.position: {choice: [G1, G9]}}}\n",
        "search.space.model.gate.position: choice value 'G9' is not valid: model.gate.position: got 'G9'",
    ),
    "negative_lr_range": (
        SWEEP + "search: {type: optuna, space: {train.lr: {uniform: [-0.1, 0.1]}}}\n",
        "search.space.train.lr: uniform value -0.1 is not valid: train.lr: got -0.1; allowed: > 0",
    ),
    "loguniform_for_integer_field": (
        SWEEP + "search: {type: optuna, space: {train.steps: {loguniform: [10, 100]}}}\n",
        "search.space.train.steps: train.steps is an integer field; use {int: [low, high]}",
    ),
    "int_range_beyond_seed": (
        SWEEP + "search: {type: optuna, space: {train.seed: {int: [0, 1.0e+30]}}}\n",
        "search.space.train.seed: int value",
    ),
    "uniform_to_infinity": (
        SWEEP + "search: {type: optuna, space: {train.lr: {uniform: [0.001, .inf]}}}\n",
        "search.space.train.lr.uniform[1]: got inf; expected a finite number",
    ),
    "num_samples_huge": (
        SWEEP + "search: {type: optuna, num_samples: 1000000000, space: {train.lr: {uniform: [0.001, 0.01]}}}\n",
        "search.num_samples: got 1000000000; allowed: <= 10,000",
    ),
    "search_seed_beyond_32_bits": (
        SWEEP + "search: {type: optuna, seed: 1099511627776, space: {train.lr: {uniform: [0.001, 0.01]}}}\n",
        "search.seed: got 1099511627776; allowed: 0..2**32-1",
    ),
    # names, keys, strings
    "empty_experiment": (SWEEP + "tracking: {experiment: ''}\n", "tracking.experiment: got ''; allowed: 1-500 characters"),
    "experiment_with_bidi_override": (
        SWEEP + 'tracking: {experiment: "ab\\u202ecd"}\n',
        "tracking.experiment: got 'ab\\u202ecd': it contains the character U+202E",
    ),
    "experiment_too_long": (SWEEP + f"tracking: {{experiment: {'e' * 600}}}\n", "tracking.experiment: got 'eeee"),
    "name_with_newline": ('name: "abc\\n"\n' + SWEEP.split("\n", 1)[1], "name: got 'abc\\n'; allowed: 1-100 letters"),
    "unicode_name": ("name: gätes\n" + SWEEP.split("\n", 1)[1], "name: got 'gätes'; allowed: 1-100 letters"),
    "long_name": (f"name: {'n' * 5000}\n" + SWEEP.split("\n", 1)[1], "(5,000 characters); allowed: 1-100 letters"),
    "very_long_name": (
        f"name: {'n' * 10000}\n" + SWEEP.split("\n", 1)[1],
        "name: got a string of 10,000 characters; allowed: at most 8,000",
    ),
    "description_too_long": (
        SWEEP + f"description: {'d' * 20000}\n",
        "description: got a string of 20,000 characters; allowed: at most 8,000",
    ),
    "grid_integer_key": (SWEEP + "grid: {1: [a]}\n", "grid: has the key 1 (int); keys must be strings"),
    "grid_null_key": (SWEEP + "grid: {~: [a]}\n", "grid: has the key None (NoneType); keys must be strings"),
    "zip_boolean_key": (SWEEP + "zip: [{yes: [1]}]\n", "zip[0]: has the key True (bool); keys must be strings"),
    "exclude_integer_key": (
        SWEEP + "grid: {train.seed: [0, 1]}\nexclude: [{0: 1}]\n",
        "exclude[0]: has the key 0 (int); keys must be strings",
    ),
    "space_integer_key": (
        SWEEP + "search: {type: optuna, space: {5: {uniform: [0, 1]}}}\n",
        "search.space: has the key 5 (int); keys must be strings",
    ),
    "base_integer_key": ("name: x\nbase: {1: {steps: 3}}\n", "base: has the key 1 (int); keys must be strings"),
    "axis_inside_axis": (
        SWEEP + "grid: {model.gate: [{position: G1}], model.gate.position: [G1, G2]}\n",
        "grid.model.gate.position: lies inside the axis model.gate (grid.model.gate)",
    ),
    "axis_inside_zip_axis": (
        SWEEP + "grid: {data.bigram.seed: [0, 1]}\nzip: [{data.bigram: [{seed: 2}]}]\n",
        "lies inside the axis data.bigram",
    ),
    "exclude_value_not_on_axis": (
        SWEEP + "grid: {model.gate.position: [none, G1]}\nexclude: [{model.gate.position: G7}]\n",
        "exclude[0].model.gate.position: got 'G7'; not a value of the axis",
    ),
    "grid_too_large": (huge_grid, "grid: expands to 1,048,576 cells; allowed: at most 100,000"),
    "deepspeed_batch_key": (
        TRIAL + "deepspeed: {extra: {train_batch_size: 8}}\n",
        "deepspeed.extra.train_batch_size: is set from train.batch_size",
    ),
    "deepspeed_bad_param_key": (
        TRIAL + 'deepspeed: {extra: {"a$b": 1}}\n',
        "deepspeed.extra: key 'extra.a$b' cannot be an MLflow param name",
    ),
    "deepspeed_non_json_value": (
        TRIAL + "deepspeed: {extra: {when: 2024-01-01}}\n",
        "deepspeed.extra: got {'when': datetime.date(2024, 1, 1)}; expected JSON values",
    ),
    "date_for_seed": (TRIAL + "train: {seed: 2024-01-01}\n", "train.seed: got datetime.date(2024, 1, 1); expected an integer"),
    "binary_tag_for_name": ("name: !!binary aGVsbG8=\n" + SWEEP.split("\n", 1)[1], "name: got b'hello'; expected a string"),
    "nul_escape_in_path": (TRIAL + 'data: {source: "a\\0b.txt"}\n', "a\\x00b.txt'; a string may not contain NUL characters"),
    "path_too_long": (TRIAL + f"data: {{source: /{'p/' * 2100}x.txt}}\n", "longer than 4,096 bytes, the system's limit for a path"),
    "path_name_too_long": (TRIAL + f"data: {{source: /tmp/{'n' * 300}.txt}}\n", "a name in it is longer than 255 bytes"),
    "empty_text_column": (
        TEXT.replace("shakespeare}", "shakespeare, text_column: ''}"),
        "data.text_column: got ''; allowed: a non-empty string",
    ),
    # YAML that used to exhaust memory or the stack
    "alias_bomb": (alias_bomb, "alias bomb"),
    "deep_nesting": ("name: x\nbase: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 32 levels"),
    "deep_mapping": ("name: x\nbase: " + "{a: " * 60 + "1" + "}" * 60 + "\n", "nested deeper than 32 levels"),
    "recursive_alias": ("name: x\nbase: &b {model: *b}\n", "recursive structure"),
    "binary_file": (bytes(range(256)) * 8, "contains NUL bytes (a binary file?)"),
    "latin1_file": ("name: café\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9"),
    "file_above_1_mib": ("name: x\n# " + "x" * (1024 * 1024) + "\n", "allowed: at most 1,048,576 bytes"),
    "two_documents": (SWEEP + "---\n" + SWEEP, "expected a single document in the stream"),
    "list_as_key": ("? [a, b]\n: 1\n", "a key must be a plain value, not a list or a mapping"),
    "integer_of_5000_digits": (TRIAL + "train: {seed: " + "9" * 5000 + "}\n", "invalid YAML: Exceeds the limit"),
    "comments_only": ("# nothing here\n\n", "the file is empty"),
    "control_character": ('name: "x"\ndescription: "\x07"\n', "special characters are not allowed"),
    # paths: made absolute against the file's folder, so Ray's working directory cannot break them
    "relative_source_missing": (TRIAL + "data: {source: corpus/missing.txt}\n", "corpus/missing.txt': no such file or folder"),
    "relative_source_missing_in_grid": (SWEEP + "grid: {data.source: [shakespeare, gone.txt]}\n", "gone.txt': no such file or folder"),
    "source_folder_without_text": (TRIAL + "data: {source: aux/empty}\n", "aux/empty': no .txt"),
    "source_folder_mixed_types": (TRIAL + "data: {source: aux/mixed}\n", "mixed file types ['.csv', '.txt']"),
    "tokenizer_file_missing": (TEXT.replace("shakespeare}", "shakespeare, tokenizer: tok/missing.json}"), "data.tokenizer: got"),
    "tokenizer_file_not_a_tokenizer": (
        TEXT.replace("shakespeare}", "shakespeare, tokenizer: aux/list.json}"),
        "not a Hugging Face tokenizer.json",
    ),
    "ppl_set_bad_metric_name": (TEXT + "eval: {ppl_sets: ['aux/my (1).txt']}\n", "its metric 'ppl/my (1)' is not a valid MLflow name"),
    # evaluation settings that failed only after the whole training
    "ruler_batch_size_zero": (TEXT + "eval: {ruler: {enabled: true, batch_size: 0}}\n", "eval.ruler.batch_size: got 0; allowed: 1..65,536"),
    "ruler_absurd_length": (
        TEXT + "eval: {ruler: {enabled: true, lengths: [512, 100000000]}}\n",
        "eval.ruler.lengths[1]: got 100000000; allowed: 32..1,048,576",
    ),
    "ruler_beyond_learned_positions": (
        "model: {size: tiny, position_encoding: learned, max_seq_len: 256}\ndata: {source: shakespeare}\n"
        "eval: {ruler: {enabled: true, lengths: [512]}}\n",
        "eval.ruler.lengths[0]: got 512; learned positions allow at most",
    ),
    "task_unknown_subject": (
        TEXT + "eval: {tasks: {names: [mmlu_astrology]}}\n",
        "eval.tasks.names[0]: got 'mmlu_astrology' (did you mean 'mmlu_astronomy'?); allowed: hellaswag",
    ),
    "task_missing_data_folder": (TEXT + "eval: {tasks: {names: [piqa], data: harness-data}}\n", "eval.tasks.data: got"),
    "task_data_is_a_file": (TEXT + "eval: {tasks: {names: [piqa], data: aux/list.json}}\n", "not a folder"),
    "task_max_len_zero": (TEXT + "eval: {tasks: {names: [piqa], max_len: 0}}\n", "eval.tasks.max_len: got 0; allowed: 16..1,048,576"),
    "eval_mmlu_section_is_gone": (TEXT + "eval: {mmlu: {enabled: true}}\n", "eval.mmlu: unknown key"),
}


def gatesweep(*args, cwd, env=ENV, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def fixtures(where: Path) -> None:
    """Folders and files some cases point at (relative to the case files)."""
    (where / "aux" / "empty").mkdir(parents=True)
    (where / "aux" / "empty" / "notes.bin").write_bytes(b"\x00")
    (where / "aux" / "mixed").mkdir()
    (where / "aux" / "mixed" / "a.txt").write_text("some text")
    (where / "aux" / "mixed" / "b.csv").write_text("text\nsome text\n")
    (where / "aux" / "list.json").write_text("[1, 2, 3]")
    (where / "aux" / "my (1).txt").write_text("some text " * 100)


def nothing_written(root: Path) -> None:
    leftovers = {p.name for p in root.rglob("*") if p.name in ("mlflow.db", "runs", "mlruns")}
    assert not leftovers, f"wrote {leftovers}"


def test_the_table_has_at_least_60_cases():
    assert len(FILES) + len(OVERRIDES) + len(LAUNCHES) >= 60


def test_validate_refuses_every_hostile_file_with_the_field_and_no_traceback(tmp_path):
    """One `gatesweep validate` process for every file, run from another folder (relative paths
    are relative to each file's folder, not to the working directory)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    fixtures(cases)
    paths = {}
    for name, (content, _) in FILES.items():
        content = content() if callable(content) else content
        path = cases / f"{name}.yaml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths[name] = path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    t0 = time.perf_counter()
    out = gatesweep("validate", *map(str, paths.values()), cwd=elsewhere)
    assert time.perf_counter() - t0 < 60
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    assert not out.stdout.strip(), f"accepted: {out.stdout}"
    starts = sorted((out.stderr.find(f"gatesweep: error: {p}:"), name) for name, p in paths.items())
    missing = [name for pos, name in starts if pos < 0]
    assert not missing, f"not reported: {missing}\n{out.stderr[-3000:]}"
    blocks = {name: out.stderr[pos:nxt] for (pos, name), (nxt, _) in zip(starts, starts[1:] + [(len(out.stderr), "")])}
    wrong = {name: blocks[name][:600] for name, (_, expected) in FILES.items() if expected not in blocks[name]}
    assert not wrong, "\n\n".join(f"{k}: expected {FILES[k][1]!r} in\n{v}" for k, v in wrong.items())
    nothing_written(tmp_path)


# `gatesweep train FILE --set ...`: (id, extra CLI arguments, expected text)
OVERRIDES = [
    ("set_lr_nan_string", ["--set", "train.lr=nan"], "train.lr: got 'nan'; expected a number"),
    ("set_lr_inf", ["--set", "train.lr=.inf"], "train.lr: got inf; expected a finite number"),
    ("set_seed_beyond_64_bits", ["--set", "train.seed=99999999999999999999"], "train.seed: got 99999999999999999999; allowed: 0..2**63-1"),
    ("set_seq_len_1e20", ["--set", "data.seq_len=1e20"], "data.seq_len: got '1e20'; expected an integer"),
    ("set_steps_list", ["--set", "train.steps=[1, 2]"], "train.steps: got [1, 2]; expected an integer"),
    ("set_empty_experiment", ["--set", "tracking.experiment="], "tracking.experiment: got ''"),
    ("set_relative_source", ["--set", "data.source=missing.txt"], "missing.txt': no such file or folder"),
    ("set_gate_scalar", ["--set", "model.gate=G1"], "model.gate: got 'G1'; expected a mapping"),
    ("set_ruler_batch_zero", ["--set", "eval.ruler.batch_size=0"], "eval.ruler.batch_size: got 0; allowed: 1..65,536"),
    ("set_betas_above_one", ["--set", "train.betas=[0.9, 1.5]"], "train.betas: got [0.9, 1.5]"),
    (
        "set_deepspeed_batch",
        ["--set", "deepspeed.extra.gradient_accumulation_steps=4"],
        "deepspeed.extra.gradient_accumulation_steps: is set from",
    ),
    ("set_non_string_value_key", ["--set", "deepspeed.extra={1: 2}"], "deepspeed.extra: has the key 1 (int)"),
    ("flag_empty_experiment", ["--experiment", ""], "--experiment: got ''; allowed: 1-500 characters"),
    ("flag_experiment_spaces", ["--experiment", " padded "], "--experiment: got ' padded '"),
]


@pytest.mark.parametrize("name, args, expected", OVERRIDES, ids=[c[0] for c in OVERRIDES])
def test_train_refuses_hostile_overrides(tmp_path, monkeypatch, capsys, name, args, expected):
    from orchestrator.cli.main import main
    from orchestrator.trial import run as trial

    def accepted(*a, **k):
        raise AssertionError(f"{name} was accepted and would train")

    monkeypatch.setattr(trial, "run_trial", accepted)
    monkeypatch.chdir(tmp_path)
    code = main(["train", EXAMPLE, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err, err
    nothing_written(tmp_path)


def closed_port() -> int:
    """A port on 127.0.0.1 that nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# `gatesweep run/train/plan` as a user runs them: (id, argument builder, expected text)
LAUNCHES = [
    (
        "run_unreachable_tracking_server",
        lambda d: ["run", QUICK, "--tracking-uri", f"http://127.0.0.1:{closed_port()}"],
        "cannot reach the MLflow tracking server at http://127.0.0.1:",
    ),
    (
        "run_unreachable_ray_address",
        lambda d: ["run", QUICK, "--address", f"127.0.0.1:{closed_port()}"],
        "--address: cannot reach the Ray cluster at 127.0.0.1:",
    ),
    ("run_address_without_port", lambda d: ["run", QUICK, "--address", "headnode"], "--address: got 'headnode'; expected HOST:PORT"),
    ("run_address_bad_port", lambda d: ["run", QUICK, "--address", "127.0.0.1:99999"], "--address: got '127.0.0.1:99999'"),
    (
        "run_tracking_uri_text_file",
        lambda d: ["run", QUICK, "--tracking-uri", f"sqlite:///{write(d / 'notes.db', 'not a database')}"],
        "is not a SQLite database",
    ),
    (
        "run_more_gpus_than_here",
        lambda d: ["run", write(d / "gpus.yaml", SWEEP + "resources: {gpus_per_worker: 64}\n")],
        "a trial needs 64 GPUs",
    ),
    (
        "run_hub_data_offline",
        lambda d: ["run", write(d / "hub.yaml", SWEEP.replace("bigram-backcopy", "'hf:roneneldan/TinyStories'"))],
        "the Hugging Face Hub is off",
    ),
    ("run_alias_bomb", lambda d: ["run", write(d / "bomb.yaml", alias_bomb())], "alias bomb"),
    ("plan_alias_bomb", lambda d: ["plan", write(d / "bomb.yaml", alias_bomb())], "alias bomb"),
    ("plan_nan_in_grid", lambda d: ["plan", write(d / "nan.yaml", SWEEP + "grid: {train.lr: [.nan]}\n")], "grid.train.lr[0]: got nan"),
    (
        "train_unreachable_tracking_server",
        lambda d: ["train", EXAMPLE, "--tracking-uri", f"http://127.0.0.1:{closed_port()}"],
        "cannot reach the MLflow tracking server",
    ),
    (
        "train_relative_source_beside_the_file",
        lambda d: ["train", write(d / "sub" / "t.yaml", TRIAL + "data: {source: corpus.txt}\n")],
        "sub/corpus.txt': no such file or folder",
    ),
    (
        "run_huge_grid_from_a_pipe",
        lambda d: ["run", write(d / "big.yaml", SWEEP + f"grid: {{train.seed: {list(range(700))}}}\n")],
        "700 trials; pass --yes",
    ),
    ("validate_a_device", lambda d: ["validate", "/dev/zero"], "/dev/zero: is not a regular file"),
    ("validate_a_folder", lambda d: ["validate", str(d / "sub")], "is a folder, expected a YAML file"),
]


@pytest.mark.parametrize("name, build, expected", LAUNCHES, ids=[c[0] for c in LAUNCHES])
@pytest.mark.slow
def test_launch_refuses_before_anything_is_written(tmp_path, name, build, expected):
    (tmp_path / "sub").mkdir()
    t0 = time.perf_counter()
    out = gatesweep(*build(tmp_path), cwd=tmp_path, timeout=60)
    assert time.perf_counter() - t0 < 30, "refused quickly (no Ray started, no 5-minute wait)"
    assert out.returncode == 2, out.stdout + out.stderr
    assert expected in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    nothing_written(tmp_path)


def test_an_unreadable_record_of_a_previous_trial_is_a_user_error(tmp_path, monkeypatch, capsys):
    from orchestrator.cli.main import main
    from orchestrator.cli.train import load_trial_config

    monkeypatch.chdir(tmp_path)
    record = tmp_path / "runs" / f"train-{load_trial_config(EXAMPLE, []).config_hash()}" / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert main(["train", EXAMPLE]) == 2
    assert "the previous trial's record cannot be read" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


# ---- what must still be accepted ---------------------------------------------------------
def test_relative_paths_are_made_absolute_against_the_file(tmp_path, monkeypatch):
    from orchestrator.cli.sweepfile import load_and_expand
    from orchestrator.cli.train import load_trial_config

    data = tmp_path / "project"
    (data / "corpus").mkdir(parents=True)
    (data / "corpus" / "a.txt").write_text("to be or not to be " * 200)
    sweep = data / "s.yaml"
    sweep.write_text(
        "name: rel\nbase: {model: {size: tiny}, data: {source: corpus/a.txt}}\n"
        "grid: {data.source: [corpus/a.txt, corpus], train.seed: [0]}\n"
        "exclude: [{data.source: corpus}]\n"
    )
    trial = data / "t.yaml"
    trial.write_text("model: {size: tiny}\ndata: {source: corpus}\neval: {ppl_sets: [corpus/a.txt]}\n")
    monkeypatch.chdir(tmp_path)  # another folder than the files'
    spec, e = load_and_expand(sweep)
    assert [t.config.data.source for t in e.trials] == [str(data / "corpus" / "a.txt")]
    cfg = load_trial_config(str(trial), [])
    assert cfg.data.source == str(data / "corpus") and cfg.eval.ppl_sets == [str(data / "corpus" / "a.txt")]
    monkeypatch.chdir(data / "corpus")  # --set values are relative to the working directory
    cfg = load_trial_config(str(trial), ["data.source=a.txt"])
    assert cfg.data.source == str(data / "corpus" / "a.txt")


def test_the_stored_copy_of_a_launched_sweep_resolves_against_the_launched_file(tmp_path):
    """`gatesweep resume NAME` reads runs/sweeps/NAME/sweep.yaml; its relative paths are the
    launched file's (state.json names it), so the trials and their hashes are the same."""
    from orchestrator.cli.sweepfile import load_and_expand

    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("to be or not to be " * 200)
    text = "name: rel\nbase: {model: {size: tiny}, data: {source: a.txt}}\n"
    (project / "s.yaml").write_text(text)
    state = tmp_path / "runs" / "sweeps" / "rel"
    state.mkdir(parents=True)
    (state / "sweep.yaml").write_text(text)
    (state / "state.json").write_text(json.dumps({"source": str(project / "s.yaml")}))
    launched = load_and_expand(project / "s.yaml")[1].trials
    stored = load_and_expand(state / "sweep.yaml")[1].trials
    assert [t.config_hash for t in stored] == [t.config_hash for t in launched]
    assert stored[0].config.data.source == str(project / "a.txt")


def test_yaml_merge_keys_and_shipped_files_still_load(tmp_path):
    f = tmp_path / "merge.yaml"
    f.write_text("name: merge\nbase:\n  <<: {model: {size: tiny}}\n  data: {source: bigram-backcopy}\n")
    shipped = sorted((ROOT / "sweeps").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))
    out = gatesweep("validate", str(f), *map(str, shipped), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("valid") == len(shipped) + 1


def test_every_numeric_limit_message_names_the_range():
    from gatedmodels.typedconfig import ConfigError
    from orchestrator.spec.trial import TrialConfig

    with pytest.raises(ConfigError) as err:
        TrialConfig.from_dict({"train": {"steps": 0, "keep_checkpoints": 5000, "threads": -1}, "eval": {"batches": 0}})
    text = str(err.value)
    for part in (
        "train.steps: got 0; allowed: 1..100,000,000",
        "train.keep_checkpoints: got 5000; allowed: 1..1000",
        "train.threads: got -1; allowed: 0..4096",
        "eval.batches: got 0; allowed: 1..100,000",
    ):
        assert part in text
    assert text.count("train.steps") == 1, "a bound is reported once"


# ---- preflight, against real local sockets ---------------------------------------------
SEARCH = "/api/2.0/mlflow/experiments/search"  # what MlflowClient.search_experiments calls


class _Handler(http.server.BaseHTTPRequestHandler):
    status: ClassVar[dict[str, int | tuple[int, bytes]]] = {SEARCH: 200}
    """path -> HTTP status (the body: an empty search result for 200, else an error page) or (status, body)."""

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        entry = self.status.get(self.path.split("?")[0], 404)
        code, body = entry if isinstance(entry, tuple) else (entry, b"{}" if entry == 200 else b"no")
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    servers = []

    def start(status: dict[str, int], tls: tuple[Path, Path] | None = None):
        handler = type("H", (_Handler,), {"status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:  # (certificate, key)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_tracking_server_reachable_or_not(http_server):
    from orchestrator.launch.preflight import check_tracking_uri

    check_tracking_uri(http_server({SEARCH: 200}))
    check_tracking_uri(http_server({SEARCH: 200}) + "/")
    # /health alone proves nothing (an artifacts-only server answers it, and so does a proxy): the
    # check is the call a trial makes, through MLflow's own client
    with pytest.raises(UserError, match=f"does not answer like an MLflow tracking server \\(HTTP 404 for {SEARCH}\\)"):
        check_tracking_uri(http_server({"/health": 200}))
    for code in (401, 403):
        with pytest.raises(UserError, match=f"refused the credentials \\(HTTP {code}\\); set MLFLOW_TRACKING_TOKEN"):
            check_tracking_uri(http_server({"/health": 200, SEARCH: code}))
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="does not answer like an MLflow tracking server \\(HTTP 502"):
        check_tracking_uri(http_server({SEARCH: 502}))  # a proxy without its backend: said once, not retried
    assert time.perf_counter() - t0 < 3
    with pytest.raises(UserError, match="does not answer like an MLflow tracking server \\(HTTP 404"):
        check_tracking_uri(http_server({}))
    with pytest.raises(UserError) as err:  # a web server that answers anything with a page
        check_tracking_uri(url := http_server({SEARCH: (200, b"<html>welcome</html>")}))
    assert str(err.value) == (
        f"the MLflow tracking URI {url} cannot be used (API request to endpoint was successful but the response body "
        "was not in a valid JSON format); check the URI and MLflow's settings for it"
    )
    port = closed_port()
    with pytest.raises(UserError, match=f"cannot reach the MLflow tracking server at http://127.0.0.1:{port} \\(Connection refused\\)"):
        check_tracking_uri(f"http://127.0.0.1:{port}")
    with pytest.raises(UserError, match="cannot reach the MLflow tracking server at http://\\*\\*\\*@127.0.0.1") as err:
        check_tracking_uri(f"http://user:secret@127.0.0.1:{port}")  # credentials never shown
    assert "secret" not in str(err.value) and "\n" not in str(err.value)


def test_a_dead_port_fails_at_once_whatever_the_clients_retries(monkeypatch):
    """With MLflow's default retries (7, exponential backoff from 2 s: minutes), or whatever the
    user set, the preflight makes one attempt: a dead port is reported at once."""
    from orchestrator.launch.preflight import check_tracking_uri

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    port = closed_port()
    with pytest.raises(UserError, match="Connection refused"):
        check_tracking_uri(f"http://127.0.0.1:{port}", timeout=600)  # the first call imports MLflow's client
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="Connection refused"):
        check_tracking_uri(f"http://127.0.0.1:{port}", timeout=600)
    assert time.perf_counter() - t0 < 1.5, "one attempt, no backoff"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7", "the client's own settings are restored"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "120"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_settings_are_mlflows_own(http_server, tmp_path, monkeypatch):
    """A self-signed https server: refused in one line naming the TLS failure and the setting to
    use; accepted once MLFLOW_TRACKING_SERVER_CERT_PATH names its certificate."""
    from orchestrator.launch.preflight import check_tracking_uri

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    url = http_server({SEARCH: 200}, tls=(cert, key))
    monkeypatch.delenv("MLFLOW_TRACKING_SERVER_CERT_PATH", raising=False)
    with pytest.raises(UserError) as err:
        check_tracking_uri(url)
    message = str(err.value)
    assert message.startswith(f"cannot reach the MLflow tracking server at {url} (TLS: ") and "\n" not in message
    assert "self-signed certificate" in message and "set MLFLOW_TRACKING_SERVER_CERT_PATH" in message
    monkeypatch.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(cert))
    check_tracking_uri(url)


@pytest.mark.slow
def test_a_real_mlflow_server_with_basic_auth_refuses_and_accepts(tmp_path, monkeypatch):
    """`mlflow server --app-name basic-auth` (MLflow's own auth app): no credentials and a wrong
    password are refused in one line with the URI redacted; the right ones, in the URI or in
    MLflow's environment variables, pass. What is sent is decided by MLflow's client."""
    from orchestrator.launch.preflight import check_tracking_uri
    from tests.services.mlflow_server import MlflowServer, basic_auth_config

    password = "pre-flight-0"
    env = basic_auth_config(tmp_path, password=password, database_uri=f"sqlite:///{tmp_path / 'auth.db'}")
    server = MlflowServer(tmp_path, app_name="basic-auth", env=env)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.mlflow/credentials of the machine's user
    server.start()
    try:
        host = f"127.0.0.1:{server.port}"
        wait = 60  # the auth app hashes passwords (PBKDF2): seconds per request on 2 busy cores
        with pytest.raises(UserError) as err:
            check_tracking_uri(f"http://{host}", timeout=wait)
        assert str(err.value) == (
            f"the MLflow tracking server at http://{host} refused the credentials (HTTP 401); set MLFLOW_TRACKING_TOKEN, "
            "or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_AUTH for an auth plugin)"
        )
        with pytest.raises(UserError, match="refused the credentials \\(HTTP 401\\)") as err:
            check_tracking_uri(f"http://admin:wrong-password@{host}", timeout=wait)
        assert "wrong-password" not in str(err.value) and f"http://***@{host}" in str(err.value)
        check_tracking_uri(f"http://admin:{password}@{host}", timeout=wait)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        check_tracking_uri(f"http://{host}", timeout=wait)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "wrong-password")
        with pytest.raises(UserError, match="refused the credentials \\(HTTP 401\\)"):
            check_tracking_uri(f"http://{host}", timeout=wait)
    finally:
        server.stop()


def test_tracking_server_that_never_answers_times_out():
    from orchestrator.launch.preflight import check_tracking_uri

    with socket.socket() as listener:  # accepts connections (the backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        t0 = time.perf_counter()
        with pytest.raises(UserError, match="no answer within 0.5 s"):
            check_tracking_uri(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.5)
        assert time.perf_counter() - t0 < 5


def test_sqlite_store_checks(tmp_path):
    from orchestrator.launch.preflight import check_tracking_uri

    check_tracking_uri(f"sqlite:///{tmp_path / 'new.db'}")
    (tmp_path / "empty.db").write_bytes(b"")
    check_tracking_uri(f"sqlite:///{tmp_path / 'empty.db'}")
    real = tmp_path / "real.db"
    sqlite3.connect(real).execute("create table t (x)").connection.close()
    check_tracking_uri(f"sqlite:///{real}")
    (tmp_path / "text.db").write_text("name: not a database\n")
    with pytest.raises(UserError, match="text.db is not a SQLite database"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'text.db'}")
    (tmp_path / "bin.db").write_bytes(os.urandom(64))
    with pytest.raises(UserError, match="bin.db is not a SQLite database"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'bin.db'}")
    (tmp_path / "folder.db").mkdir()
    with pytest.raises(UserError, match="is not a file"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'folder.db'}")
    with pytest.raises(UserError, match="does not exist"):
        check_tracking_uri(f"sqlite:///{tmp_path / 'no' / 'such' / 'm.db'}")


def test_ray_address_checks():
    from orchestrator.launch.preflight import check_ray_address

    check_ray_address(None)
    check_ray_address("auto")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        check_ray_address(f"127.0.0.1:{port}")
        check_ray_address(f"ray://127.0.0.1:{port}")
    port = closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(UserError, match=f"--address: cannot reach the Ray cluster at {address}"):
            check_ray_address(address)
    for address in ("127.0.0.1", "127.0.0.1:abc", "127.0.0.1:0", "http://127.0.0.1:6379"):
        with pytest.raises(UserError, match="--address: got"):
            check_ray_address(address)
