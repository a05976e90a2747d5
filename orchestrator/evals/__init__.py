"""Downstream evaluations of a trained model: MMLU 5-shot (`mmlu`), a RULER-style synthetic
long-context suite (`ruler`), and the language-model primitives they share (`lm`).

A model is any callable `model(input_ids_BT) -> logits_BTV` (e.g. `gatedmodels.GatedTransformer`);
a tokenizer is `orchestrator.data.tokenizers.Tokenizer`. Every sequence fed to the model starts
with the tokenizer's BOS id, the project's convention.
"""
