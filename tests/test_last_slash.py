"""What a host or verifier that bonds again after a slash tells its operator: a fault probe
found a host slashed for a reveal it missed while restarting, which then bonded and registered
again without a word of why, and a verifier that said only "a slash"."""

from __future__ import annotations

from types import SimpleNamespace

from dilochain.poc_client import last_slash
from dilochain.protocol.pb.poc.v1.types_pb2 import Slash


def test_the_last_slash_of_an_address_in_a_run_is_told_with_its_reason():
    slashes = [
        Slash(address="a", run_id="r1", round=3, amount="3000000", reason="failed a challenge",
              height=361),
        Slash(address="a", run_id="r2", round=9, amount="5", reason="withheld its vote",
              height=900),
        Slash(address="a", run_id="r1", round=1, amount="1", reason="older", height=120),
    ]  # fmt: skip
    poc = SimpleNamespace(slashes=lambda address: slashes if address == "a" else [])
    assert last_slash(poc, "a", "r1") == (
        "slashed 3000000udlc at block 361 in run r1 round 3: failed a challenge")  # fmt: skip
    assert last_slash(poc, "a") == "slashed 5udlc at block 900 in run r2 round 9: withheld its vote"
    assert last_slash(poc, "b") == "" and last_slash(poc, "a", "r3") == ""
