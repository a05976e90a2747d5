"""Real services the tests start on 127.0.0.1 and stop by process id: an S3-compatible object
store (moto's server), and (see the modules) PostgreSQL and `mlflow server`. The session fixtures
that hand them to tests are in tests/conftest.py; a test never imports this package's fixtures."""
