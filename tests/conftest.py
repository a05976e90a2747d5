"""Test-wide settings: offline hub, a private cache, CPU DeepSpeed, few threads."""

from __future__ import annotations

import os
import secrets

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# One torch thread per process: the suite's processes (two pytest workers, their drivers and
# trials) share the machine's cores, and a thread more than a free core spin-waits (a 150-step
# tiny trial beside a busy worker: 1.0 s on one thread, 4-8 s on two). Trials read it
# (`trial_threads`), as torch does when it is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The Ray clusters of the run (token authentication, as gatesweep's local Ray) share one token of
# the run's own, not ~/.ray/auth_token: `ray start --head` in token mode does not create a token,
# so on a machine where no `ray.init` had run yet the tests' own heads failed to start, or not,
# by which test came first; and a test run writes nothing into the user's home.
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

import signal
import sys

import pytest

if "torch" in sys.modules and os.environ["OMP_NUM_THREADS"].isdigit():  # a plugin imported torch first
    sys.modules["torch"].set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))

# MLflow's HTTP retry settings gatesweep sets when its tracking package is first imported: set
# before any test's environment is saved, so `_environment_restored` keeps them for every test
import orchestrator.tracking.store  # noqa: F401
from orchestrator.runtime.signals import STOPPING
from tests.support import netguard
from tests.support.ray import loopback_cluster


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Tokenised corpora and bigram tables are cached per test run, not in ~/.cache. Under
    pytest-xdist the workers share one cache (the folder above each worker's own): the cache's
    lock lets one of them build a corpus while the other waits, as two trials of a sweep do."""
    if "GATESWEEP_CACHE" not in os.environ:
        base = tmp_path_factory.getbasetemp()
        shared = base.parent / "gatesweep-cache" if os.environ.get("PYTEST_XDIST_WORKER") else base / "gatesweep-cache"
        shared.mkdir(exist_ok=True)
        os.environ["GATESWEEP_CACHE"] = str(shared)
    yield


def pytest_configure(config):
    netguard.install()


@pytest.fixture(autouse=True)
def _loopback_only():
    """A test whose process tried to connect beyond loopback fails, naming where and who
    (`tests/support/netguard.py`; the attempt itself was refused)."""
    before = netguard.count()
    yield
    attempts = netguard.attempts_since(before)
    if attempts:
        pytest.fail("connected beyond loopback: " + "\n".join(attempts), pytrace=False)


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test starts from the same environment: an in-process call that sets a variable
    (`mlflow.set_tracking_uri` writes MLFLOW_TRACKING_URI into os.environ) must not send a later
    test's subprocesses to another test's store."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


def _signal_state() -> tuple[int, int]:
    """This thread's blocked signals and the process's ignored ones as the kernel holds them
    (Linux; (0, 0) elsewhere): a library's C code can block or ignore a signal behind Python's
    back, and `signal.getsignal` would not say."""
    masks = {}
    try:
        with open("/proc/thread-self/status") as fh:
            masks = {k: int(v, 16) for k, v in (line.split(":", 1) for line in fh if line.startswith(("SigBlk:", "SigIgn:")))}
    except (OSError, ValueError):
        pass
    return masks.get("SigBlk", 0), masks.get("SigIgn", 0)


_AT_A_TERMINAL = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
"""SIGINT, SIGTERM and SIGHUP as a command typed at a terminal gets them: SIGINT raises
KeyboardInterrupt, the others have their default action, none blocked.

A test run started in the background of a non-interactive shell (`cmd &` in a script, `nohup`,
some CI runners) inherits SIGINT ignored, and SIGHUP too under nohup. gatesweep keeps an
inherited ignore, by design (a shell's background job must not die of the terminal's Ctrl-C),
so in such a run every Ctrl-C test would meet a driver that is right to ignore it, and pass or
fail by whether an earlier test on its worker happened to put Python's handler back (asyncio
does, in the notebook tests). The tests of an ignored SIGINT ignore it themselves."""


def _put_back() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)
    for sig, handler in _AT_A_TERMINAL.items():
        signal.signal(sig, handler)  # sigaction: the kernel's disposition too, not only Python's record


_put_back()  # the whole run (pytest's process or an xdist worker) starts so, however it was started


@pytest.fixture(autouse=True)
def _signal_handlers_restored(request):
    """Each test starts with SIGINT, SIGTERM and SIGHUP as at a terminal (`_AT_A_TERMINAL`),
    whatever an earlier test on its worker left: a handler of its own, or (in C, where
    `signal.getsignal` does not see it) a signal blocked or ignored, which every later
    subprocess would inherit. A test that changed them is named in a warning."""
    import warnings

    sigs = STOPPING
    bits = sum(1 << (sig - 1) for sig in sigs)
    _put_back()
    before = ({sig: signal.getsignal(sig) for sig in sigs}, _signal_state())
    yield
    after = ({sig: signal.getsignal(sig) for sig in sigs}, _signal_state())
    handlers = [signal.Signals(sig).name for sig in sigs if after[0][sig] is not before[0][sig]]
    blocked, ignored = ((a ^ b) & bits for a, b in zip(after[1], before[1]))
    if handlers or blocked or ignored:
        warnings.warn(
            f"{request.node.nodeid} left signals changed (handlers {handlers}, blocked mask {blocked:#x}, ignored mask {ignored:#x}); "
            "put back for the next test",
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def shared_ray():
    """One Ray cluster for the session (a head on 127.0.0.1 with this machine's cores, usage
    stats off, stopped by pid at the end), whose address sweeps join with `--address` where the
    test is about the sweep, not about Ray's own start and stop: each local start costs seconds.
    Every sweep is its own Ray job, so no worker or actor outlives the sweep that started it."""
    cores = str(len(os.sched_getaffinity(0)))
    with loopback_cluster(head_args=("--num-cpus", cores)) as address:
        yield address


@pytest.fixture
def tracking_uri(tmp_path):
    """A fresh store of the test's own, made as gatesweep makes every new SQLite store: a copy of
    the cache's empty one (`orchestrator.tracking.store.client`; the run's cache holds one)."""
    from orchestrator.tracking import client

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client(uri)
    return uri


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One moto S3 server on 127.0.0.1 for the session (stopped by its pid at the end)."""
    from tests.services.s3 import MotoS3

    server = MotoS3(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server, emptied, with the standard AWS variables pointing at it; the
    test's own bucket `test-bucket` created. Returns the server (`.env()`, `.object_keys()`...)."""
    s3_server.reset()
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    s3_server.bucket("test-bucket")
    return s3_server


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks into each test's id
def pytest_collection_modifyitems(config, items):
    for item in items:
        _keep_shared_fixtures_on_one_worker(item)
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    """On an xdist worker under `--dist loadgroup`, a grouped test's group is in effect: xdist
    appends it to the test's id (`...::test@group`) for its scheduler. Without it (a pytest whose
    ids xdist cannot rename, a hook that marks too late) every group is ignored silently and each
    worker builds every shared fixture, so each grouped test fails saying so."""
    if item.config.getoption("loadgroup", default=False) and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail(
            f"--dist loadgroup is not in effect: the test kept its id without its group; pytest {pytest.__version__} with "
            "this pytest-xdist ignores the groups (pyproject.toml pins a pytest that works)",
            pytrace=False,
        )


SHARED_ONCE = ("store",)
"""Session fixtures too costly to build once per xdist worker (the dashboards' real sweeps)."""


def _keep_shared_fixtures_on_one_worker(item) -> None:
    """Under pytest-xdist (`-n 2 --dist loadgroup`, the README's command) a session fixture is
    built once per worker, a module one once per worker that runs one of the module's tests: the
    tests that share a costly session fixture (`SHARED_ONCE`) or a module- or class-scoped one
    (a trained sweep, a browser) go to one worker, so it is built once; every other test goes to
    whichever worker is free. Without xdist the mark does nothing."""
    shared = [name for name in SHARED_ONCE if name in item.fixturenames]
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    if shared:
        item.add_marker(pytest.mark.xdist_group(f"fixture-{shared[0]}"))
    elif any(d[-1].scope in ("module", "class", "package") for d in defs if d):
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


# ---- PostgreSQL and `mlflow server` on it (tests/services/postgres.py, mlflow_server.py) -------
PG_TRACKING_TEMPLATE = "mlflow_migrated"
PG_AUTH_TEMPLATE = "mlflow_auth_migrated"
MLFLOW_PASSWORD = "gatesweep-mlflow-pass-Jt6w3"
"""The basic-auth admin's password: recognisable, so a test can show it is logged nowhere."""


@pytest.fixture(scope="session")
def postgres():
    """One PostgreSQL on 127.0.0.1 for the session, with MLflow's tracking schema and its auth
    app's schema migrated once each into template databases (`pg_tracking_server` copies them:
    a copy takes 0.2 s, the migrations seconds). Stopped by its pid at the end."""
    import subprocess
    import sys

    from tests.services import postgres as pg

    why = pg.unavailable()
    if why:
        pytest.skip(why)
    server = pg.Postgres().start()
    try:
        tracking, auth = server.create_database(PG_TRACKING_TEMPLATE), server.create_database(PG_AUTH_TEMPLATE)
        migrate = (
            "import sys, sqlalchemy\n"
            "from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore\n"
            "from mlflow.server.auth.db.utils import migrate\n"
            "SqlAlchemyStore(sys.argv[1], sys.argv[3])\n"
            "engine = sqlalchemy.create_engine(sys.argv[2]); migrate(engine, 'head'); engine.dispose()\n"
        )
        out = subprocess.run(  # its own process: no connection to the templates stays open
            [sys.executable, "-c", migrate, tracking, auth, str(server.root / "unused-artifacts")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        yield server
    finally:
        server.destroy()


class _PgTracking:
    """An `mlflow server` on a fresh PostgreSQL database, artifacts proxied to S3."""

    counter = 0

    def __init__(self, postgres, s3, root, *, auth: bool = False):
        from tests.services.mlflow_server import MlflowServer, basic_auth_config

        _PgTracking.counter += 1
        n = f"{os.getpid()}_{_PgTracking.counter}"
        self.postgres, self.s3 = postgres, s3
        self.database = f"t_{n}"
        self.backend_uri = postgres.create_database(self.database, template=PG_TRACKING_TEMPLATE)
        env = dict(s3.env())
        if auth:
            env |= basic_auth_config(
                root, password=MLFLOW_PASSWORD, database_uri=postgres.create_database(f"auth_{n}", template=PG_AUTH_TEMPLATE)
            )
        self.artifacts = "s3://test-bucket/mlflow"
        self.server = MlflowServer(
            root, backend_store_uri=self.backend_uri, artifacts_destination=self.artifacts, app_name="basic-auth" if auth else None, env=env
        )
        self.password = MLFLOW_PASSWORD if auth else None
        self.username = "admin" if auth else None

    @property
    def uri(self) -> str:
        return self.server.uri

    def client_env(self) -> dict[str, str]:
        """MLflow's credential variables for this server (empty without auth)."""
        if not self.password:
            return {}
        return {"MLFLOW_TRACKING_USERNAME": str(self.username), "MLFLOW_TRACKING_PASSWORD": self.password}


@pytest.fixture
def pg_tracking_server(postgres, s3, tmp_path):
    """`mlflow server` on 127.0.0.1 over a fresh PostgreSQL database (a copy of the session's
    migrated template), artifacts proxied to `s3://test-bucket/mlflow` on the `s3` fixture's moto
    server (the server holds the AWS credentials; its clients need none). Stopped by its pid."""
    t = _PgTracking(postgres, s3, tmp_path / "mlflow-server")
    t.server.start()
    yield t
    t.server.stop()


@pytest.fixture
def pg_auth_tracking_server(postgres, s3, tmp_path):
    """`pg_tracking_server` with MLflow's basic-auth app (admin / `MLFLOW_PASSWORD`; users in a
    fresh copy of the migrated auth template)."""
    t = _PgTracking(postgres, s3, tmp_path / "mlflow-server", auth=True)
    t.server.start()
    yield t
    t.server.stop()


# --- Slurm (tests/services/slurm.py): a real one-node slurmctld + slurmd + munged -------------


@pytest.fixture
def slurm(tmp_path_factory):
    """A one-node Slurm on 127.0.0.1, configured in a temporary folder, its daemons stopped by pid
    afterwards; skipped (saying why) where slurm-wlm and munge are not installed."""
    from tests.services.slurm import Slurm, missing

    why = missing()
    if why:
        pytest.skip(why)
    cluster = Slurm(tmp_path_factory.mktemp("slurm", numbered=True)).start()
    yield cluster
    cluster.stop()
