"""A local S3 server for devnets, tests and benches: versitygw serving a folder (on 127.0.0.1
unless told otherwise), with one bucket whose objects anyone may read (as a host's public-read
prefix is) and root credentials only this process knows."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from dilochain.artifacts.object_store import public_read_policy
from dilochain.chain.cometbft import die_with_parent

VERSITYGW_VERSION = "v1.8.0"  # scripts/bootstrap.sh builds this one


class S3Missing(Exception):
    """No versitygw binary, or it did not start."""


def versitygw_binary() -> Path:
    """The versitygw ``scripts/bootstrap.sh`` put beside this Python, else one on PATH."""
    for path in (Path(sys.prefix) / "bin" / "versitygw", shutil.which("versitygw")):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return Path(path)
    raise S3Missing(
        f"the versitygw binary was not found: run ./scripts/bootstrap.sh (it builds versitygw "
        f"{VERSITYGW_VERSION})"
    )


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class LocalS3:
    """``versitygw posix ROOT`` on a free port of ``host`` (loopback by default); :meth:`start`
    creates ``bucket`` with a public-read policy. Hosts get :attr:`env` (credentials),
    :attr:`endpoint` and :attr:`url`."""

    def __init__(
        self, root: Path, bucket: str = "dilochain", prefix: str = "runs", host: str = "127.0.0.1"
    ):  # fmt: skip
        self.root = root
        self.host = host
        self.bucket = bucket
        self.prefix = prefix
        self.access_key = "dlc" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``s3://BUCKET/PREFIX``, what a host's ``object_store`` says."""
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def env(self) -> dict[str, str]:
        """The environment a host's process needs to write to the bucket."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip

    def client(self):
        """A boto3 S3 client with the root credentials (tests look into the bucket with it)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}))  # fmt: skip

    def start(self, timeout: float = 30.0, attempts: int = 3) -> LocalS3:
        """Start the server (a port taken meanwhile: another one) and create the bucket."""
        binary = versitygw_binary()
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        for _ in range(attempts):
            port = _free_port(self.host)
            with (self.root / "versitygw.log").open("ab") as log:
                self._proc = subprocess.Popen(
                    [str(binary), "--access", self.access_key, "--secret", self.secret_key,
                     "--port", f"{self.host}:{port}", "posix", str(self.root / "data")],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=die_with_parent,
                )  # fmt: skip
            if self._listening(port, timeout):
                self.endpoint = f"http://{self.host}:{port}"
                self._create_bucket()
                return self
            self.stop()
        raise S3Missing(f"versitygw did not start (see {self.root / 'versitygw.log'})")

    def _listening(self, port: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._proc.poll() is None:
            try:
                socket.create_connection((self.host, port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def _create_bucket(self) -> None:
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if self.bucket not in existing:
            client.create_bucket(Bucket=self.bucket)
        client.put_bucket_policy(Bucket=self.bucket,
                                 Policy=public_read_policy(self.bucket, self.prefix))  # fmt: skip

    def stop(self) -> None:
        """Stop the server (its folder stays)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
