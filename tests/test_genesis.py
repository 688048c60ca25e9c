"""Genesis documents: validation errors name the field."""

from __future__ import annotations

import json

import pytest

from genesis.models import GenesisDoc, GenesisError, load_genesis, parse_genesis, save_genesis
from tests.helpers import wallet

ADDRESS = str(wallet(1).address())


def test_round_trip(tmp_path):
    doc = (
        GenesisDoc(chain_id="c-1")
        .with_account(ADDRESS, {"udlc": 5})
        .with_account(ADDRESS, {"udlc": 7, "stake": 1})
    )
    save_genesis(doc, tmp_path / "g.json")
    loaded = load_genesis(tmp_path / "g.json")
    assert loaded == doc
    assert {c.denom: c.amount for c in loaded.accounts[0].coins} == {"udlc": 12, "stake": 1}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"chain_id": "bad id!"}, "chain_id"),
        ({"accounts": [{"address": "dilo1nope", "coins": []}]}, "accounts.0.address"),
        ({"accounts": [{"address": ADDRESS, "coins": [{"denom": "udlc", "amount": -1}]}]},
         "accounts.0.coins.0.amount"),
        ({"params": {"fees": {"min_gas_price": "-1"}}}, "params.fees.min_gas_price"),
        ({"params": {"poc": {"unbonding_period_seconds": "soon"}}},
         "params.poc.unbonding_period_seconds"),
        ({"surprise": 1}, "surprise"),
    ],
)  # fmt: skip
def test_bad_fields_are_named(patch, field):
    with pytest.raises(GenesisError) as err:
        parse_genesis({"chain_id": "ok", **patch}, "genesis.json")
    assert f"field {field}:" in str(err.value)


def test_duplicate_accounts_refused():
    account = {"address": ADDRESS, "coins": []}
    with pytest.raises(GenesisError, match="appears twice"):
        parse_genesis({"chain_id": "ok", "accounts": [account, account]})


def test_unreadable_files(tmp_path):
    with pytest.raises(GenesisError, match="no such genesis file"):
        load_genesis(tmp_path / "missing.json")
    (tmp_path / "g.json").write_text("{not json")
    with pytest.raises(GenesisError, match="not valid JSON"):
        load_genesis(tmp_path / "g.json")
    (tmp_path / "g.json").write_text(json.dumps({"chain_id": ""}))
    with pytest.raises(GenesisError, match="chain_id"):
        load_genesis(tmp_path / "g.json")
