"""The object-store tests' runs folder and their checks that the S3 secret key leaks nowhere."""

from __future__ import annotations

from pathlib import Path

from tests.services.s3 import SECRET_KEY

RUNS = "s3://test-bucket/runs"
"""The runs folder on the `s3` fixture's bucket."""


def no_secret_in(*texts: str) -> None:
    """None of the texts holds the moto server's secret key."""
    for text in texts:
        assert SECRET_KEY not in text


def no_secret_under(folder: Path) -> int:
    """Every file under `folder` read as bytes: the secret is in none of them; how many were read."""
    n = 0
    for f in folder.rglob("*"):
        if f.is_file() and not f.is_symlink():
            try:
                data = f.read_bytes()
            except OSError:
                continue
            n += 1
            at = data.find(SECRET_KEY.encode())
            assert at < 0, f"{f}: ...{data[max(0, at - 1500) : at + 100]!r}"
    return n
