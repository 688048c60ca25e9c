"""The node's resume record: per-round checkpoint hashes survive a save and load, a record
written before they were kept per round still loads, and an unreadable one is one clear error."""

from __future__ import annotations

import json

import pytest

from dilochain.node.errors import NodeError
from dilochain.node.resume import ResumeState


def test_round_trip_keeps_each_rounds_checkpoint_hashes(tmp_path):
    path = tmp_path / "state.json"
    record = ResumeState(4, b"\x01" * 32, 5, {4: [b"\x02" * 32, b"\x03" * 32], 5: [b"\x04" * 32]})
    record.save(path)
    assert ResumeState.load(path) == record
    assert ResumeState.load(tmp_path / "none.json") is None


def test_a_record_with_one_list_of_hashes_is_the_attempted_rounds(tmp_path):
    path = tmp_path / "state.json"
    old = {"round": 3, "global_hash": "ab" * 32, "attempted": 3, "checkpoint_hashes": ["cd" * 32]}
    path.write_text(json.dumps(old))
    assert ResumeState.load(path).checkpoint_hashes == {3: [b"\xcd" * 32]}
    path.write_text(json.dumps({**old, "attempted": -1, "checkpoint_hashes": []}))
    assert ResumeState.load(path).checkpoint_hashes == {}


@pytest.mark.parametrize("text", ["not json", "[]", '{"round": 1}',
                                  '{"round": 0, "global_hash": "zz", "attempted": 0, '
                                  '"checkpoint_hashes": {}}'])  # fmt: skip
def test_an_unreadable_record_is_one_clear_error(tmp_path, text):
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(NodeError, match=r"unreadable.*move it away"):
        ResumeState.load(path)
