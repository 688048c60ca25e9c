"""A round's proof work off the training loop: each checkpoint is snapshotted (one copy to the
CPU), then encoded, hashed and handed to a sink (the artifact store) by a background thread
while the next inner steps run.

The encodings and hashes are the canonical ones (``checkpoint_codec.CheckpointEncoding``: the
weights and the moments each a ``tensor_codec`` encoding, and their index); only where they run
changes. Each encoding is a header plus views of the snapshot's tensors, and hashlib and file
writes release the GIL, so the thread holds the GIL for next to nothing: on a GPU host the work
costs the training loop one device-to-host copy per checkpoint, and on a CPU host whatever CPU
time and memory bandwidth the thread takes from the training threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from dilochain.training.checkpoint_codec import CheckpointEncoding

Sink = Callable[[CheckpointEncoding], object]  # a checkpoint's encodings, hashed


class CheckpointWriter:
    """Encodes and hashes checkpoints in order on one background thread."""

    def __init__(self, sink: Sink | None = None):
        self.sink = sink
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending: list[Future[tuple[CheckpointEncoding, bytes]]] = []
        self.busy_seconds = 0.0  # the thread's time encoding, hashing and sinking

    def submit(self, state: dict[str, torch.Tensor]) -> None:
        """Snapshot ``state`` now (its tensors may be views of live training state) and queue
        its encoding."""
        snapshot = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
        self._pending.append(self._pool.submit(self._encode, snapshot))

    def _encode(self, snapshot: dict[str, torch.Tensor]) -> tuple[CheckpointEncoding, bytes]:
        started = time.perf_counter()
        encoding = CheckpointEncoding.of(snapshot)
        digest = encoding.digest()
        if self.sink is not None:
            self.sink(encoding)
        self.busy_seconds += time.perf_counter() - started
        return encoding, digest

    def results(self) -> tuple[list[CheckpointEncoding], list[bytes]]:
        """Every checkpoint's encoding and hash, in submission order (waits for the thread; its
        errors are raised here). The writer is finished afterwards."""
        try:
            done = [f.result() for f in self._pending]
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
        return [d for d, _ in done], [h for _, h in done]
