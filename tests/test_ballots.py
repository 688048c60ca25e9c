"""A verifier's sealed votes (verifier/ballots.py): what it seals it can open after a restart;
a copied vote opens to nothing."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from dilochain.protocol import verdict as sealing
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge, SealedVote
from dilochain.verifier.ballots import BallotBox
from dilochain.verifier.lazy import CopyingBallots
from dilochain.verifier.verdicts import Verdict

ME, OTHER = "dilo1me", "dilo1other"


def challenge(segment=0, round_=2, votes=(), final=b"\xf1" * 32):
    return Challenge(run_id="r", round=round_, host="dilo1host", segment=segment, votes=votes,
                     start_hash=b"\xa0" * 32, end_hash=b"\xa1" * 32, final_hash=final)  # fmt: skip


def opens(msg, sealed) -> bool:
    """Whether the chain would accept ``msg`` as the opening of ``sealed``."""
    again = sealing.commitment(msg.verifier, msg.run_id, msg.round, msg.host, msg.segment,
                               msg.passed, msg.fingerprint, msg.salt)  # fmt: skip
    return again == sealed.commitment


def test_a_sealed_vote_opens_after_a_restart(tmp_path):
    path = tmp_path / "ballots.sqlite"
    verdict = Verdict(False, "mismatch", 0.5, fingerprint=b"\x09" * 32)
    sealed = BallotBox(path, ME).seal(challenge(), verdict)
    assert sealed.verifier == ME and len(sealed.commitment) == 32
    assert b"\x09" * 32 not in sealed.SerializeToString()  # the vote is hidden
    restarted = BallotBox(path, ME)
    msg = restarted.opening(challenge())
    assert (msg.passed, msg.fingerprint, msg.evidence_hash) == (False, b"\x09" * 32,
                                                                verdict.evidence_hash)  # fmt: skip
    assert opens(msg, sealed)
    # Two seals of the same vote differ (fresh salts), so a vote cannot be guessed from another.
    assert restarted.seal(challenge(1), verdict).commitment != sealed.commitment


def test_a_challenge_sealed_again_keeps_its_first_vote(tmp_path):
    """A vote sent just before a restart may land after it, when the challenge looks unvoted and
    is replayed and sealed again: the second seal is the first one, so what landed opens."""
    path = tmp_path / "ballots.sqlite"
    first = BallotBox(path, ME).seal(challenge(), Verdict(True, "replayed", fingerprint=b"\1" * 32))
    again = BallotBox(path, ME).seal(challenge(), Verdict(False, "unavailable"))
    assert again.commitment == first.commitment
    msg = BallotBox(path, ME).opening(challenge())
    assert msg.passed and msg.fingerprint == b"\1" * 32 and opens(msg, first)


def test_forgetting_decided_rounds(tmp_path, caplog):
    box = BallotBox(tmp_path / "b.sqlite", ME)
    for round_ in (1, 2, 3):
        box.seal(challenge(round_=round_), Verdict(True, "ok"))
    box.forget_before("r", 3)
    assert box.opening(challenge(round_=3)) is not None
    with caplog.at_level(logging.ERROR):
        assert box.opening(challenge(round_=2)) is None
        assert box.opening(challenge(round_=2)) is None
    assert sum("cannot be opened" in r.message for r in caplog.records) == 1  # reported once


def test_a_copied_vote_cannot_be_opened(tmp_path):
    theirs = BallotBox(tmp_path / "theirs.sqlite", OTHER)
    sealed = theirs.seal(challenge(), Verdict(True, "replayed", fingerprint=b"\x01" * 32))
    copier = CopyingBallots(tmp_path / "mine.sqlite", ME)
    assert copier.seal(challenge(), Verdict(True, "")) is None  # nothing to copy yet
    on_chain = challenge(votes=[SealedVote(verifier=OTHER, commitment=sealed.commitment)])
    copied = copier.seal(on_chain, Verdict(True, ""))
    assert copied.verifier == ME and copied.commitment == sealed.commitment
    assert copier.opening(on_chain) is None  # the other has not opened yet
    opened = theirs.opening(challenge())
    on_chain.votes[0].opened, on_chain.votes[0].fingerprint = True, opened.fingerprint
    mimic = copier.opening(on_chain)
    copied_vote = SealedVote(verifier=ME, commitment=copied.commitment)
    assert mimic.fingerprint == opened.fingerprint and not opens(mimic, copied_vote)
    assert opens(opened, on_chain.votes[0])


def test_a_damaged_ballot_file_is_moved_aside_and_a_fresh_one_seals(tmp_path, caplog):
    """A damaged disk: the verifier starts all the same (its beacon reveals, owed whatever
    became of its votes, would be slashed if it stayed down), with one error line."""
    path = tmp_path / "ballots.sqlite"
    path.write_bytes(b"not a database, a damaged page" * 200)
    box = BallotBox(path, ME)
    assert (tmp_path / "ballots.sqlite.damaged").read_bytes().startswith(b"not a database")
    assert any("unreadable" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    sealed = box.seal(challenge(), Verdict(True, "replayed", fingerprint=b"\2" * 32))
    assert opens(box.opening(challenge()), sealed)


def test_a_ballot_file_another_connection_holds_is_never_moved_aside(tmp_path, monkeypatch):
    """Only a file that is not a database is damaged: one that is locked (or unreadable for a
    moment) keeps its sealed votes, which only it can open."""
    path = tmp_path / "ballots.sqlite"
    sealed = BallotBox(path, ME).seal(
        challenge(), Verdict(True, "replayed", fingerprint=b"\3" * 32)
    )
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(BallotBox, "_db", lambda self: sqlite3.connect(self.path, timeout=0.1))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        BallotBox(path, ME)
    holder.rollback()
    holder.close()
    assert not (tmp_path / "ballots.sqlite.damaged").exists()
    assert opens(BallotBox(path, ME).opening(challenge()), sealed)


def test_a_record_of_another_chains_challenge_is_never_sealed_or_opened(tmp_path, caplog):
    """A chain reset under the same verifier home: the new chain's run of the same id, round,
    host and segment judges other checkpoints. The old record neither opens for it nor is
    sealed in place of this chain's vote."""
    path = tmp_path / "ballots.sqlite"
    BallotBox(path, ME).seal(challenge(), Verdict(False, "mismatch", fingerprint=b"\4" * 32))
    reset = challenge(final=b"\xf2" * 32)
    box = BallotBox(path, ME)
    with caplog.at_level(logging.ERROR):
        assert box.opening(reset) is None
    assert any("cannot be opened" in r.getMessage() for r in caplog.records)
    sealed = box.seal(reset, Verdict(True, "replayed", fingerprint=b"\5" * 32))
    msg = BallotBox(path, ME).opening(reset)
    assert msg.passed and msg.fingerprint == b"\5" * 32 and opens(msg, sealed)
    assert box.seal(reset, Verdict(False, "again")).commitment == sealed.commitment  # kept now


