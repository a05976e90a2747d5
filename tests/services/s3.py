"""An S3-compatible object store on 127.0.0.1: moto's server (`moto[server]` from PyPI, the
emulator MLflow's own tests use), started in its own process group and stopped by its pid.

Its objects live in the server's memory: `stop()` loses them; `pause()` / `resume()` (SIGSTOP,
SIGCONT) make it unresponsive without losing anything, the way a store that is down looks to a
client whose connections hang.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from tests.support.service import ManagedProcess

from .ports import free_port

ACCESS_KEY = "AKIAGATESWEEPTEST0001"
SECRET_KEY = "gatesweep-test-secret-Zq8vR2"
"""Recognisable credentials: a test that finds SECRET_KEY in a message, param, tag or log fails."""


class MotoS3(ManagedProcess):
    name = "moto server"

    def __init__(self, root: Path, port: int | None = None):
        self.root, self.port = Path(root), port or free_port()
        self.proc = None

    @property
    def log_path(self) -> Path:
        return self.root / "moto.log"

    def command(self) -> list[str]:
        return [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2)
            return True
        except OSError:
            return False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client needs to reach this store (the standard AWS variables)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self) -> MotoS3:
        self.launch(60)
        return self

    def client(self):
        import boto3

        e = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"],
            region_name=e["AWS_DEFAULT_REGION"],
        )

    def bucket(self, name: str) -> str:
        """Create bucket `name` (if missing); its s3:// URI."""
        cl = self.client()
        if name not in self.buckets():
            cl.create_bucket(Bucket=name)
        return f"s3://{name}"

    def buckets(self) -> list[str]:
        return [b["Name"] for b in self.client().list_buckets().get("Buckets", [])]

    def object_keys(self, bucket: str, prefix: str = "") -> list[str]:
        keys: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def reset(self) -> None:
        """Every bucket and object gone (moto's reset endpoint): a clean store for the next test."""
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self) -> None:
        self.terminate(10)
