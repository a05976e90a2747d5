"""Prepare a sweep's text data in the driver, before any trial starts.

Every distinct data section of the sweep's trials (and the held-out sets its evaluations read,
`eval.ppl_sets`, encoded with each trial's tokenizer) is tokenized into the shared cache once, with a
progress bar on a terminal. A source that cannot be read (empty, binary, too small, a missing
column, a file changing while read) stops the launch with one line naming the source, before
anything is written. Trials then open the cache (a second trial's data set-up is a memory map).

Only for a local cluster: on `--address` the data paths are the nodes', so trials prepare it
there, one builder per cache folder (`gatesweep data prepare` does it ahead of time).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from orchestrator.core.errors import UserError
from orchestrator.data.prepare import DataSettings, prepare
from orchestrator.data.sources import DataUnavailable


def prepare_sweep_data(configs, *, say: Callable[[str], None], source=None) -> None:
    """Prepare every distinct corpus the trials read; UserError naming every one that cannot be."""
    prepared: dict = {}  # settings -> Prepared, or None when it cannot be
    problems: list[str] = []
    for cfg in configs:
        if cfg.data.source == "bigram-backcopy":
            continue
        settings = DataSettings.of(cfg.data)
        wanted = [(settings, None)] + [(DataSettings(s, settings.tokenizer, settings.val_fraction), settings) for s in cfg.eval.ppl_sets]
        for want, trial_settings in wanted:
            field = "data" if trial_settings is None else "eval.ppl_sets"
            if want not in prepared:
                prepared[want] = None
                try:
                    tok = prepare(trial_settings).tokenizer if trial_settings is not None else None
                    prepared[want] = prepare(want, tok, progress=sys.stderr.isatty(), say=say)
                    say(_summary(want, prepared[want]))
                except DataUnavailable as err:
                    problems.append(f"  {field} (source {want.source}, tokenizer {want.tokenizer}): {err}")
            found = prepared[want]
            if found is None:
                break
            splits = ("train", "val") if trial_settings is None else ("val",)
            short = [s for s in splits if found.meta["splits"][s]["tokens"] < cfg.data.seq_len]
            if short:
                problem = (
                    f"  {field} (source {want.source}, tokenizer {want.tokenizer}): {found.meta['splits']['train']['tokens']:,} "
                    f"training and {found.meta['splits']['val']['tokens']:,} held-out tokens cannot fill one window of "
                    f"data.seq_len={cfg.data.seq_len}; use a larger corpus, a larger val_fraction or a shorter seq_len"
                )
                if problem not in problems:
                    problems.append(problem)
            longest = max(cfg.eval.length.lengths, default=0) if trial_settings is None else 0
            if longest > found.meta["splits"]["val"]["tokens"]:
                problem = (
                    f"  eval.length.lengths (source {want.source}, tokenizer {want.tokenizer}): {found.meta['splits']['val']['tokens']:,} "
                    f"held-out tokens cannot fill one window of {longest}; use shorter lengths, a larger corpus or a larger val_fraction"
                )
                if problem not in problems:
                    problems.append(problem)
    if problems:
        where = f"{source}: " if source else ""
        raise UserError(f"{where}{len(problems)} data source(s) cannot be used; nothing was launched\n" + "\n".join(problems))


def _summary(want, prepared) -> str:
    split, built = prepared.meta["splits"], prepared.meta["built"]
    how = f"prepared in {built['seconds']:.1f} s at {built['tokens_per_s'] / 1e6:.1f} M tokens/s" if prepared.fresh else "cached"
    return (
        f"data {want.source} ({want.tokenizer}): {split['train']['tokens']:,} training and {split['val']['tokens']:,} "
        f"held-out tokens, {prepared.meta['documents']:,} documents ({how}: {prepared.folder})"
    )
