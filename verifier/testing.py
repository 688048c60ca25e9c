"""Rounds as a verifier sees them, built from a host's training result (tests, benchmarks)."""

from __future__ import annotations

from pathlib import Path

from dilochain.artifacts.store import LocalArtifactStore
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, RoundCommit
from dilochain.protocol.schedule import derive_data_seed
from dilochain.training.checkpoint_codec import CheckpointEncoding, store_checkpoint
from dilochain.training.round_work import RoundResult
from dilochain.training.run_config import RunConfig
from dilochain.training.tensor_codec import encode_state


def publish_round(
    directory: Path,
    cfg: RunConfig,
    base: dict,
    result: RoundResult,
    host: str,
    round_: int = 1,
    residual_in: dict | None = None,
    start_delta: bytes | None = None,
    carried: dict | None = None,
) -> tuple[LocalArtifactStore, RoundCommit, list[Challenge]]:
    """Store a round's artifacts in ``directory`` (``residual_in``: the residual the host's last
    round left, None for none; ``start_delta``: in an overlapped run, the compressed
    pseudo-gradient of the host's last round; ``carried``: in a run with ``carry_inner_state``,
    that round's final checkpoint); its commit (final checkpoint opened) and a revealed
    challenge for every segment."""
    store = LocalArtifactStore(directory)
    base_hash = store.put(encode_state(base))
    residual_in_hash = store.put(encode_state(residual_in)) if residual_in is not None else b""
    start_delta_hash = store.put(start_delta) if start_delta is not None else b""
    kept = [CheckpointEncoding.of(carried)] if carried is not None else []
    for encoding in [*kept, *result.checkpoints]:
        store_checkpoint(store.put_parts, encoding)
    inner_in_hash = kept[0].digest() if kept else b""
    hashes = result.checkpoint_hashes
    commit = RoundCommit(
        run_id="r", round=round_, host=host, ckpt_root=result.ckpt_root,
        pseudo_grad_hash=store.put(result.pseudo_grad),
        data_seed=derive_data_seed(cfg.seed, host, round_), base_hash=base_hash,
        final_hash=hashes[-1], residual_hash=store.put(result.residual),
        residual_in_hash=residual_in_hash, start_delta_hash=start_delta_hash,
        inner_in_hash=inner_in_hash,
    )  # fmt: skip
    challenges = [
        Challenge(run_id="r", round=round_, host=host, segment=s, revealed=True,
                  start_hash=hashes[s], end_hash=hashes[s + 1], final_hash=hashes[-1])
        for s in range(len(hashes) - 1)
    ]  # fmt: skip
    return store, commit, challenges
