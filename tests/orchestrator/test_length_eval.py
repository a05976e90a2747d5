"""`eval.length`: the held-out evaluation at longer contexts than training, with RoPE as trained,
YaRN and a raised base (orchestrator/evals/length.py), in a trial and through `gatesweep eval`."""

from __future__ import annotations

import math

import pytest
import torch

from gatedmodels import GatedTransformer
from gatedmodels.typedconfig import ConfigError
from orchestrator.data import build_trial_data
from orchestrator.evals.heldout import perplexity
from orchestrator.evals.length import extended_rope, length_metrics
from orchestrator.spec.reported import _reports
from orchestrator.spec.trial import TrialConfig
from orchestrator.trial.run import TrialContext, run_trial
from tests.support.cli import CliResult, one_line_error, run_cli


def bigram_trial(**length) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "model": {"size": "bigram-1l", "n_heads": 2, "n_kv_heads": 2, "head_dim": 32, "gate": {"position": "G1"}},
            "data": {"source": "bigram-backcopy", "seq_len": 32},
            "train": {"steps": 6, "batch_size": 8, "eval_every": 0, "warmup_steps": 1},
            "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4, "length": {"batches": 1, "batch_size": 4, **length}},
        }
    )


def model_of(cfg: TrialConfig) -> GatedTransformer:
    torch.manual_seed(0)
    data = build_trial_data(cfg.data, cfg.train.seed)
    return GatedTransformer(cfg.model.replace(vocab_size=data.vocab_size)).eval()


def test_at_the_training_length_it_is_the_heldout_loss_under_every_name():
    cfg = bigram_trial(lengths=[32])
    model = model_of(cfg)
    m = length_metrics(model, cfg, device="cpu")
    data = build_trial_data(cfg.data, cfg.train.seed)
    expected = perplexity(model, data.val_batches(1, 4), data.token_bytes, device="cpu").loss
    for extend in ("none", "yarn", "base"):
        assert m[f"length_loss/{extend}/32"] == pytest.approx(expected, rel=1e-6)
        assert 0 <= m[f"length_copy/{extend}/32"] <= 1
    # excess over the Bayes-optimal loss of the same sequences: positive for an untrained model
    assert m["length_excess/none/32"] > 0.5


def test_beyond_the_training_length_the_extensions_differ_and_rope_is_restored():
    cfg = bigram_trial(lengths=[128])
    model = model_of(cfg)
    x = torch.randint(0, 60, (2, 128))
    before = model(x)
    m = length_metrics(model, cfg, device="cpu")
    assert torch.equal(model(x), before) and not model.training
    losses = {e: m[f"length_loss/{e}/128"] for e in ("none", "yarn", "base")}
    assert len(set(losses.values())) == 3, losses
    assert set(m) == {f"length_{k}/{e}/128" for k in ("loss", "copy", "excess") for e in losses} | {"eval_time_s/length"}


def test_extended_rope():
    from gatedmodels import RopeConfig

    rope = RopeConfig()
    assert extended_rope("yarn", 64, 64, rope, 1e6) == rope  # not beyond the training length
    y = extended_rope("yarn", 256, 64, rope, 1e6)
    assert (y.scaling, y.factor, y.original_max_len) == ("yarn", 4.0, 64)
    assert extended_rope("base", 256, 64, rope, 1e6).base == 1e6
    assert extended_rope("base", 256, 64, rope.replace(base=5e6), 1e6).base == 5e6  # never lowered
    assert extended_rope("none", 256, 64, rope, 1e6) == rope


def test_a_broken_model_gives_nan_not_a_crash():
    cfg = bigram_trial(lengths=[64])
    model = model_of(cfg)
    with torch.no_grad():
        model.embed.weight.fill_(float("inf"))
    m = length_metrics(model, cfg, device="cpu")
    assert math.isnan(m["length_loss/yarn/64"]) and m["length_copy/yarn/64"] == 0


def test_text_trials_report_loss_at_length_only():
    cfg = TrialConfig.from_dict(
        {
            "model": {"size": "tiny"},
            "data": {"source": "shakespeare", "seq_len": 32, "max_chars": 200_000},
            "eval": {"length": {"lengths": [96], "extend": ["yarn"], "batches": 1, "batch_size": 2}},
        }
    )
    model = model_of(cfg)
    m = length_metrics(model, cfg, device="cpu")
    assert set(m) == {"length_loss/yarn/96", "eval_time_s/length"} and m["length_loss/yarn/96"] > 0


@pytest.mark.parametrize(
    "over, message",
    [
        (
            {"model": {"size": "tiny", "position_encoding": "learned", "max_seq_len": 128}, "eval": {"length": {"lengths": [256]}}},
            "eval.length.lengths[0]: got 256; learned positions allow at most model.max_seq_len (128)",
        ),
        (
            {"model": {"size": "tiny", "position_encoding": "nope"}, "eval": {"length": {"lengths": [256]}}},
            "eval.length.extend: got ['none', 'yarn', 'base']; yarn and base extend RoPE",
        ),
        ({"eval": {"length": {"lengths": [128, 128]}}}, "eval.length.lengths: got [128, 128]; each length once"),
        ({"eval": {"length": {"lengths": [128], "extend": []}}}, "eval.length.extend: got []; allowed: one or more of none, yarn, base"),
        ({"eval": {"length": {"extend": ["yarn", "rope"]}}}, "eval.length.extend[1]: got 'rope'; allowed: none, yarn, base"),
        ({"eval": {"length": {"lengths": [1]}}}, "eval.length.lengths[0]: got 1; allowed: 2.."),
        ({"eval": {"length": {"base": 0.5}}}, "eval.length.base: got 0.5; allowed: > 1"),
    ],
)
def test_bad_length_settings_are_refused(over, message):
    with pytest.raises(ConfigError) as err:
        TrialConfig.from_dict(over)
    assert message in str(err.value)