def test_a_ballot_file_of_an_earlier_version_still_opens_its_votes(tmp_path):
    """Records written before ballots had subjects (no such column) open after an upgrade."""
    path = tmp_path / "ballots.sqlite"
    salt = b"\6" * 32
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE ballots (run_id TEXT, round INTEGER, host TEXT, segment INTEGER,"
                   " passed INTEGER, fingerprint BLOB, salt BLOB, evidence BLOB,"
                   " PRIMARY KEY (run_id, round, host, segment))")  # fmt: skip
        db.execute("INSERT INTO ballots VALUES ('r', 2, 'dilo1host', 0, 1, ?, ?, ?)",
                   (b"\7" * 32, salt, b""))  # fmt: skip
    db.close()
    sealed = SealedVote(verifier=ME, commitment=sealing.commitment(
        ME, "r", 2, "dilo1host", 0, True, b"\7" * 32, salt))  # fmt: skip
    box = BallotBox(path, ME)
    assert opens(box.opening(challenge()), sealed)
    assert box.seal(challenge(), Verdict(False, "x")).commitment == sealed.commitment
    assert box.opening(challenge(segment=1)) is None
    box.seal(challenge(segment=1), Verdict(True, "ok"))  # a new record, with its subject
    assert BallotBox(path, ME).opening(challenge(segment=1)).passed
