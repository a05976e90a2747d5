"""Hugging Face interop: export a gatesweep model, import a Hugging Face one, probe either.

- `hf_layouts`: the weight layouts (gatesweep, Qwen3, Qwen3-MoE, Qwen3-Next, the paper's gated
  Qwen3) and the mapping both ways, refusing what one side cannot compute;
- `weights_files`: safetensors through the `safetensors` package, headers checked before any tensor is read;
- `outdir`: the `--out` folder, written whole through a temporary sibling, never one gatesweep did not write;
- `tokenizer_files`: tokenizer files for transformers (the byte tokenizer too) and back;
- `locate`: what a SOURCE / MODEL argument names (run id, trial folder, model.pt, HF folder,
  gatesweep export, Hub name), loaded as a model config and a state dict;
- `export`, `import_`: the two directions, as folders; `probe`: the paper's probes per layer and head.

transformers itself is not needed at run time (a test dependency only): configs are plain JSON,
weights are read and written by the `safetensors` package.
"""

from .errors import InteropError

__all__ = ["InteropError"]
