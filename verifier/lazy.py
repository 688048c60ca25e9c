"""Verifiers that vote without replaying, for the tests that show each one caught:

- ``always-fail`` votes fail without looking at anything (no fingerprint);
- ``always-pass`` votes pass with the fingerprint of the revealed end checkpoint, the closest
  state a lazy verifier has to the one a replay passes through;
- ``copy`` seals another assigned verifier's commitment and opens what that verifier opened.
"""

from __future__ import annotations

from dilochain.artifacts.store import ArtifactError, ArtifactStore
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgOpenVerdict, MsgSubmitVerdict
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
from dilochain.training.checkpoint_codec import fetch_checkpoint
from dilochain.training.tensor_codec import CodecError
from dilochain.verifier.ballots import BallotBox
from dilochain.verifier.fingerprint import fingerprint
from dilochain.verifier.replay import Policy
from dilochain.verifier.verdicts import Verdict


def lazy_verdict(behavior: str, c: Challenge, store: ArtifactStore, policy: Policy) -> Verdict:
    """A vote cast without replaying the segment."""
    passed, reason = behavior != "always-fail", f"{behavior}: not replayed"
    if behavior != "always-pass":  # only always-pass guesses a fingerprint; copy copies a seal
        return Verdict(passed, reason)
    try:
        start, end = (fetch_checkpoint(store.get, h) for h in (c.start_hash, c.end_hash))
    except (ArtifactError, CodecError):
        return Verdict(passed, reason)
    return Verdict(passed, reason, fingerprint=fingerprint(end, start, c, policy.mode,
                                                           policy.tolerance))  # fmt: skip


class CopyingBallots(BallotBox):
    """Seals what another verifier sealed and opens what it opened (the address that the
    commitment binds makes both worthless)."""

    def _other(self, c: Challenge, opened: bool):
        return next((v for v in c.votes if v.verifier != self.verifier and v.opened >= opened),
                    None)  # fmt: skip

    def seal(self, c: Challenge, verdict: Verdict) -> MsgSubmitVerdict | None:
        """Another verifier's commitment on ``c``, once one is on chain."""
        other = self._other(c, opened=False)
        if other is None:
            return None
        return MsgSubmitVerdict(verifier=self.verifier, run_id=c.run_id, round=c.round,
                                host=c.host, segment=c.segment,
                                commitment=other.commitment)  # fmt: skip

    def opening(self, c: Challenge) -> MsgOpenVerdict | None:
        """Another verifier's opening on ``c``, once one is on chain."""
        other = self._other(c, opened=True)
        if other is None:
            return None
        return MsgOpenVerdict(verifier=self.verifier, run_id=c.run_id, round=c.round,
                              host=c.host, segment=c.segment, passed=other.passed,
                              fingerprint=other.fingerprint, salt=bytes(32),
                              evidence_hash=other.evidence_hash)  # fmt: skip
