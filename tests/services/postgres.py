"""A real PostgreSQL on 127.0.0.1 (Debian's `postgresql` package): a cluster made with `initdb` in
a temporary folder, run by an unprivileged system user (PostgreSQL refuses to run as root),
listening on a free port and on a unix socket in that folder, started in its own process group
and stopped by its pid (`pg_ctl stop -m fast`, then SIGKILL of the group).

The superuser has a recognisable password (`PASSWORD`) and connections over TCP need it
(scram-sha-256), so a test can check that the password never reaches a message or a log.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.service import ManagedProcess

from .ports import free_port

USER = "gatesweep-pg"
"""The system user that owns the data folder and runs the server when the tests run as root."""
DB_USER = "mlflow"
PASSWORD = "gatesweep-pg-secret-Hx4k9"
"""Recognisable: a test that finds it in a message, param, tag or log fails."""
APT_PACKAGE = "postgresql"


def bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/N/bin holding initdb, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0
    )
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why no PostgreSQL can be started here (None: it can)."""
    if bin_dir() is None:
        return f"PostgreSQL is not installed (apt-get install -y {APT_PACKAGE})"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL cannot be run as an unprivileged user"
    return None


def _ensure_user() -> str | None:
    """The user to run PostgreSQL as (None: the current, unprivileged one)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", USER],
            check=True,
            capture_output=True,
        )
    return USER


class Postgres(ManagedProcess):
    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.proc = None
        self.root: Path | None = None
        self.user = _ensure_user()
        self.bin = bin_dir()
        assert self.bin is not None, unavailable()

    # ---- paths and URIs ---------------------------------------------------------------------
    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.root is not None
        return self.root / "sock"

    def uri(self, database: str, *, driver: str = "psycopg", password: str | None = PASSWORD) -> str:
        """SQLAlchemy URI of a database over TCP on 127.0.0.1 (`postgresql+psycopg://...`)."""
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        auth = f"{DB_USER}:{password}" if password is not None else DB_USER
        return f"{scheme}://{auth}@127.0.0.1:{self.port}/{database}"

    def _as_user(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    # ---- life ---------------------------------------------------------------------------------
    def init(self) -> Postgres:
        """initdb a new cluster in a fresh temporary folder (owned by the server's user)."""
        self.root = Path(tempfile.mkdtemp(prefix="gatesweep-pg-"))
        self.socket_dir.mkdir()
        pwfile = self.root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self.user:
            for p in (self.root, self.socket_dir, pwfile):
                shutil.chown(p, self.user, self.user)
        out = subprocess.run(
            self._as_user(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    DB_USER,
                    f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        pwfile.unlink()
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
        with open(self.data / "postgresql.conf", "a") as fh:
            fh.write(
                "\n# gatesweep tests\nlisten_addresses = '127.0.0.1'\n"
                f"port = {self.port}\nunix_socket_directories = '{self.socket_dir}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"
                "shared_buffers = 32MB\nlog_min_messages = warning\n"
            )
        return self

    name = "postgres"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def command(self) -> list[str]:
        return self._as_user([str(self.bin / "postgres"), "-D", str(self.data)])

    def ready(self) -> bool:
        probe = [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def start(self) -> Postgres:
        """Start the server (in its own process group) and wait until it takes connections."""
        if self.root is None:
            self.init()
        self.launch(60)
        return self

    def stop(self) -> None:
        """`pg_ctl stop -m fast`, then SIGKILL of the server's process group."""
        if not self.running():
            return
        subprocess.run(
            self._as_user([str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "20"]), capture_output=True
        )
        self.reap(20)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop, stay down `down_s` seconds, start again (same data, same port)."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def destroy(self) -> None:
        self.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    # ---- databases ----------------------------------------------------------------------------
    def sql(self, statement: str, database: str = "postgres") -> list:
        """Run one statement (autocommit) over TCP; its rows (empty for a command)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=DB_USER, password=PASSWORD, dbname=database, autocommit=True) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """A new database (a copy of `template` when given); its SQLAlchemy URI."""
        self.sql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.uri(name)
