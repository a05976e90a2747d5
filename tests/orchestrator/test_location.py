"""`orchestrator.storage.Location` on a local folder and on a real S3-compatible server (moto on
127.0.0.1): the same operations, whole-or-absent writes, folders copied both ways."""

from __future__ import annotations

import pytest

from orchestrator.storage.location import Location, is_remote


def test_local_and_remote_uris_are_told_apart(tmp_path):
    assert not is_remote(tmp_path) and not is_remote("runs") and not is_remote(f"file://{tmp_path}")
    assert is_remote("s3://b/p") and is_remote("gs://b") and is_remote("abfs://c@a.dfs.core.windows.net/p")
    assert Location.parse("s3://b/p/").child("sweeps", "x").uri == "s3://b/p/sweeps/x"
    assert Location.parse(f"file://{tmp_path}").local == tmp_path.resolve()


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    if request.param == "local":
        return Location.parse(tmp_path / "root")
    request.getfixturevalue("s3")
    return Location.parse("s3://test-bucket/some/prefix")


def test_the_same_operations_on_both_kinds(where, tmp_path):
    f = where.child("a", "state.json")
    assert not f.exists() and where.child("a").list() == [] and where.files() == []
    f.write_json({"x": 1})
    assert f.exists() and f.is_file() and f.read_json() == {"x": 1}
    f.write_json({"x": 2})  # replaced whole
    assert f.read_json() == {"x": 2}
    with pytest.raises(ValueError, match="more than 3"):
        f.read_bytes(limit=3)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "one.bin").write_bytes(b"\x00" * 10)
    (src / "sub" / "two.txt").write_text("two")
    (src / "COMPLETE").write_text("1")
    assert where.child("ck").upload(src, skip=("COMPLETE",)) == ["one.bin", "sub/two.txt"]
    assert where.child("ck").files() == ["one.bin", "sub/two.txt"]
    back = tmp_path / "back"
    assert where.child("ck").download(back) == ["one.bin", "sub/two.txt"]
    assert (back / "sub" / "two.txt").read_text() == "two" and (back / "one.bin").stat().st_size == 10
    assert sorted(where.list()) == ["a", "ck"]
    where.child("ck").delete_tree()
    assert not where.child("ck").exists() and where.child("ck").files() == []
    f.delete()
    assert not f.exists()
