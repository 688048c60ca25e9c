"""The encrypted keyring."""

from __future__ import annotations

import pytest
from cosmpy.aerial.wallet import LocalWallet

from dilochain.keyring import Keyring, KeyringError

MNEMONIC = (
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about"
)


def test_add_show_list_and_unseal(tmp_path):
    ring = Keyring(tmp_path)
    info, words = ring.add("alice", "pw-1")
    assert len(words.split()) == 24
    assert ring.show("alice") == info and info.address.startswith("dilo1")
    wallet = ring.wallet("alice", "pw-1")
    assert str(wallet.address()) == info.address
    assert str(LocalWallet.from_mnemonic(words, prefix="dilo").address()) == info.address
    ring.add("bob", "pw-1")
    assert [k.name for k in ring.list()] == ["alice", "bob"]
    assert "pw-1" not in (tmp_path / "alice.json").read_text()


def test_recover_from_mnemonic(tmp_path):
    info, _ = Keyring(tmp_path).add("k", "pw", MNEMONIC)
    assert info.address == str(LocalWallet.from_mnemonic(MNEMONIC, prefix="dilo").address())


def test_user_errors(tmp_path):
    ring = Keyring(tmp_path)
    ring.add("alice", "right")
    with pytest.raises(KeyringError, match="wrong keyring password"):
        ring.wallet("alice", "wrong")
    with pytest.raises(KeyringError, match="wrong keyring password"):
        ring.add("bob", "wrong")
    with pytest.raises(KeyringError, match="already exists"):
        ring.add("alice", "right")
    with pytest.raises(KeyringError, match="no key named"):
        ring.show("carol")
    with pytest.raises(KeyringError, match="invalid mnemonic"):
        ring.add("carol", "right", "not a real mnemonic")
    with pytest.raises(KeyringError, match="invalid key name"):
        ring.add("../evil", "right")
    with pytest.raises(KeyringError, match="must not be empty"):
        Keyring(tmp_path / "new").add("x", "")


def test_import_a_raw_key_and_delete_it(tmp_path):
    ring = Keyring(tmp_path / "ring")
    raw = bytes(range(1, 33))
    info = ring.import_private("imported", "pw", raw)
    assert ring.wallet("imported", "pw").signer().private_key_bytes == raw
    assert str(ring.wallet("imported", "pw").address()) == info.address
    for bad in (b"\x00" * 32, b"\xff" * 32):  # zero, and above the curve's order
        with pytest.raises(KeyringError, match="not a secp256k1 private key"):
            ring.import_private("bad", "pw", bad)
    with pytest.raises(KeyringError, match="already exists"):
        ring.import_private("imported", "pw", raw)
    assert ring.delete("imported") == info and ring.list() == []
    with pytest.raises(KeyringError, match="no key named"):
        ring.delete("imported")
