"""The command table: every `gatesweep` command, the module that holds it and its line of help.

A command's module (`add_parser(subparsers)` and `run(args) -> int`) is imported when the command
is used (`orchestrator.cli.main`): `gatesweep --help` reads this table only, and `gatesweep
validate` loads validation, not the launcher, the report or the model. A command's parser takes
its help line from here, so the short listing and the full one say the same. A new command: its
module and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One command: the module of `orchestrator.cli` that holds it, and its one line of help."""

    module: str
    help: str


COMMAND_TABLE: dict[str, Command] = {
    "validate": Command("validate", "check sweep or trial files without launching anything"),
    "plan": Command("plan", "show the trials a sweep would run (dry run)"),
    "run": Command("run", "launch a sweep on Ray (local or --address)"),
    "resume": Command("resume", "continue an interrupted sweep"),
    "train": Command("train", "train one trial (DeepSpeed, no Ray) and log it to MLflow"),
    "eval": Command("eval", "run harness tasks (HellaSwag, MMLU, ...), RULER-style, perplexity and longer lengths on a finished trial"),
    "report": Command("report", "compare a sweep's runs: tables, seed statistics, plots, HTML report"),
    "ui": Command("ui", "start the MLflow UI on 127.0.0.1 over the sweep store"),
    "schema": Command("schema", "print the JSON Schema of sweep files (for editor completion)"),
    "data": Command(
        "data", "list data sources, benchmark data, tokenizers and prepared corpora; `data prepare` tokenizes ahead of a sweep"
    ),
    "export": Command(
        "export", "write a trained model as a Hugging Face folder (Qwen3 / Qwen3-MoE / Qwen3-Next / Laguna / the paper's layout)"
    ),
    "import": Command(
        "import_", "turn a Hugging Face model (Qwen3 / Qwen3-MoE / Qwen3-Next / the paper's layout) into a gatesweep model folder"
    ),
    "probe": Command("probe", "first-token attention per layer and head, sink ratio, massive activations, gate scores of any model"),
}
"""Command name -> its `Command`, in the order `gatesweep --help` lists them."""
