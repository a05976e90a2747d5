"""The atomic-write and lock helpers (orchestrator.storage) under hostile conditions: a write
interrupted midway by a real SIGINT, a writer killed with SIGKILL, a full disk (a real 64 KiB
tmpfs), a folder publish racing other processes, and a lock whose holder is SIGKILLed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator import storage
from orchestrator.storage import FileLock

ROOT = Path(__file__).resolve().parents[2]


def siblings(path: Path) -> list[str]:
    """Everything in `path`'s folder but `path` itself (temporary files would show up here)."""
    return sorted(p.name for p in path.parent.iterdir() if p != path)


def python(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, text=True, **kw)


# ---- atomic writes ---------------------------------------------------------------------------
def test_text_bytes_and_json_replace_the_file_whole(tmp_path):
    target = tmp_path / "state.json"
    storage.write_json(target, {"a": 1}, indent=2)
    assert json.loads(target.read_text()) == {"a": 1} and target.read_text().startswith("{\n  ")
    storage.write_text(target, "héllo")
    assert target.read_bytes() == "héllo".encode()
    storage.write_bytes(target, b"\x00\xff")
    assert target.read_bytes() == b"\x00\xff"
    assert siblings(target) == []
    assert (target.stat().st_mode & 0o777) == (0o666 & ~_umask()), "a new file's usual permissions, not a temporary file's 0600"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_write_interrupted_by_sigint_midway_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old weights")

    def half_then_ctrl_c(fh):
        fh.write(b"new weights, first half")
        fh.flush()
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: Python raises KeyboardInterrupt here
        time.sleep(5)
        fh.write(b" second half")

    with pytest.raises(KeyboardInterrupt):
        storage.write_stream(target, half_then_ctrl_c)
    assert target.read_bytes() == b"old weights" and siblings(target) == []


def test_a_value_json_cannot_hold_writes_nothing(tmp_path):
    target = tmp_path / "cache.json"
    target.write_text('{"ok": 1}')
    with pytest.raises(TypeError):
        storage.write_json(target, {"bad": object()})
    assert target.read_text() == '{"ok": 1}' and siblings(target) == []


