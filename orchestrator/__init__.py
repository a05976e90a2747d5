"""orchestrator: sweep files, trials (DeepSpeed training + evaluation), MLflow tracking, Ray Tune launch, CLI."""

__version__ = "0.1.0"
