"""A round's proof work off the training loop: each checkpoint is snapshotted (one copy to the
CPU), then encoded, hashed and handed to a sink (the artifact store) by a background thread
while the next inner steps run.

The encoding and its hash are the canonical ones (``tensor_codec.encode_state``,
``protocol.hashing.content_hash``); only where they run changes. hashlib and file writes release
the GIL, so on a GPU host the work costs the training loop one device-to-host copy per
checkpoint, and on a CPU host whatever CPU time the thread takes from the training threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from dilochain.protocol.hashing import content_hash
from dilochain.training.tensor_codec import encode_state

Sink = Callable[[bytes, bytes], object]  # (canonical bytes, their sha256)


class CheckpointWriter:
    """Encodes and hashes checkpoints in order on one background thread."""

    def __init__(self, sink: Sink | None = None):
        self.sink = sink
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending: list[Future[tuple[bytes, bytes]]] = []
        self.busy_seconds = 0.0  # the thread's time encoding, hashing and sinking

    def submit(self, state: dict[str, torch.Tensor]) -> None:
        """Snapshot ``state`` now (its tensors may be views of live training state) and queue
        its encoding."""
        snapshot = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
        self._pending.append(self._pool.submit(self._encode, snapshot))

    def _encode(self, snapshot: dict[str, torch.Tensor]) -> tuple[bytes, bytes]:
        started = time.perf_counter()
        data = encode_state(snapshot)
        digest = content_hash(data)
        if self.sink is not None:
            self.sink(data, digest)
        self.busy_seconds += time.perf_counter() - started
        return data, digest

    def results(self) -> tuple[list[bytes], list[bytes]]:
        """Every checkpoint's bytes and hash, in submission order (waits for the thread; its
        errors are raised here). The writer is finished afterwards."""
        try:
            done = [f.result() for f in self._pending]
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
        return [d for d, _ in done], [h for _, h in done]
