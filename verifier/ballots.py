"""A verifier's sealed votes: each verdict is committed on chain as a hash
(``protocol/verdict.py``) and recorded here, in a SQLite file in the verifier's home, so the
verifier opens exactly what it sealed, even after a restart. A record is of one challenge's
subject (the checkpoint hashes its host revealed): a record of the same run id, round, host
and segment on another chain (a chain reset under the same home) is never sealed or opened
for this one."""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from dilochain.protocol import verdict as sealing
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgOpenVerdict, MsgSubmitVerdict
from dilochain.protocol.pb.poc.v1.types_pb2 import Challenge
from dilochain.verifier.verdicts import Verdict

log = logging.getLogger(__name__)
_SCHEMA = """CREATE TABLE IF NOT EXISTS ballots (
    run_id TEXT, round INTEGER, host TEXT, segment INTEGER,
    passed INTEGER, fingerprint BLOB, salt BLOB, evidence BLOB, subject BLOB,
    PRIMARY KEY (run_id, round, host, segment))"""


_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # a file that is not a database


def _challenge_key(c: Challenge) -> tuple[str, int, str, int]:
    return (c.run_id, c.round, c.host, c.segment)


def _subject(c: Challenge) -> bytes:
    """What a vote on ``c`` judges: the checkpoint hashes its host revealed."""
    return bytes(c.start_hash) + bytes(c.end_hash) + bytes(c.final_hash)


def _of_another(row_subject: bytes | None, c: Challenge) -> bool:
    return row_subject is not None and bytes(row_subject) != _subject(c)


class BallotBox:
    """Seals verdicts and opens them later, for one verifier address."""

    def __init__(self, path: Path, verifier: str):
        self.path = path
        self.verifier = verifier
        self._unrecorded: set[tuple[str, int, str, int]] = set()  # reported once each
        try:
            self._create()
        except sqlite3.DatabaseError as err:  # a damaged disk: the beacon duties go on
            if getattr(err, "sqlite_errorcode", None) not in _DAMAGED:
                raise  # locked, unreadable, a disk error: the file may be whole
            damaged = path.with_name(path.name + ".damaged")
            for suffix in ("", "-wal", "-shm"):
                if (part := Path(f"{path}{suffix}")).exists():
                    part.replace(f"{damaged}{suffix}")
            log.error("%s is unreadable (%s), moved to %s: votes sealed before it cannot be "
                      "opened and will be slashed", path, err, damaged.name)  # fmt: skip
            self._create()

    def _create(self) -> None:
        with closing(self._db()) as db, db:
            db.execute(_SCHEMA)
            db.execute("SELECT count(*) FROM ballots").fetchone()  # reads the file through
            # A file of an earlier version: its records (subject NULL) open as they did.
            if "subject" not in {row[1] for row in db.execute("PRAGMA table_info(ballots)")}:
                db.execute("ALTER TABLE ballots ADD COLUMN subject BLOB")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def seal(self, c: Challenge, verdict: Verdict) -> MsgSubmitVerdict | None:
        """Record ``verdict`` on ``c`` (durably, before it is sent) and return the sealed vote.
        A challenge sealed before keeps its first record, and the vote is that one's: the
        first may have landed on chain (sent just before a restart), and only its record
        opens it."""
        row = (*_challenge_key(c), int(verdict.passed), verdict.fingerprint,
               os.urandom(sealing.SALT_BYTES), verdict.evidence_hash, _subject(c))  # fmt: skip
        with closing(self._db()) as db, db:
            db.execute("INSERT OR IGNORE INTO ballots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            passed, fingerprint, salt, subject = db.execute(
                "SELECT passed, fingerprint, salt, subject FROM ballots"
                " WHERE run_id = ? AND round = ? AND host = ? AND segment = ?",
                _challenge_key(c),
            ).fetchone()
            if _of_another(subject, c):  # a stale record: this challenge's vote replaces it
                log.warning("my record for %s round %d %s segment %d judged other checkpoints "
                            "(another chain's run of the same id?): sealing this vote instead",
                            *_challenge_key(c))  # fmt: skip
                db.execute("REPLACE INTO ballots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                passed, fingerprint, salt = row[4:7]
        sealed = sealing.commitment(self.verifier, c.run_id, c.round, c.host, c.segment,
                                    bool(passed), fingerprint, salt)  # fmt: skip
        return MsgSubmitVerdict(verifier=self.verifier, run_id=c.run_id, round=c.round,
                                host=c.host, segment=c.segment, commitment=sealed)  # fmt: skip

    def opening(self, c: Challenge) -> MsgOpenVerdict | None:
        """The opening of this verifier's sealed vote on ``c`` (None if it has no record)."""
        try:
            with closing(self._db()) as db:
                row = db.execute(
                    "SELECT passed, fingerprint, salt, evidence, subject FROM ballots"
                    " WHERE run_id = ? AND round = ? AND host = ? AND segment = ?",
                    _challenge_key(c),
                ).fetchone()
        except sqlite3.DatabaseError as err:  # one damaged page: the other votes still open
            log.error("my vote on %s round %d %s segment %d cannot be read: %s",
                      *_challenge_key(c), err)  # fmt: skip
            return None
        if row is None or _of_another(row[4], c):
            if _challenge_key(c) not in self._unrecorded:
                self._unrecorded.add(_challenge_key(c))
                log.error("no record of my vote on %s round %d %s segment %d: it cannot be "
                          "opened and will be slashed", *_challenge_key(c))  # fmt: skip
            return None
        passed, fingerprint, salt, evidence, _ = row
        return MsgOpenVerdict(verifier=self.verifier, run_id=c.run_id, round=c.round,
                              host=c.host, segment=c.segment, passed=bool(passed),
                              fingerprint=fingerprint, salt=salt,
                              evidence_hash=evidence)  # fmt: skip

    def forget_before(self, run_id: str, round_: int) -> None:
        """Drop the records of a run's rounds before ``round_`` (their votes are decided)."""
        with closing(self._db()) as db, db:
            db.execute("DELETE FROM ballots WHERE run_id = ? AND round < ?", (run_id, round_))
