"""What the tests share: a tiny sweep builder (`sweeps`), one CLI runner (`cli`), one `wait_until`
(`wait`), MLflow look-ups (`mlflow`), the one tiny `ModelConfig` builder (`models.tiny_config`),
model and record builders (`interop`, `records`), secrets checks (`secrets`) and the
managed-service base of tests/services (`service`).

No test module imports another test module: whatever two of them need lives here."""
