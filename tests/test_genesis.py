"""Genesis documents: validation errors name the field."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from dilochain.genesis.document import (
    GenesisDoc,
    GenesisError,
    GenesisValidator,
    PubKey,
    load_genesis,
    parse_genesis,
    save_genesis,
)
from dilochain.testutil import wallet

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
        ({"app_state": {"accounts": [{"address": "dilo1nope", "coins": []}]}},
         "app_state.accounts.0.address"),
        ({"app_state": {"accounts": [{"address": ADDRESS,
                                      "coins": [{"denom": "udlc", "amount": -1}]}]}},
         "app_state.accounts.0.coins.0.amount"),
        ({"app_state": {"params": {"fees": {"min_gas_price": "-1"}}}},
         "app_state.params.fees.min_gas_price"),
        ({"app_state": {"params": {"poc": {"unbonding_period_seconds": "soon"}}}},
         "app_state.params.poc.unbonding_period_seconds"),
        ({"app_state": {"params": {"poc": {"beacon_reveal_blocks": 0}}}},
         "app_state.params.poc.beacon_reveal_blocks"),
        ({"app_state": {"params": {"rewards": {"vesting_epochs": 0}}}},
         "app_state.params.rewards.vesting_epochs"),
        ({"app_state": {"params": {"poc": {"screen_loss_margin": "-0.1"}}}},
         "app_state.params.poc.screen_loss_margin"),
        ({"app_state": {"params": {"poc": {"beacon_reveal_blocks": 1}}}},
         "app_state.params.poc.beacon_reveal_blocks"),
        ({"app_state": {"params": {"poc": {"verdict_open_blocks": 1}}}},
         "app_state.params.poc.verdict_open_blocks"),
        ({"app_state": {"params": {"poc": {"quorum": 1}}}}, "app_state.params.poc.quorum"),
        ({"app_state": {"params": {"auth": {"max_msgs_per_tx": 8}}}}, "app_state.params"),
        ({"consensus_params": {"block": {"max_bytes": "0"}}}, "consensus_params.block.max_bytes"),
        # Past these, a release time or height overflows int64 and every end of block fails.
        ({"app_state": {"params": {"validator_set": {"release_seconds": 10**9 + 1}}}},
         "app_state.params.validator_set.release_seconds"),
        ({"app_state": {"params": {"validator_set": {"release_blocks": 10**12 + 1}}}},
         "app_state.params.validator_set.release_blocks"),
        ({"app_state": {"params": {"validator_set": {"downtime_jail_blocks": 10**20}}}},
         "app_state.params.validator_set.downtime_jail_blocks"),
        ({"app_state": {"params": {"validator_set": {"signed_blocks_window": 10**12 + 1}}}},
         "app_state.params.validator_set.signed_blocks_window"),
        ({"validators": [{"address": "00" * 20, "power": "10",
                          "pub_key": {"value": base64.b64encode(b"k" * 32).decode()}}]},
         "validators.0"),
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
        parse_genesis({"chain_id": "ok", "app_state": {"accounts": [account, account]}})


def test_written_in_cometbft_layout(tmp_path):
    key = base64.b64encode(b"v" * 32).decode()
    validator = GenesisValidator(
        address=PubKey(value=key).address(), pub_key=PubKey(value=key), power=10
    )
    doc = GenesisDoc(chain_id="c-1").with_validators([validator]).with_account(ADDRESS, {"udlc": 5})
    save_genesis(doc, tmp_path / "g.json")
    data = json.loads((tmp_path / "g.json").read_text())
    # CometBFT's JSON: int64 values as strings, the app's part under app_state.
    assert data["initial_height"] == "1"
    assert data["consensus_params"]["block"] == {"max_bytes": "22020096", "max_gas": "-1"}
    assert data["validators"][0]["power"] == "10"
    assert data["validators"][0]["address"] == hashlib.sha256(b"v" * 32).digest()[:20].hex().upper()
    assert data["app_state"]["accounts"][0]["address"] == ADDRESS
    assert load_genesis(tmp_path / "g.json") == doc


def test_unreadable_files(tmp_path):
    with pytest.raises(GenesisError, match="no such genesis file"):
        load_genesis(tmp_path / "missing.json")
    (tmp_path / "g.json").write_text("{not json")
    with pytest.raises(GenesisError, match="not valid JSON"):
        load_genesis(tmp_path / "g.json")
    (tmp_path / "g.json").write_text(json.dumps({"chain_id": ""}))
    with pytest.raises(GenesisError, match="chain_id"):
        load_genesis(tmp_path / "g.json")
