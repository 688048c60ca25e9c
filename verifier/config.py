"""The verifier's configuration (pydantic): where its chain, key, data and artifacts are, and how
it runs. Torch-free: ``verifier run`` reads it, and starts its round duties, before torch loads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dilochain.endpoints import ChainAddresses
from dilochain.logs import LogFormat
from dilochain.metrics_http import MetricsAddress
from dilochain.protocol.endpoint import (
    PRIVATE_SWITCH,
    blob_service_problem,
    endpoint_problem,
    listen_problem,
)

UNSERVED = "hosts could not fetch from it what this verifier screened"


class VerifierConfig(BaseModel):
    """Where the verifier's chain, key, data and artifacts are, and how it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path
    key: str = Field(min_length=1)
    chain: ChainAddresses = ("127.0.0.1:9090",)  # one node, or several to fail over between
    data: tuple[Path, ...] = ()  # dataset folders (or folders of them); the default one besides
    device: Literal["cpu", "cuda"] = "cpu"  # where replays and screens run
    jobs: int = Field(default=2, ge=1, le=64)
    # Its blob service: hosts fetch there what it screened and replayed (an accepted
    # pseudo-gradient its host serves to screeners only); advertised as the node's setting is.
    blob_address: str = "127.0.0.1:0"
    advertise_address: str = ""
    metrics_address: MetricsAddress = ""  # Prometheus metrics (empty: none)
    auto_claim: bool = True  # claim every claimable epoch and what has vested
    log_format: LogFormat = "text"
    behavior: Literal["honest", "always-fail", "always-pass", "copy"] = "honest"  # lazy: tests
    # Loops wake at each block the chain pushes; these are their intervals while it cannot.
    poll_seconds: float = 0.3
    duties_poll_seconds: float = 0.1

    @field_validator("blob_address", "advertise_address")
    @classmethod
    def _well_formed(cls, value: str, info: ValidationInfo) -> str:
        check = listen_problem if info.field_name == "blob_address" else endpoint_problem
        if value and (problem := check(value)) is not None:
            raise ValueError(problem)
        return value

    def unreachable_blob_service(self) -> str | None:
        """Why hosts could not reach this verifier's blob service (None if they could): it
        then serves nothing and registers no endpoint (an advertised address that cannot work
        is refused at start instead, as a config error)."""
        return blob_service_problem(self.blob_address, self.advertise_address, tuple(self.chain),
                                    os.environ.get(PRIVATE_SWITCH, ""), UNSERVED)  # fmt: skip
