"""Artifacts in an S3-compatible object store (AWS S3, Cloudflare R2, MinIO, Ceph, versitygw).

A host with an object store publishes the artifacts others need under
``s3://BUCKET/PREFIX/RUN/HOST/HEX`` (its own credentials, from the AWS environment or profile, never
the chain) and registers the prefix's public-read URL as its artifact location. Readers (peers,
verifiers, ``export``) need no credentials and no S3 client: artifact ``h`` is a plain ``GET
URL/RUN/HOST/h``, streamed, bounded and hash-checked like a blob-service fetch. So a host behind
NAT, with nothing anyone can dial, serves its artifacts as well as one with a public address.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from dilochain.artifacts.store import (
    ArtifactError,
    ArtifactTooLarge,
    PeerUnavailable,
    PeerUnreachable,
)
from dilochain.protocol.endpoint import location_host, peer_refusal, url_problem
from dilochain.protocol.hashing import content_hash

CHUNK = 1 << 20
MIN_RATE = 1 << 20  # bytes a second: a fetch slower than this over its whole length is cut off
PART_BYTES = 64 << 20  # multipart upload above this, in parts of this size
# An unfinished multipart upload this old is a dead writer's (a live one of a large checkpoint
# on a slow link can take hours; S3 lifecycle rules usually wait days).
STALE_UPLOAD_SECONDS = 86_400.0
# Matched with fullmatch: ``$`` would also match before a final newline.
_S3_URL = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])((?:/[A-Za-z0-9._~-]+)*)/?")
_PROBE = b"dilochain: a public-read object store\n"  # what the start-up check writes and reads


def s3_url_problem(text: str) -> str | None:
    """Why ``text`` is not ``s3://BUCKET[/PREFIX]`` (None if it is)."""
    if _S3_URL.fullmatch(text) is None:
        return ("an object store is s3://BUCKET[/PREFIX]: a bucket name of 3-63 lowercase "
                "letters, digits, '.' and '-', a prefix of letters, digits and '._~-'")  # fmt: skip
    return None


def object_url(location: str, digest: bytes) -> str:
    """Where artifact ``digest`` is read under the prefix URL ``location``."""
    return f"{location.rstrip('/')}/{digest.hex()}"


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    scheme, _, rest = url.partition("://")
    host, _, port = location_host(url).rpartition(":")
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    return kind(host.strip("[]"), int(port), timeout=timeout), "/" + rest.split("/", 1)[1]


class _Exchange:
    """One request (no redirects followed: a location is read where it says): each socket
    operation bounded by ``timeout``, the whole exchange by ``within`` seconds, after which the
    socket is shut down, so a server that sends a byte a minute holds no reader for long."""

    def __init__(self, method: str, url: str, timeout: float, within: float):
        self.url = url
        self.expired = False
        try:
            self.connection, path = _connection(url, timeout)
            self.connection.connect()
        except (OSError, ValueError, http.client.HTTPException) as err:
            raise PeerUnreachable(f"{url}: {err or type(err).__name__}") from None
        peer = self.connection.sock.getpeername()[0]
        # What the name led to, whatever it resolved to when checked.
        if (why := peer_refusal(peer)) is not None:
            self.connection.close()
            raise ArtifactError(f"{url}: leads to {peer}, {why}")
        self._timer = threading.Timer(within, self._cut)
        self._timer.daemon = True
        self._timer.start()
        try:
            self.connection.request(method, path, headers={"Accept": "application/octet-stream"})
            self.response = self.connection.getresponse()
        except (OSError, http.client.HTTPException) as err:
            self.close()
            raise self.failed(err) from None

    def _cut(self) -> None:
        self.expired = True
        with contextlib.suppress(OSError):
            self.connection.sock.shutdown(socket.SHUT_RDWR)

    def failed(self, err: Exception) -> PeerUnreachable:
        """The error for a transfer that broke off (or was cut off at its deadline)."""
        if self.expired:
            return PeerUnreachable(f"{self.url}: too slow (cut off after its deadline)")
        return PeerUnreachable(f"{self.url}: {err or type(err).__name__}")

    def close(self) -> None:
        """Cancel the deadline and close the connection."""
        self._timer.cancel()
        self.connection.close()


def _refused(url: str, response: http.client.HTTPResponse) -> PeerUnavailable:
    status = response.status
    kind = PeerUnreachable if status >= 500 else PeerUnavailable
    said = "not there" if status in (403, 404) else f"{status} {response.reason}"
    return kind(f"{url}: {said}")


