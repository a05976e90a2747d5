"""The one storage API (`orchestrator.storage`), on a local folder and on a real S3 server (moto on
127.0.0.1): a user's text becomes a location once and URI lookalikes are refused; every name a
store or a manifest gives stays inside its folder (nothing is written before the refusal); a
folder is published files-then-manifest and fetched verified; errors are typed, never sniffed;
one retry policy; one S3 settings reader; an endpoint that answers HTML is refused naming it;
the report's folder keeps a user's files."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
from pathlib import Path

import pytest

from orchestrator.storage import BadLocation, Damaged, Location, NotAStore, StoreUnreachable, UnsafeName, folders, owned, retry
from orchestrator.storage import s3 as s3mod
from orchestrator.storage.names import confined, safe_relpath
from tests.services.html_endpoint import HtmlEndpoint
from tests.services.ports import free_port

LOOKALIKES = ["s3:/bucket/p", "s3a://bucket/p", "s3:bucket/p", "gcs:/bucket/p", "scheme:rest", "s3://", "s3:///bucket", "S3A://b/p"]
ESCAPES = ["../x", "../../../../H4ESCAPE.txt", "/etc/passwd", "a/../../x", "a//b", ".", "", "a\\..\\x", "x\x1b[2J", "a/" * 40 + "b"]


def nothing_new_under(root: Path, before: set[Path]) -> None:
    assert {p for p in root.rglob("*")} == before


# ---- a user's text becomes a location once ------------------------------------------------------
@pytest.mark.parametrize("text", LOOKALIKES)
def test_uri_lookalikes_are_refused_with_a_hint_and_never_become_folders(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadLocation) as err:
        Location.parse(text)
    message = str(err.value)
    assert message.startswith(text) and "\n" not in message
    if text.lower().startswith(("s3:/", "s3a:", "s3:b", "gcs:")) and text != "s3://":
        assert "did you mean " in message, message
    assert list(tmp_path.iterdir()) == []


def test_local_folders_with_a_colon_and_real_uris_parse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Location.parse("./a:b").local == tmp_path / "a:b"
    assert Location.parse("x/y:z").local == tmp_path / "x" / "y:z"
    assert Location.parse(f"file://{tmp_path}").local == tmp_path
    assert Location.parse("S3://b/p/").uri == "s3://b/p" and Location.parse("gs://b/c").remote
    with pytest.raises(BadLocation, match="a '..' part|empty, '.' or '..'"):
        Location.parse("s3://b/../x")
    with pytest.raises(BadLocation, match="file:///ABSOLUTE/PATH"):
        Location.parse("file://host/x")


# ---- names stay inside their folder -------------------------------------------------------------
@pytest.mark.parametrize("name", ESCAPES, ids=range(len(ESCAPES)))
def test_unsafe_names_are_refused_by_child_and_confined(name, tmp_path):
    with pytest.raises(UnsafeName):
        safe_relpath(name)
    with pytest.raises(UnsafeName):
        confined(tmp_path, name)
    if name:  # child() takes no part at all for an empty one: the folder itself
        with pytest.raises(UnsafeName):
            Location.parse(tmp_path).child(name)
        with pytest.raises(UnsafeName):
            Location.parse("s3://b/p").child(name)


def test_a_link_on_the_way_is_refused(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafeName, match="link"):
        confined(tmp_path / "root", "sub/x")
    assert confined(tmp_path / "root", "other/x") == tmp_path / "root" / "other" / "x"


# ---- publish files then one manifest, fetch verified -------------------------------------------
@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    if request.param == "local":
        return Location.parse(tmp_path / "store")
    request.getfixturevalue("s3")
    return Location.parse("s3://test-bucket/store")


def source_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(os.urandom(3000))
    (root / "sub" / "b.txt").write_text("b" * 100)
    return root


def test_publish_then_fetch_round_trip_with_one_manifest_format(where, tmp_path):
    src = source_folder(tmp_path / "src")
    m = folders.publish(src, where.child("e"), name="MANIFEST.json", build="b1", extra={"step": 3})
    data = where.child("e", "MANIFEST.json").read_json()
    assert data["version"] == 1 and data["build"] == "b1" and data["step"] == 3
    assert data["files"]["a.bin"] == {"size": 3000, "sha256": hashlib.sha256((src / "a.bin").read_bytes()).hexdigest()}
    assert sorted(where.child("e").files()) == ["MANIFEST.json", "b1/a.bin", "b1/sub/b.txt"]
    got = folders.fetch(where.child("e"), tmp_path / "got", name="MANIFEST.json")
    assert got.files == m.files and (tmp_path / "got" / "sub" / "b.txt").read_text() == "b" * 100


def tamper(where: Location, change) -> None:
    f = where.child("e", "MANIFEST.json")
    data = f.read_json()
    change(data)
    f.write_json(data)


DAMAGES = {
    "escaping-name": lambda d: d["files"].__setitem__("../../../../H4ESCAPE.txt", {"size": 4, "sha256": "0" * 64}),
    "absolute-name": lambda d: d["files"].__setitem__("/tmp/H4ESCAPE.txt", {"size": 4, "sha256": "0" * 64}),
    "escaping-build": lambda d: d.__setitem__("build", "../.."),
    "no-version": lambda d: d.pop("version"),
    "size-not-int": lambda d: d["files"]["a.bin"].__setitem__("size", "3000"),
    "bool-size": lambda d: d["files"]["a.bin"].__setitem__("size", True),
    "bad-sha": lambda d: d["files"]["a.bin"].__setitem__("sha256", "xyz"),
    "files-a-list": lambda d: d.__setitem__("files", ["a.bin"]),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_manifest_that_is_not_one_is_refused_before_a_byte_is_written(where, tmp_path, damage, monkeypatch):
    src = source_folder(tmp_path / "src")
    folders.publish(src, where.child("e"), name="MANIFEST.json", build="b1")
    tamper(where, DAMAGES[damage])
    deep = tmp_path / "1" / "2" / "3" / "4"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    before = set(tmp_path.rglob("*"))
    with pytest.raises(Damaged):
        folders.fetch(where.child("e"), deep / "got", name="MANIFEST.json")
    nothing_new_under(tmp_path, before)
    assert not Path("/tmp/H4ESCAPE.txt").exists()


@pytest.mark.parametrize("case", ["flipped", "truncated", "grown", "missing", "not-json", "huge"])
def test_files_that_do_not_match_their_manifest_leave_nothing(where, tmp_path, case):
    src = source_folder(tmp_path / "src")
    folders.publish(src, where.child("e"), name="MANIFEST.json", build="b1")
    f = where.child("e", "b1", "a.bin")
    good = f.read_bytes()
    damage = {
        "flipped": lambda: f.write_bytes(bytes([good[0] ^ 1]) + good[1:]),
        "truncated": lambda: f.write_bytes(good[:-1]),
        "grown": lambda: f.write_bytes(good + b"x"),
        "missing": lambda: f.delete(),
        "not-json": lambda: where.child("e", "MANIFEST.json").write_bytes(b"\x00\xff{"),
        "huge": lambda: where.child("e", "MANIFEST.json").write_bytes(b" " * (folders.MAX_MANIFEST_BYTES + 1)),
    }
    damage[case]()
    with pytest.raises(Damaged):
        folders.fetch(where.child("e"), tmp_path / "got", name="MANIFEST.json")
    assert not (tmp_path / "got").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".got")]


def test_no_manifest_is_no_folder(where, tmp_path):
    with pytest.raises(FileNotFoundError):
        folders.fetch(where.child("nothing"), tmp_path / "got", name="MANIFEST.json")


def test_a_folder_with_a_link_is_not_published(tmp_path):
    src = source_folder(tmp_path / "src")
    (src / "secret").symlink_to("/etc/hostname")
    with pytest.raises(UnsafeName, match="link"):
        folders.publish(src, Location.parse(tmp_path / "dest"), name="MANIFEST.json")
    assert not (tmp_path / "dest").exists()


# ---- errors are typed ------------------------------------------------------------------------
def test_missing_objects_and_refusals_are_typed_errors(s3, tmp_path):
    gone = Location.parse("s3://test-bucket/none/state.json")
    with pytest.raises(FileNotFoundError):
        gone.read_bytes()
    with pytest.raises(FileNotFoundError):
        Location.parse("s3://no-such-bucket/x").read_bytes()
    with pytest.raises(FileNotFoundError):
        Location.parse(tmp_path / "none").read_bytes()
    import botocore.exceptions as bx

    def answer(status: int, code: str) -> BaseException:
        return bx.ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    assert isinstance(s3_translate(answer(403, "AccessDenied")), PermissionError)
    assert isinstance(s3_translate(answer(403, "SignatureDoesNotMatch")), PermissionError)
    assert isinstance(s3_translate(answer(503, "SlowDown")), StoreUnreachable)
    assert isinstance(s3_translate(answer(500, "InternalError")), StoreUnreachable)
    assert isinstance(s3_translate(answer(404, "NoSuchKey")), FileNotFoundError)
    assert isinstance(s3_translate(bx.EndpointConnectionError(endpoint_url="http://x")), StoreUnreachable)
    html = bx.ClientError({"Error": {"Code": "", "Message": ""}, "ResponseMetadata": {"HTTPStatusCode": 200}}, "GetObject")
    assert isinstance(s3_translate(html), NotAStore)


def s3_translate(err: BaseException) -> BaseException:
    return s3mod.translate(err, "s3://b/k")


def test_nothing_listening_is_unreachable_quickly(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv(s3mod.CONNECT_TIMEOUT_ENV, "1")
    with pytest.raises(StoreUnreachable):
        Location.parse("s3://test-bucket/x").read_bytes()


# ---- one retry policy -------------------------------------------------------------------------
def test_one_retry_policy_by_type(monkeypatch):
    slept: list[float] = []
    calls: list[int] = []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise StoreUnreachable("down")
        return "up"

    assert retry.retried(flaky, "x", budget_s=100, sleep=slept.append) == "up" and slept == [1.0, 2.0, 4.0]
    for permanent in (FileNotFoundError(errno.ENOENT, "x"), PermissionError(errno.EACCES, "x"), NotAStore("html"), UnsafeName("..")):
        n: list[int] = []

        def fails(e=permanent, n=n):
            n.append(1)
            raise e

        with pytest.raises(type(permanent)):
            retry.retried(fails, "x", budget_s=100, sleep=slept.append)
        assert n == [1], permanent
    full = OSError(errno.ENOSPC, "No space left on device")
    assert not retry.transient(full) and retry.transient(OSError(errno.EIO, "pyarrow: io"))
    b = retry.Backoff()
    assert [b.next() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    import time

    tries: list[float] = []

    def down():
        tries.append(time.monotonic())
        raise StoreUnreachable("down")

    t0 = time.monotonic()
    with pytest.raises(StoreUnreachable):  # real pauses: 1 s, then 2 s would pass the budget, so the error is raised
        retry.retried(down, "x", budget_s=2.5)
    assert len(tries) == 2 and time.monotonic() - t0 < 2.5


def test_one_reader_of_the_s3_settings(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv(s3mod.REQUEST_TIMEOUT_ENV, "not a number")
    got = s3mod.settings()
    assert got.endpoint == "http://127.0.0.1:2" and got.region == "us-east-1" and got.request_timeout == 60.0
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    now = s3mod.settings()
    assert "hunter2" not in repr(now) and now != got, "changed credentials are new settings (a new client), never printed"
    assert s3mod.client() is s3mod.client(), "one client per settings"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9", None])
def test_only_aws_itself_asks_aws_services_for_credentials(endpoint, monkeypatch):
    """Beside a custom endpoint (MinIO, moto on 127.0.0.1) the credential chain leaves out EC2's
    instance-metadata and ECS's container providers, which ask 169.254.169.254 / a container
    endpoint over the network: with no key set, no credentials, and no connection beyond loopback
    (the conftest's guard fails a test that tries). Against AWS itself an instance role still works."""
    for k in (*s3mod.SECRET_ENV, *s3mod.ENDPOINT_ENV, "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    if endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    chain = [p.METHOD for p in s3mod._session(endpoint)._session.get_component("credential_provider").providers]
    if endpoint:
        assert not set(s3mod.AWS_ONLY_PROVIDERS) & set(chain), chain
        assert not s3mod.has_credentials()
        assert "instance role" not in (s3mod.problem("bucket") or ""), "an instance role's keys are AWS's own"
        assert s3mod.client()._request_signer._credentials is None
    else:
        assert set(s3mod.AWS_ONLY_PROVIDERS) <= set(chain), chain


# ---- an endpoint that answers HTML --------------------------------------------------------------
@pytest.mark.parametrize("status", [200, 404, 500])
def test_an_endpoint_answering_html_is_refused_naming_it_and_nothing_is_written(status, monkeypatch):
    from orchestrator.storage.usable import problem, write_problem

    page = HtmlEndpoint(status).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", page.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
        said = problem(Location.parse("s3://bucket/runs"))
        assert said is not None and page.endpoint in said and "does not answer as an S3 store" in said, said
        assert write_problem(Location.parse("s3://bucket/runs")) == said
        assert page.requests["PUT"] == 0 and page.requests["POST"] == 0 and page.requests["DELETE"] == 0
    finally:
        page.stop()


# ---- the report's folder keeps a user's files ------------------------------------------------------
def stage_of(out: Path, files: dict[str, bytes]) -> Path:
    stage = out / ".stage"
    stage.mkdir(parents=True)
    for name, data in files.items():
        (stage / name).write_bytes(data)
    return stage


def test_only_files_written_before_are_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "loss_curves.png").write_bytes(b"the user's own plot")
    (out / "notes.txt").write_text("mine")
    owned.replace(out, stage_of(out, {"report.md": b"r1", "metric_vs_x.png": b"p1"}), ["metric_vs_x.png", "report.md"])
    assert (out / "loss_curves.png").read_bytes() == b"the user's own plot" and (out / "notes.txt").read_text() == "mine"
    # a second report: ours replaced, the plot of an axis that is gone removed, the user's kept
    owned.replace(out, stage_of(out, {"report.md": b"r2"}), ["report.md"])
    assert (out / "report.md").read_bytes() == b"r2" and not (out / "metric_vs_x.png").exists()
    assert sorted(p.name for p in out.iterdir()) == [owned.OWNED, "loss_curves.png", "notes.txt", "report.md"]
    # a report that would write the user's file's name: refused, nothing replaced, the stage kept for the caller
    stage = stage_of(out, {"report.md": b"r3", "loss_curves.png": b"ours"})
    with pytest.raises(owned.NotOurs, match="loss_curves.png is not a file an earlier report wrote"):
        owned.replace(out, stage, ["loss_curves.png", "report.md"])
    assert (out / "report.md").read_bytes() == b"r2" and (out / "loss_curves.png").read_bytes() == b"the user's own plot"


def test_a_file_the_user_changed_or_linked_is_no_longer_ours(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    owned.replace(out, stage_of(out, {"report.md": b"r1", "report.html": b"h1"}), ["report.md", "report.html"])
    (out / "report.md").write_text("my edits")
    with pytest.raises(owned.NotOurs, match="report.md"):
        owned.replace(out, stage_of(out, {"report.md": b"r2"}), ["report.md"])
    assert (out / "report.md").read_text() == "my edits"
    victim = tmp_path / "victim.html"
    victim.write_text("precious")
    (out / "report.html").unlink()
    (out / "report.html").symlink_to(victim)
    with pytest.raises(owned.NotOurs, match="report.html"):
        owned.replace(out, _fresh_stage(out, {"report.html": b"h2"}), ["report.html"])
    assert victim.read_text() == "precious"


def _fresh_stage(out: Path, files: dict[str, bytes]) -> Path:
    import shutil

    shutil.rmtree(out / ".stage", ignore_errors=True)
    return stage_of(out, files)


def test_kept_plots_stay_and_a_damaged_or_hostile_manifest_owns_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    owned.replace(out, stage_of(out, {"loss_curves.png": b"p", "report.md": b"r"}), ["loss_curves.png", "report.md"])
    owned.replace(out, _fresh_stage(out, {"report.md": b"r2"}), ["report.md"], keep=("*.png",))  # --no-plots
    assert (out / "loss_curves.png").read_bytes() == b"p"
    owned.replace(out, _fresh_stage(out, {"report.md": b"r3"}), ["report.md"])  # plots again on: the earlier plot is still ours
    assert not (out / "loss_curves.png").exists()
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    entry = {"size": 1, "sha256": hashlib.sha256(b"x").hexdigest()}
    (out / owned.OWNED).write_text(json.dumps({"version": 1, "files": {"../victim.txt": entry, "report.md": entry}}))
    with pytest.raises(owned.NotOurs):  # the manifest is damaged: it owns nothing, report.md is in the way
        owned.replace(out, _fresh_stage(out, {"report.md": b"r4"}), ["report.md"])
    assert victim.read_text() == "x"


def test_a_replacement_stopped_halfway_still_knows_every_file(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    owned.replace(out, stage_of(out, {"a.png": b"a1", "b.png": b"b1"}), ["a.png", "b.png"])
    real, moved = os.replace, []
    stage = _fresh_stage(out, {"a.png": b"a2", "b.png": b"b2"})

    def dies_after_the_first(src, dst):  # the staged files' moves only (the manifest's writer renames too)
        if Path(src).parent == stage and moved:
            raise KeyboardInterrupt
        if Path(src).parent == stage:
            moved.append(dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", dies_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        owned.replace(out, stage, ["a.png", "b.png"])
    monkeypatch.setattr(os, "replace", real)
    assert (out / "a.png").read_bytes() == b"a2" and (out / "b.png").read_bytes() == b"b1"
    owned.replace(out, _fresh_stage(out, {"a.png": b"a3", "b.png": b"b3"}), ["a.png", "b.png"])  # both recognised
    assert (out / "a.png").read_bytes() == b"a3" and (out / "b.png").read_bytes() == b"b3"


# ---- the lease on a store ------------------------------------------------------------------------
def test_a_lease_on_s3_is_one_holder_and_says_who(s3):
    from orchestrator.storage.lease import ObjectLock, lease_for

    where = Location.parse("s3://test-bucket/l/LOCK")
    first = lease_for(where, purpose="a")
    assert isinstance(first, ObjectLock) and first.acquire()
    second = lease_for(where)
    assert not second.acquire() and second.holder()["host"] == socket.gethostname() and second.holder()["purpose"] == "a"
    first.release()
    assert second.acquire()
    second.release()
    assert not where.exists()
