"""What a user writes: trial configs, sweep specs and their expansion, bounded YAML, paths, the JSON Schema.

What a user writes: typed trial configs (one module per section: data, train, evaluation; `trial`
assembles them and hashes them), sweep specs (`sweep`), their expansion into named trials
(`expand`), strict and bounded YAML loading (`files`), local paths (`paths`), the JSON Schema
(`schema`). Torch-free: validating a sweep imports neither torch nor Ray."""
