"""The most bytes each kind of a run's artifacts can take, from the run's model and compressor.

Every fetch of an artifact a chain names stops past its limit, so a peer that answers with
junk (a Sybil host or verifier listed among the sources) costs a fetcher no more bytes than
the artifact it asked for: 64 bytes for a checkpoint's index rather than the run's largest
artifact, which at 8B parameters is 64 GB.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig
from dilochain.training.checkpoint_codec import INDEX_BYTES, checkpoint_limits
from dilochain.training.compress import RESIDUAL_DTYPE, max_compressed_bytes
from dilochain.training.model import reference_params
from dilochain.training.tensor_codec import state_bound


@dataclass(frozen=True)
class ArtifactLimits:
    """Bytes at most of each kind of artifact of one run."""

    weights: int  # a checkpoint's steps and parameters
    moments: int  # a checkpoint's two AdamW moments
    state: int  # a global state: parameters and outer momentum
    residual: int  # an error-feedback residual
    pseudo_grad: int  # a compressed pseudo-gradient (and a round's start delta)
    index: int = INDEX_BYTES  # a checkpoint's index

    @staticmethod
    def of(cfg: RunConfig) -> ArtifactLimits:
        """The limits of run ``cfg``'s artifacts (raises ModelConfigError for a bad model)."""
        return _limits(cfg.model_config, cfg.compression)


@functools.lru_cache(maxsize=16)
def _limits(model_config: str, compression: str) -> ArtifactLimits:
    like = reference_params(model_config)
    weights, moments = checkpoint_limits(like)
    return ArtifactLimits(
        weights=weights,
        moments=moments,
        state=state_bound(like, copies=2),
        residual=state_bound(like, RESIDUAL_DTYPE.itemsize),
        pseudo_grad=max_compressed_bytes(like, compression),
    )
