"""Downstream evaluations of a trained model: harness tasks, RULER-style long context, held-out perplexity, probes.

Downstream evaluations of a trained model: lm-evaluation-harness tasks (`harness`: the model
as a harness LM and the runner; `harness_data`: the tasks' offline data), a RULER-style synthetic
long-context suite (`ruler`), held-out perplexity (`heldout`), and the language-model primitives
they share (`lm`); `mmlu_subjects` names MMLU's 57 subjects (the harness's `mmlu_<subject>` tasks);
`suite` runs the benchmarks a trial asks for. The reference MMLU the harness path is checked
against lives in the tests (tests/orchestrator/mmlu_reference).

A model is any callable `model(input_ids_BT) -> logits_BTV` (e.g. `gatedmodels.GatedTransformer`);
a tokenizer is `orchestrator.data.tokenizers.Tokenizer`. Every sequence fed to the model starts
with the tokenizer's BOS id, the project's convention.
"""