def test_a_search_cannot_compare_a_length_metric_a_trial_does_not_report():
    cfg = bigram_trial(lengths=[128], extend=["yarn"])
    cfg = cfg.replace(train=cfg.train.replace(eval_every=0))
    assert _reports(cfg, "length_copy/yarn/128", at_every_evaluation=False) is None
    assert "length 256 with extension yarn" in _reports(cfg, "length_copy/yarn/256", at_every_evaluation=False)
    assert "extension base" in _reports(cfg, "length_loss/base/128", at_every_evaluation=False)
    text = TrialConfig.from_dict({"data": {"source": "shakespeare"}, "train": {"eval_every": 0}, "eval": {"length": {"lengths": [256]}}})
    assert _reports(text, "length_loss/yarn/256", at_every_evaluation=False) is None
    assert "not bigram-backcopy" in _reports(text, "length_copy/yarn/256", at_every_evaluation=False)


@pytest.mark.slow
def test_a_trial_logs_them_and_gatesweep_eval_adds_lengths(tmp_path, tracking_uri, capsys, monkeypatch):
    from mlflow.tracking import MlflowClient

    lines: list[str] = []
    result = run_trial(
        bigram_trial(lengths=[64, 128]), TrialContext(run_dir=tmp_path / "r", tracking_uri=tracking_uri, progress=lines.append)
    )
    m = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert {f"length_copy/{e}/{n}" for e in ("none", "yarn", "base") for n in (64, 128)} <= set(m)
    assert any(line.startswith("length 128 (4x): none loss") for line in lines), lines

    monkeypatch.chdir(tmp_path)  # in-process: what the command does, not its process

    def cli(*args: str) -> CliResult:
        return run_cli(capsys, "eval", *args, "--tracking-uri", tracking_uri)

    ok = cli(result.run_id, "--tasks", "length", "--lengths", "96,256")
    assert ok.code == 0, ok.err
    assert "length_copy/yarn/256" in ok.out
    m = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert "length_loss/base/96" in m and "length_copy/none/256" in m
    for args, message in [
        (("--tasks", "ppl"), "need a text trial (allowed here: --tasks length)"),
        (("--tasks", "length", "--lengths", "96,x"), "--lengths: got '96,x'; allowed: comma-separated whole numbers"),
        (("--tasks", "length", "--lengths", "1"), "--lengths: got '1'; allowed: lengths of 2 tokens or more"),
    ]:
        one_line_error(cli(result.run_id, *args), message)


def small_corpus(tmp_path) -> str:
    """200 documents of ~60 bytes: a held-out split (5%) of ~600 tokens."""
    import json

    docs = tmp_path / "small.jsonl"
    docs.write_text("".join(json.dumps({"text": f"doc {i}: the quick brown fox jumps over the lazy dog."}) + "\n" for i in range(200)))
    return str(docs)


def test_a_length_the_heldout_split_cannot_fill_is_skipped_and_said_so(tmp_path):
    """`gatesweep eval` on a trial whose held-out split is shorter than a length."""
    cfg = TrialConfig.from_dict(
        {
            "model": {"size": "tiny"},
            "data": {"source": small_corpus(tmp_path), "seq_len": 32},
            "eval": {"length": {"lengths": [64, 4096], "extend": ["yarn"], "batches": 1, "batch_size": 2}},
        }
    )
    said: list[str] = []
    m = length_metrics(model_of(cfg), cfg, device="cpu", progress=said.append)
    assert "length_loss/yarn/64" in m and not any("/4096" in k for k in m)
    assert any(line.startswith("length 4096: skipped (") and "cannot fill one window" in line for line in said), said


@pytest.mark.slow
def test_gatesweep_run_refuses_lengths_the_heldout_split_cannot_fill(tmp_path, capsys, monkeypatch):
    import yaml

    sweep = {
        "name": "too-long",
        "base": {
            "model": {"size": "tiny"},
            "data": {"source": small_corpus(tmp_path), "seq_len": 32},
            "train": {"steps": 2, "batch_size": 2, "eval_every": 0},
            "eval": {"batches": 1, "batch_size": 2, "probe_sequences": 2, "length": {"lengths": [64, 4096]}},
        },
    }
    f = tmp_path / "too_long.yaml"
    f.write_text(yaml.safe_dump(sweep))
    monkeypatch.chdir(tmp_path)  # refused before Ray starts: in-process
    code, out, err = run_cli(capsys, "run", f, "--yes", "--runs-dir", tmp_path / "runs")
    assert code == 2, out + err
    assert "Traceback" not in err and "nothing was launched" in err, err
    assert "eval.length.lengths" in err and "cannot fill one window of 4096" in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()
