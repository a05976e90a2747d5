"""Benchmarks register like gates and attention kinds: `run_benchmarks` runs every registered
kind named in `which`, in registry order, and on synthetic data (no tokenizer) only those that
need no text."""

from __future__ import annotations

import torch

from orchestrator.evals import benchmarks, suite


def test_run_benchmarks_walks_the_registry(monkeypatch):
    ran = []

    def kind(name):
        def run(b: benchmarks.Bench) -> dict[str, float]:
            ran.append(name)
            return {f"{name}/x": float(len(ran))}

        return run

    monkeypatch.setattr(
        benchmarks,
        "BENCHMARK_KINDS",
        {"a": benchmarks.Benchmark(kind("a"), text=False), "b": benchmarks.Benchmark(kind("b")), "c": benchmarks.Benchmark(kind("c"))},
    )
    monkeypatch.setattr(suite, "BENCHMARK_KINDS", benchmarks.BENCHMARK_KINDS)
    model = torch.nn.Linear(2, 2).train()
    assert suite.run_benchmarks(model, object(), None, device="cpu", which=("c", "a")) == {"a/x": 1.0, "c/x": 2.0}
    assert ran == ["a", "c"] and not model.training
    ran.clear()
    assert suite.run_benchmarks(model, None, None, device="cpu", which=("a", "b", "c")) == {"a/x": 1.0}, "no tokenizer: text kinds skip"
    assert suite.run_benchmarks(model, object(), None, device="cpu", which=()) == {}


def test_every_kind_is_a_default_and_the_hash_is_computed_only_when_needed():
    assert set(suite.BENCHMARKS) == set(benchmarks.BENCHMARK_KINDS) == {"length", "tasks", "ruler", "ppl"}
    b = benchmarks.Bench(torch.nn.Linear(2, 2), None, None, "cpu")
    assert "weights" not in b.__dict__
    assert b.weights == benchmarks.weights_hash(b.model) and len(b.weights) == 24