def fetch_object(location: str, digest: bytes, limit: int, out: BinaryIO,
                 timeout: float = 60.0) -> int:  # fmt: skip
    """Fetch artifact ``digest`` from the object-store prefix ``location`` into ``out`` (emptied
    first), hashing while it streams and stopping as soon as it passes ``limit`` bytes; the
    bytes received. ``timeout`` bounds each socket operation; the whole fetch may take
    ``timeout`` plus ``limit`` at :data:`MIN_RATE`."""
    url = object_url(location, digest)
    out.seek(0)
    out.truncate()
    exchange = _Exchange("GET", url, timeout, timeout + limit / MIN_RATE)
    response = exchange.response
    received, hasher = 0, hashlib.sha256()
    # http.client's parse of Content-Length (None when absent, malformed or chunked)
    declared = response.length
    try:
        if exchange.expired:  # cut off in its headers: they may have ended anywhere
            raise exchange.failed(ConnectionError("cut off in its headers"))
        if response.status != 200:
            raise _refused(url, response)
        if declared is None and not response.chunked:  # a close would end it: junk or cut short?
            raise ArtifactError(f"{url}: a body of no declared length (not an object store's "
                                "answer)")  # fmt: skip
        if declared is not None and declared > limit:
            raise ArtifactTooLarge(f"{url}: {declared} bytes, more than the {limit} it can be")
        while chunk := _read(exchange, CHUNK):
            if received + len(chunk) > limit:
                raise ArtifactError(f"{url}: sent more than the {limit} bytes allowed")
            out.write(chunk)  # this machine's disk: its errors are raised as they are
            hasher.update(chunk)
            received += len(chunk)
        # Cut off, or the connection lost mid-body (http.client's read(n) ends quietly then):
        # a truncated body, worth asking again, not a corrupt one.
        if exchange.expired or (declared is not None and received < declared):
            raise exchange.failed(ConnectionError(f"closed after {received} of {declared} bytes"))
    finally:
        exchange.close()
    if hasher.digest() != digest:
        raise ArtifactError(f"artifact {digest.hex()[:16]}… from {location} is corrupt")
    return received


def _read(exchange: _Exchange, size: int) -> bytes:
    """Up to ``size`` bytes of the response body; a network error is the store's."""
    try:
        return exchange.response.read(size)
    except (OSError, http.client.HTTPException) as err:
        raise exchange.failed(err) from None


def probe_object(location: str, digest: bytes, timeout: float) -> PeerUnreachable | None:
    """A ``HEAD`` of artifact ``digest``: the error if the store cannot be reached or fails
    within ``timeout``, else None (whether the object is there or not)."""
    try:
        exchange = _Exchange("HEAD", object_url(location, digest), timeout, timeout)
    except PeerUnreachable as err:
        return err
    exchange.close()
    status = exchange.response.status
    return _refused(location, exchange.response) if status >= 500 else None


