"""The node's configuration (pydantic): where the chain, keys, data and artifacts are."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dilochain.artifacts.object_store import s3_url_problem
from dilochain.endpoints import ChainAddresses
from dilochain.logs import LogFormat
from dilochain.metrics_http import MetricsAddress
from dilochain.protocol.endpoint import (
    PRIVATE_SWITCH,
    blob_service_problem,
    endpoint_problem,
    listen_problem,
    local_only,
    private_location_problem,
    url_problem,
)

# Host behaviours by name: honest, and the cheats of dilochain.node.cheats (tests, devnet).
BEHAVIOR_NAMES = ("honest", "random-pg", "no-training", "fewer-steps", "wrong-data", "bad-reveal",
                  "no-reveal", "copy-pg", "noisy")  # fmt: skip
BehaviorName = Literal[BEHAVIOR_NAMES]
# Those whose reveals are not what they committed: a restart reveals for them only once the
# behaviour (torch) is loaded; every other one reveals honestly from the resume record at once.
OWN_REVEALS = ("bad-reveal", "no-reveal")


# What an address or URL setting must be (empty: not set): why a value is not, by setting.
_FORMS = {"advertise_address": endpoint_problem, "object_store": s3_url_problem,
          "object_store_endpoint": url_problem, "object_store_public_url": url_problem,
          "blob_address": listen_problem}  # fmt: skip


class NodeConfig(BaseModel):
    """Everything ``dilochain node start`` needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path
    run_id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    chain: ChainAddresses = ("127.0.0.1:9090",)  # one node, or several to fail over between
    data: Path | None = None
    device: Literal["cpu", "cuda"] = "cpu"
    artifacts: Path | None = None
    blob_address: str = "127.0.0.1:0"
    # The address peers and verifiers dial for the blob service, registered on chain (behind
    # NAT: the public address and forwarded port); empty: the address it listens on.
    advertise_address: str = ""
    # s3://BUCKET[/PREFIX]: publish artifacts there (under PREFIX/RUN/HOST) and register its
    # public-read URL instead of a blob service (credentials: the AWS environment or profile).
    object_store: str = ""
    object_store_endpoint: str = ""  # the S3 API's URL (empty: AWS S3)
    object_store_public_url: str = ""  # where readers GET PREFIX (empty: from the endpoint)
    threads: int = Field(default=1, ge=1)
    nproc_per_node: int = Field(default=1, ge=1, le=64)  # local ranks training data-parallel
    compile: bool = False  # torch.compile the model (the chain must verify in tolerance mode)
    keep_global_states: int = Field(default=4, ge=1)  # newest rounds' global states kept
    archive_every: int = Field(default=10, ge=0)  # and every K-th round's (0: none)
    keep_decided_rounds: int = Field(default=1, ge=1)  # rounds a decided round's artifacts stay
    metrics_address: MetricsAddress = ""  # Prometheus metrics (empty: none)
    auto_claim: bool = True  # claim every claimable epoch and what has vested
    log_format: LogFormat = "text"
    behavior: BehaviorName = "honest"
    poll_seconds: float = Field(default=0.2, gt=0)  # between polls while blocks are not pushed

    @field_validator(*_FORMS)
    @classmethod
    def _well_formed(cls, value: str, info: ValidationInfo) -> str:
        if value and (problem := _FORMS[info.field_name](value)) is not None:
            raise ValueError(problem)
        return value

    def unreachable_blob_service(self, location: str = "") -> str | None:
        """Why no verifier could fetch this host's artifacts (None if they could): a blob
        service (or, given its ``location``, an object store) only this machine can reach,
        on a chain elsewhere, would get the host slashed, so ``node start`` refuses it before
        anything starts."""
        chain = tuple(self.chain)
        switch = os.environ.get(PRIVATE_SWITCH, "")
        if not location:
            return blob_service_problem(self.blob_address, self.advertise_address, chain, switch)
        if all(local_only(node) for node in chain) or not local_only(location):
            return private_location_problem(location, chain, switch)
        return (f"the object store's public URL {location} is reachable from this machine "
                f"only, but the chain ({', '.join(chain)}) is elsewhere: give the URL others "
                "read it at (--object-store-public-url)")  # fmt: skip

    @property
    def state_dir(self) -> Path:
        """Per-run state the node keeps to resume after a restart."""
        return self.home / "node" / self.run_id

    @property
    def artifact_dir(self) -> Path:
        """The local artifact store."""
        return self.artifacts or self.home / "artifacts"
