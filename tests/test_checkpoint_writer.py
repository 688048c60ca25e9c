"""The background checkpoint writer: snapshots at submit time, canonical bytes and hashes in
order, a sink that gets each, and errors that surface."""

from __future__ import annotations

import pytest
import torch

from dilochain.training.checkpoint_codec import CheckpointEncoding
from dilochain.training.checkpoint_writer import CheckpointWriter
from dilochain.training.tensor_codec import encode_state


def test_snapshots_are_taken_at_submit_and_come_back_in_order():
    live = {"w": torch.zeros(1000), "exp_avg/w": torch.zeros(1000), "step": torch.tensor(0)}
    received = []
    writer = CheckpointWriter(received.append)
    expected = []
    for step in range(5):
        live["w"].add_(1.0)  # training goes on in place after every submit
        live["exp_avg/w"].add_(2.0)
        live["step"].fill_(step)
        expected.append(CheckpointEncoding.of({k: v.clone() for k, v in live.items()}))
        writer.submit(live)
    live["w"].mul_(0)
    checkpoints, hashes = writer.results()
    assert hashes == [c.digest() for c in expected] == [c.digest() for c in received]
    for got, want in zip(checkpoints, expected, strict=True):
        assert (
            bytes(got.weights)
            == bytes(want.weights)
            == encode_state({"w": want.state()["w"], "step": want.state()["step"]})
        )
        assert bytes(got.moments) == bytes(want.moments)
    assert float(checkpoints[-1].state()["w"][0]) == 5.0
    assert float(checkpoints[-1].state()["exp_avg/w"][0]) == 10.0


def test_a_failing_sink_fails_the_round():
    def full_disk(checkpoint):
        raise OSError("No space left on device")

    writer = CheckpointWriter(full_disk)
    writer.submit({"w": torch.ones(3)})
    with pytest.raises(OSError, match="No space"):
        writer.results()