def test_a_writer_killed_outright_never_leaves_half_a_file(tmp_path):
    """SIGKILL mid-write: the target keeps its old content; the temporary file stays (nothing can
    run on SIGKILL) and `remove_leftovers` deletes it."""
    target = tmp_path / "state.json"
    target.write_text("old")
    child = python(
        """
        import sys, time
        from orchestrator import storage
        def slow(fh):
            fh.write(b"x" * 100_000); fh.flush()
            print("half", flush=True)
            time.sleep(60)
        storage.write_stream(sys.argv[1], slow)
        """,
        str(target),
        stdout=subprocess.PIPE,
    )
    assert child.stdout.readline().strip() == "half"
    child.kill()
    child.wait(timeout=30)
    assert target.read_text() == "old"
    (leftover,) = siblings(target)
    assert leftover.startswith(f".state.json.{child.pid}.") and leftover.endswith(".tmp")
    assert storage.remove_leftovers(target) == [tmp_path / leftover] and siblings(target) == []


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unprivileged user and mount namespaces (unshare) for a small tmpfs")
def test_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    """A real ENOSPC: a 64 KiB tmpfs (in a private mount namespace) holding a small old file; a
    200 KB write fails with ENOSPC, the old file is intact and no temporary file is left."""
    mount = tmp_path / "small"
    mount.mkdir()
    script = textwrap.dedent(
        """
        import errno, os, sys
        from pathlib import Path
        from orchestrator import storage
        target = Path(sys.argv[1]) / "state.json"
        target.write_text("old state")
        try:
            storage.write_bytes(target, b"y" * 200_000)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
        else:
            raise SystemExit("the write did not fail")
        print(target.read_text(), sorted(os.listdir(target.parent)))
        """
    )
    out = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            'mount -t tmpfs -o size=64k tmpfs "$1" && exec "$2" -c "$3" "$1"',
            "sh",
        ]
        + [str(mount), sys.executable, script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "old state ['state.json']"


def test_a_file_size_limit_keeps_the_old_file(tmp_path):
    """EFBIG from RLIMIT_FSIZE (a write refused by the kernel midway; no privileges needed)."""
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    code = """
        import errno, resource, signal, sys
        from orchestrator import storage
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
        try:
            storage.write_bytes(sys.argv[1], b"z" * 1_000_000)
        except OSError as err:
            sys.exit(0 if err.errno == errno.EFBIG else 3)
        sys.exit(4)
        """
    child = python(code, str(target))
    assert child.wait(timeout=60) == 0
    assert target.read_bytes() == b"old" and siblings(target) == []


# ---- folder publish --------------------------------------------------------------------------
def test_publish_folder_failure_leaves_nothing(tmp_path):
    dest = tmp_path / "cache" / "entry"

    def build(folder: Path) -> None:
        (folder / "shard.bin").write_bytes(b"a" * 1000)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        storage.publish_folder(dest, build)
    assert not dest.exists() and os.listdir(dest.parent) == []


def test_racing_publishers_leave_one_whole_folder(tmp_path):
    """Six processes build the same folder at once, released together: one publishes, the others
    see theirs refused (False) and removed; the folder holds one writer's files only, never a mix."""
    dest = tmp_path / "harness" / "mmlu-key"
    go = tmp_path / "go"
    code = """
        import os, sys, time
        from pathlib import Path
        from orchestrator import storage
        dest, go, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
        def build(folder):
            for i in range(20):
                (folder / f"part{i}.txt").write_text(me)
            while not go.exists():
                time.sleep(0.005)
        print(storage.publish_folder(dest, build), flush=True)
        """
    children = [python(code, str(dest), str(go), f"writer{k}", stdout=subprocess.PIPE) for k in range(6)]
    deadline = time.time() + 60
    while time.time() < deadline and len([p for p in dest.parent.glob(".mmlu-key.*.tmp")]) < 6:
        time.sleep(0.01)  # every writer has its staging folder
    go.touch()
    results = [c.communicate(timeout=60)[0].strip() for c in children]
    assert sorted(results) == ["False"] * 5 + ["True"], results
    writers = {p.read_text() for p in dest.iterdir()}
    assert len(writers) == 1 and len(list(dest.iterdir())) == 20
    assert os.listdir(dest.parent) == ["mmlu-key"], "every loser's staging folder is gone"


def test_publish_onto_a_file_is_an_error_not_a_loss(tmp_path):
    dest = tmp_path / "entry"
    dest.write_text("a file")
    with pytest.raises(OSError) as err:
        storage.publish_folder(dest, lambda folder: (folder / "x").write_text("x"))
    assert err.value.errno in (errno.ENOTDIR, errno.EISDIR, errno.EEXIST)
    assert dest.read_text() == "a file" and siblings(dest) == []


# ---- the lock --------------------------------------------------------------------------------
HOLD = """
    import sys, time
    from orchestrator.storage import FileLock
    lock = FileLock(sys.argv[1], purpose="test")
    assert lock.acquire(blocking=False)
    print("held", flush=True)
    time.sleep(120)
    """


def test_a_lock_is_exclusive_names_its_holder_and_is_released_when_the_holder_is_sigkilled(tmp_path):
    path = tmp_path / "locks" / "driver.lock"
    child = python(HOLD, str(path), stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "held"
        mine = FileLock(path)
        assert mine.acquire(blocking=False) is False and not mine.held
        holder = mine.holder()
        assert holder["pid"] == child.pid and holder["host"] == socket.gethostname() and holder["purpose"] == "test"
        assert storage.describe_holder(holder).startswith(f"pid {child.pid} on host {socket.gethostname()}, started 20")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert mine.acquire(blocking=False) is True, "the kernel dropped the dead holder's lock"
        assert mine.holder()["pid"] == os.getpid()
        mine.release()
        assert path.read_text() == "" and mine.holder() == {}, "a released lock names no holder"
    finally:
        child.kill()
        child.wait()


def test_a_blocking_acquire_waits_for_the_holder(tmp_path):
    path = tmp_path / "x.lock"
    child = python(HOLD.replace("time.sleep(120)", "time.sleep(1.0)"), str(path), stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == "held"
    t0 = time.perf_counter()
    with FileLock(path) as lock:
        waited = time.perf_counter() - t0
        assert lock.held
    assert waited > 0.5, "the holder keeps it for 1 s after saying so"
    child.wait(timeout=30)


def test_a_child_process_does_not_inherit_the_lock(tmp_path):
    """A driver starts Ray workers while it holds its lock: they must not keep it after it is gone."""
    path = tmp_path / "driver.lock"
    lock = FileLock(path)
    assert lock.acquire(blocking=False)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; print('running', flush=True); time.sleep(60)"],
        close_fds=False,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # once it runs Python it has exec'd, which closed its copy of the lock's descriptor (a
        # fork shares the lock until then, a window of microseconds the test must not race)
        assert sleeper.stdout.readline().strip() == "running"
        lock.release()
        assert FileLock(path).acquire(blocking=False), "the lock went with its holder, not with the child"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_sweep_lock_refusal_names_the_live_driver(tmp_path):
    """launch.lock.SweepLock on top of FileLock: the message `gatesweep run` prints for a second driver."""
    from orchestrator.core.errors import UserError
    from orchestrator.launch.lock import SweepLock
    from orchestrator.storage import Location

    code = """
        import sys, time
        from orchestrator.launch.lock import SweepLock
        from orchestrator.storage import Location
        with SweepLock(Location.parse(sys.argv[1]), "twice"):
            print("held", flush=True)
            time.sleep(120)
        """
    child = python(code, str(tmp_path), stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as err:
            SweepLock(Location.parse(tmp_path), "twice").acquire()
        message = str(err.value)
        assert message.startswith(f"sweep 'twice' is already running (driver pid {child.pid} on host {socket.gethostname()}, started 20")
        assert message.endswith(f"lock {tmp_path / 'driver.lock'}); wait for it, or stop it and `gatesweep resume` it")
    finally:
        child.kill()
        child.wait()
    with SweepLock(Location.parse(tmp_path), "twice") as lock:  # a SIGKILLed driver's lock is taken over
        assert lock._lock.held
