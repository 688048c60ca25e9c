"""The background checkpoint writer: snapshots at submit time, canonical bytes and hashes in
order, a sink that gets each, and errors that surface."""

from __future__ import annotations

import hashlib

import pytest
import torch

from dilochain.training.checkpoint_writer import CheckpointWriter
from dilochain.training.tensor_codec import decode_state, encode_state


def test_snapshots_are_taken_at_submit_and_come_back_in_order():
    live = {"w": torch.zeros(1000), "step": torch.tensor(0)}
    received = []
    writer = CheckpointWriter(lambda data, digest: received.append((data, digest)))
    expected = []
    for step in range(5):
        live["w"].add_(1.0)  # training goes on in place after every submit
        live["step"].fill_(step)
        expected.append(encode_state(live))
        writer.submit(live)
    live["w"].mul_(0)
    checkpoints, hashes = writer.results()
    assert [bytes(c) for c in checkpoints] == expected
    assert hashes == [hashlib.sha256(c).digest() for c in expected]
    assert [(bytes(c), d) for c, d in received] == list(zip(expected, hashes, strict=True))
    assert float(decode_state(checkpoints[-1])["w"][0]) == 5.0


def test_a_failing_sink_fails_the_round():
    def full_disk(data, digest):
        raise OSError("No space left on device")

    writer = CheckpointWriter(full_disk)
    writer.submit({"w": torch.ones(3)})
    with pytest.raises(OSError, match="No space"):
        writer.results()
