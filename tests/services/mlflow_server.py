"""A real `mlflow server` on 127.0.0.1, started in its own process group and stopped by its pid.

Any backend store URI (SQLite by default, `postgresql+psycopg://...`), artifacts proxied to a
local folder or an `s3://` destination (`--artifacts-destination`: clients upload through the
server and need no object-store credentials of their own), MLflow's `basic-auth` app
(`basic_auth_config` writes its settings file), extra environment for the server only.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.service import ManagedProcess

from .ports import free_port

START_TIMEOUT_S = 180.0
"""The auth app migrates a second database: a minute on 2 busy cores."""


def basic_auth_config(root: Path, *, password: str, database_uri: str, admin: str = "admin") -> dict[str, str]:
    """Write MLflow's auth settings (`auth.ini`) under `root`: default permission READ, the admin
    user `admin` with `password`, the users' database at `database_uri`. The server's env."""
    Path(root).mkdir(parents=True, exist_ok=True)
    ini = Path(root) / "auth.ini"
    ini.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = {database_uri}\n"
        f"admin_username = {admin}\nadmin_password = {password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    return {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": "tests-only"}


class MlflowServer(ManagedProcess):
    name = "mlflow server"

    def __init__(
        self,
        root: Path,
        port: int | None = None,
        *,
        backend_store_uri: str | None = None,
        artifacts_destination: str | None = None,
        app_name: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.root, self.port = Path(root), port or free_port()
        self.backend_store_uri = backend_store_uri or f"sqlite:///{self.root / 'server.db'}"
        self.artifacts_destination = artifacts_destination or str(self.root / "artifacts")
        self.app_name = app_name
        self.args, self.env = tuple(args), dict(env or {})
        self.proc = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def command(self) -> list[str]:
        cmd = [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            self.backend_store_uri,
            "--artifacts-destination",
            self.artifacts_destination,
        ]
        if self.app_name:
            cmd += ["--app-name", self.app_name]
        return [*cmd, *self.args]

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "1",
            **self.env,
        }

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.uri}/health", timeout=2)
            return True
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = START_TIMEOUT_S) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self.launch(timeout, interval=0.3)
        return self

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 20 s."""
        self.terminate(20)

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()