class ObjectStore:
    """Where a host publishes one run's artifacts: ``s3://BUCKET/PREFIX/RUN/HOST`` (hosts may
    share a bucket: each prunes only its own) written with boto3 (credentials from the
    environment, ``AWS_PROFILE`` or ``~/.aws``; multipart above :data:`PART_BYTES`), read by
    everyone at :attr:`location`."""

    def __init__(
        self, url: str, run_id: str, host: str, endpoint: str = "", public_url: str = ""
    ):  # fmt: skip
        import boto3  # only a host with an object store needs the S3 client
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        if (problem := s3_url_problem(url)) is not None:
            raise ArtifactError(problem)
        match = _S3_URL.fullmatch(url)
        self.bucket, prefix = match.group(1), match.group(2).strip("/")
        self.prefix = f"{prefix}/{run_id}/{host}" if prefix else f"{run_id}/{host}"
        session = boto3.session.Session()
        region = session.region_name or "us-east-1"
        self._client = session.client(
            "s3", endpoint_url=endpoint or None, region_name=region,
            config=Config(s3={"addressing_style": "path" if endpoint else "virtual"},
                          retries={"max_attempts": 4, "mode": "standard"},
                          connect_timeout=10, read_timeout=60),
        )  # fmt: skip
        self._transfer = TransferConfig(
            multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=4
        )
        if public_url:
            base = public_url.rstrip("/")
        elif endpoint:
            base = f"{endpoint.rstrip('/')}/{self.bucket}" + (f"/{prefix}" if prefix else "")
        else:
            base = f"https://{self.bucket}.s3.{region}.amazonaws.com" + (
                f"/{prefix}" if prefix else ""
            )
        self.location = f"{base}/{run_id}/{host}"
        if (problem := url_problem(self.location)) is not None:
            raise ArtifactError(f"the object store's public URL {self.location}: {problem}")
        self.published: set[bytes] = set()  # known to be in the bucket

    def _key(self, digest: bytes) -> str:
        return f"{self.prefix}/{digest.hex()}"

    def _failed(self, doing: str, err: Exception) -> ArtifactError:
        from botocore.exceptions import ClientError, NoCredentialsError

        if isinstance(err, NoCredentialsError):
            why = ("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                   "AWS_PROFILE (a profile in ~/.aws/credentials)")  # fmt: skip
        elif isinstance(err, ClientError):
            error = err.response.get("Error", {})
            why = f"{error.get('Code', '?')}: {error.get('Message') or 'refused'}"
        else:
            why = str(err) or type(err).__name__
        return ArtifactError(f"object store s3://{self.bucket}/{self.prefix}: {doing}: {why}")

    def has(self, digest: bytes) -> bool:
        """Whether the bucket holds ``digest``."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(digest))
        except ClientError as err:
            # 403: what S3 answers for a missing key to a writer without s3:ListBucket
            if err.response.get("Error", {}).get("Code") in ("403", "404", "NoSuchKey",
                                                             "NotFound", "Forbidden"):  # fmt: skip
                return False
            raise self._failed("HEAD", err) from None
        except BotoCoreError as err:
            raise self._failed("HEAD", err) from None
        return True

    def publish(self, path: Path, digest: bytes) -> bool:
        """Upload the file ``path`` as artifact ``digest`` unless this store holds it already
        (it is content-addressed); whether it uploaded. Raises :class:`ArtifactError`."""
        from botocore.exceptions import BotoCoreError, ClientError

        if digest in self.published or self.has(digest):
            self.published.add(digest)
            return False
        with path.open("rb") as f:  # a damaged local copy is never published
            if hashlib.file_digest(f, "sha256").digest() != digest:
                raise ArtifactError(f"{path} does not hash to {digest.hex()[:16]}…: not published")
        try:
            self._client.upload_file(
                str(path), self.bucket, self._key(digest), Config=self._transfer,
                ExtraArgs={"ContentType": "application/octet-stream"},
            )  # fmt: skip
        except (BotoCoreError, ClientError, OSError) as err:
            raise self._failed(f"uploading {digest.hex()[:16]}…", err) from None
        self.published.add(digest)
        return True

    def delete(self, digest: bytes) -> None:
        """Remove artifact ``digest`` (nothing if absent)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(digest))
        except (BotoCoreError, ClientError) as err:
            raise self._failed("DELETE", err) from None
        self.published.discard(digest)

    def delete_all(self, digests: Iterable[bytes]) -> None:
        """Remove each of ``digests`` (what pruning deletes locally)."""
        for digest in dict.fromkeys(digests):
            self.delete(digest)

    def abort_stale_uploads(self, older_than: float = STALE_UPLOAD_SECONDS) -> int:
        """Abort the multipart uploads under this host's prefix begun more than ``older_than``
        seconds ago (a host killed mid-upload leaves its parts stored, and billed, for ever:
        a republish begins a new upload and a delete never sees them); how many. Raises
        :class:`ArtifactError`."""
        from botocore.exceptions import BotoCoreError, ClientError

        cutoff = time.time() - older_than
        aborted = 0
        try:
            pages = self._client.get_paginator("list_multipart_uploads")
            for page in pages.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}/"):
                for upload in page.get("Uploads", []):
                    if upload["Initiated"].timestamp() < cutoff:
                        self._client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        aborted += 1
        except (BotoCoreError, ClientError) as err:
            raise self._failed("aborting unfinished uploads", err) from None
        return aborted

    def check(self, timeout: float = 10.0) -> None:
        """Write a small object and read it back as a stranger would (no credentials): raises
        :class:`ArtifactError` with what to fix if the store cannot be written, or its prefix
        is not public-read at :attr:`location`."""
        from botocore.exceptions import BotoCoreError, ClientError

        digest = content_hash(_PROBE)
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(digest), Body=_PROBE)
        except (BotoCoreError, ClientError) as err:
            raise self._failed("writing a test object", err) from None
        try:
            fetch_object(self.location, digest, len(_PROBE), io.BytesIO(), timeout)
        except ArtifactError as err:
            raise ArtifactError(
                f"readers cannot fetch this host's artifacts ({err}): make "
                f"s3://{self.bucket}/{self.prefix.rsplit('/', 2)[0]}/* public-read (a bucket "
                f'policy allowing s3:GetObject to Principal "*"), or give the URL readers '
                "reach it at (object_store_public_url)"
            ) from None


def public_read_policy(bucket: str, prefix: str = "") -> str:
    """An S3 bucket policy letting anyone ``GetObject`` under ``prefix`` (and nothing else)."""
    resource = f"arn:aws:s3:::{bucket}/{prefix.strip('/') + '/' if prefix.strip('/') else ''}*"
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "DilochainPublicRead", "Effect": "Allow", "Principal": "*",
        "Action": "s3:GetObject", "Resource": resource,
    }]})  # fmt: skip
