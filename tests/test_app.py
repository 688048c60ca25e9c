"""The state machine in process: txs, fees, rejections, collateral and the run registry."""

from __future__ import annotations

import json

import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import TxResponse
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, TxRaw
from google.protobuf.message import Message

from dilochain.chain.ante import FEE_COLLECTOR
from dilochain.chain.app import BLOCK_KEY, Application
from dilochain.chain.context import Context
from dilochain.chain.errors import codes
from dilochain.chain.modules import bank, collateral, registry
from dilochain.chain.modules.collateral import MODULE_ACCOUNT
from dilochain.chain.state import CacheStore
from dilochain.chain.store import ChainStore
from dilochain.genesis.document import GenesisDoc
from dilochain.protocol import model_config, schedule
from dilochain.protocol.address import encode_address
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM, PocParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateRun,
    MsgDepositCollateral,
    MsgRegisterHost,
    MsgWithdrawCollateral,
)
from dilochain.testutil import CHAIN_ID, FAKE_DATA, local_chain, signed_tx, wallet
from dilochain.training.run_config import make_run_config

ALICE, BOB = wallet(1), wallet(2)
A, B = str(ALICE.address()), str(BOB.address())
GAS = 200_000
FEE = GAS // 40


def send(to: str, amount: int) -> MsgSend:
    return MsgSend(from_address=A, to_address=to, amount=[Coin(denom=DENOM, amount=str(amount))])


@pytest.fixture
def chain(tmp_path):
    c = local_chain(tmp_path, {A: 10_000_000, B: 1_000_000})
    yield c
    c.app.store.close()


def balance(chain, address: str) -> int:
    return bank.balance(chain.app.committed_view(), address, DENOM)


def test_send_moves_tokens_and_charges_fee(chain):
    raw = signed_tx(ALICE, [send(B, 1234)], sequence=0, account_number=0)
    assert chain.broadcast(raw).code == 0
    (result,) = chain.block()
    assert result.code == 0, result.raw_log
    assert 0 < result.gas_used <= result.gas_wanted == GAS
    assert balance(chain, A) == 10_000_000 - 1234 - FEE
    assert balance(chain, B) == 1_000_000 + 1234
    assert balance(chain, FEE_COLLECTOR) == FEE
    assert bank.supply(chain.app.committed_view(), DENOM) == 11_000_000
    assert {e.type for e in result.events} >= {"tx", "message", "transfer"}


def test_a_tx_is_decoded_once_and_events_are_built_only_for_blocks(chain, monkeypatch):
    from dilochain.chain import tx as tx_module

    decodes = []
    real = tx_module.decode_tx
    monkeypatch.setattr(tx_module, "decode_tx", lambda *a: decodes.append(1) or real(*a))
    raw = signed_tx(ALICE, [send(B, 5)], sequence=0, account_number=0)
    checked = chain.broadcast(raw)
    assert checked.code == 0 and not checked.events  # CheckTx's events are dropped by CometBFT
    (result,) = chain.block()  # PrepareProposal and FinalizeBlock reuse the decoded tx
    assert result.code == 0 and {e.type for e in result.events} >= {"tx", "transfer"}
    assert len(decodes) == 1
    assert len(chain.app.decoded) == 0  # a committed block's txs are dropped from the cache


def test_decoded_tx_cache_keeps_only_admitted_txs_within_its_bounds(chain):
    from dilochain.chain.app import MSG_SPECS
    from dilochain.chain.tx import DecodedTxCache
    from dilochain.protocol.params import AuthParams

    raws = [signed_tx(ALICE, [send(B, 1)], sequence=n, account_number=0) for n in range(3)]
    cache = DecodedTxCache({s.type_url: s for s in MSG_SPECS}, AuthParams(), size=2)
    first = cache.decode(raws[0])
    assert cache.decode(raws[0]) is not first and len(cache) == 0  # decoding keeps nothing
    cache.keep(first)
    assert cache.decode(raws[0]) is first
    for raw in raws[1:]:
        cache.keep(cache.decode(raw))  # the least recently used (raws[0]) goes
    assert len(cache) == 2 and cache.decode(raws[0]) is not first
    by_bytes = DecodedTxCache({s.type_url: s for s in MSG_SPECS}, AuthParams(),
                              max_bytes=len(raws[1]) + len(raws[2]))  # fmt: skip
    for raw in raws:
        by_bytes.keep(by_bytes.decode(raw))
    assert len(by_bytes) == 2
    # Refused txs and simulations fill nothing: only what CheckTx admits is kept.
    stranger = wallet(99)
    gift = MsgSend(from_address=str(stranger.address()), to_address=B,
                   amount=[Coin(denom=DENOM, amount="1")])  # fmt: skip
    unfunded = signed_tx(stranger, [gift], sequence=0, account_number=9)
    assert chain.broadcast(unfunded).code != 0 and chain.app.simulate(raws[0]).code == 0
    assert len(chain.app.decoded) == 0


def test_a_recheck_runs_the_ante_checks_alone(chain):
    """As the SDK's ReCheckTx: what a block can change for a mempool tx is its sequence and
    the fee balance; a message that would now fail is answered when the block runs it."""
    stale = signed_tx(ALICE, [send(B, 10)], sequence=0, account_number=0)
    assert chain.broadcast(stale).code == 0
    chain.mempool.clear()  # another tx of the same sequence makes the block instead
    include_unchecked(chain, signed_tx(ALICE, [send(B, 10)], sequence=0, account_number=0,
                                       memo="first"))  # fmt: skip
    assert chain.app.check_tx(stale, recheck=True).code == codes.WRONG_SEQUENCE
    overdraft = signed_tx(ALICE, [send(B, 10**9)], sequence=1, account_number=0)
    assert chain.app.check_tx(overdraft).code == codes.INSUFFICIENT_FUNDS
    assert chain.app.check_tx(overdraft, recheck=True).code == 0  # the message is not run
    assert chain.app.check_tx(overdraft).code == codes.WRONG_SEQUENCE  # the recheck took seq 1


def test_sequences_allow_several_txs_per_block(chain):
    for seq in range(3):
        raw = signed_tx(ALICE, [send(B, 10)], sequence=seq, account_number=0)
        assert chain.broadcast(raw).code == 0
    assert [r.code for r in chain.block()] == [0, 0, 0]
    assert balance(chain, B) == 1_000_030


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"chain_id": "other-chain"}, codes.UNAUTHORIZED),
        ({"account_number": 7}, codes.UNAUTHORIZED),
        ({"sequence": 5}, codes.WRONG_SEQUENCE),
        ({"fee": 1}, codes.INSUFFICIENT_FEE),
        ({"gas_limit": 1000, "fee": 25}, codes.OUT_OF_GAS),
    ],
)
def test_check_tx_rejections(chain, kwargs, code):
    args = {"sequence": 0, "account_number": 0, **kwargs}
    result = chain.broadcast(signed_tx(ALICE, [send(B, 1)], **args))
    assert result.code == code, result.raw_log
    assert result.codespace == "sdk" and result.raw_log
    assert len(chain.mempool) == 0


def test_bad_signature_is_rejected(chain):
    raw = bytearray(signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0))
    raw[-1] ^= 0x01  # the signature is the last field
    result = chain.broadcast(bytes(raw))
    assert result.code == codes.UNAUTHORIZED
    assert "signature verification failed" in result.raw_log


def test_high_s_signature_is_rejected(chain):
    from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import TxRaw

    from dilochain.chain.signature import SECP256K1_ORDER

    tx = TxRaw.FromString(signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0))
    sig = tx.signatures[0]
    high_s = SECP256K1_ORDER - int.from_bytes(sig[32:], "big")
    tx.signatures[0] = sig[:32] + high_s.to_bytes(32, "big")  # same point, malleated
    assert chain.broadcast(tx.SerializeToString()).code == codes.UNAUTHORIZED


def test_replayed_tx_is_rejected(chain):
    raw = signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0)
    assert chain.broadcast(raw).code == 0
    assert chain.broadcast(raw).code == codes.TX_IN_MEMPOOL
    chain.block()
    assert chain.broadcast(raw).code == codes.WRONG_SEQUENCE


def test_signer_must_own_the_message(chain):
    msg = MsgSend(from_address=B, to_address=A, amount=[Coin(denom=DENOM, amount="1")])
    result = chain.broadcast(signed_tx(ALICE, [msg], sequence=0, account_number=1))
    assert result.code == codes.INVALID_PUBKEY


def test_unknown_message_type_and_garbage(chain):
    from dilochain.protocol.pb.poc.v1.types_pb2 import Host

    raw = signed_tx(ALICE, [Host(run_id="x")], sequence=0, account_number=0)
    result = chain.broadcast(raw)
    assert result.code == codes.TX_DECODE and "unable to resolve type URL" in result.raw_log
    assert chain.broadcast(b"\xff\x00garbage").code == codes.TX_DECODE


def include_unchecked(chain, *txs: bytes) -> list:
    """Put txs in the next block without CheckTx, as a faulty proposer could."""
    for raw in txs:
        chain.mempool[tx_hash(raw)] = raw
    return chain.block()


def test_mempool_admission_runs_messages_only_for_so_long(chain, monkeypatch):
    """CheckTx runs a tx's messages to refuse what would fail, within a budget: a tx whose last
    of many messages fails would otherwise cost the node tens of ms a CheckTx, for nothing.
    Past the budget the rest is left to the block, which charges the fee of a tx that fails."""
    from dilochain.chain import app as app_module

    overdraws = signed_tx(ALICE, [send(B, 10), send(B, 10**9)], sequence=0, account_number=0)
    assert chain.app.check_tx(overdraws).code == codes.INSUFFICIENT_FUNDS  # well within budget
    monkeypatch.setattr(app_module, "CHECK_SECONDS", 0.0)  # spent after the first message
    assert chain.broadcast(overdraws).code == 0
    # The check state no longer tells what the sender has (its tx's later messages were not
    # run): its next txs wait for that block, else they could pass here, fail their ante
    # checks in the block and take its space for free (found by a review).
    follow_up = signed_tx(ALICE, [send(B, 10)], sequence=1, account_number=0)
    refused = chain.app.check_tx(follow_up)
    assert refused.code == codes.INVALID_REQUEST and "too long to check in full" in refused.raw_log
    # A block without it (the proposer's choice): rechecked (its ante alone), it still holds
    # its signer's later txs back (a review passed twelve 1 MB txs for free in the gap).
    waiting = dict(chain.mempool)
    chain.mempool.clear()
    chain.block()
    assert chain.app.check_tx(overdraws, recheck=True).code == 0
    refused = chain.app.check_tx(follow_up)
    assert refused.code == codes.INVALID_REQUEST and "too long to check in full" in refused.raw_log
    chain.mempool.update(waiting)
    (result,) = chain.block()
    assert result.code == codes.INSUFFICIENT_FUNDS
    assert balance(chain, A) == 10_000_000 - FEE and balance(chain, B) == 1_000_000
    assert chain.app.check_tx(follow_up).code == 0  # the block is in: checked as any


def test_overdraft_rejected_at_check_and_in_block(chain):
    result = chain.broadcast(signed_tx(ALICE, [send(B, 10**9)], sequence=0, account_number=0))
    assert result.code == codes.INSUFFICIENT_FUNDS
    ok = signed_tx(ALICE, [send(B, 6_000_000)], sequence=0, account_number=0)
    late = signed_tx(ALICE, [send(B, 3_995_000)], sequence=1, account_number=0)
    assert chain.broadcast(ok).code == 0
    assert chain.broadcast(late).code == codes.INSUFFICIENT_FUNDS  # check state saw the first
    chain.mempool.clear()
    results = include_unchecked(chain, ok, late)
    assert [r.code for r in results] == [0, codes.INSUFFICIENT_FUNDS]
    assert balance(chain, A) == 10_000_000 - 6_000_000 - 2 * FEE  # the failed tx paid its fee


def test_collateral_deposit_withdraw_and_unbonding(tmp_path):
    poc = {"unbonding_period_seconds": 0, "max_round_blocks": 2, "beacon_reveal_blocks": 2,
           "reveal_window_blocks": 1, "verdict_window_blocks": 1, "verdict_open_blocks": 2,
           "unbonding_blocks": 8}  # fmt: skip
    chain = local_chain(tmp_path, {A: 10_000_000}, poc=poc)
    deposit = MsgDepositCollateral(depositor=A, amount="3000000")
    withdraw = MsgWithdrawCollateral(depositor=A, amount="1000000")
    assert chain.broadcast(signed_tx(ALICE, [deposit], sequence=0, account_number=0)).code == 0
    chain.block()
    view = chain.app.committed_view()
    assert collateral.bonded(view, A) == 3_000_000
    assert bank.balance(view, MODULE_ACCOUNT, DENOM) == 3_000_000
    assert chain.broadcast(signed_tx(ALICE, [withdraw], sequence=1, account_number=0)).code == 0
    chain.block()
    created = chain.app.height
    (entry,) = collateral.info(chain.app.committed_view(), A).unbonding
    assert entry.completion_height == created + 8
    # Its time (0 s) has come, but it stays slashable for unbonding_blocks blocks.
    while chain.app.height < created + 7:
        chain.block()
        assert len(collateral.info(chain.app.committed_view(), A).unbonding) == 1
    chain.block()
    view = chain.app.committed_view()
    assert collateral.bonded(view, A) == 2_000_000
    assert collateral.info(view, A).unbonding == []
    assert bank.balance(view, A, DENOM) == 10_000_000 - 2_000_000 - 2 * FEE


def test_unbonding_must_outlast_a_slashable_commit():
    with pytest.raises(ValueError, match="unbonding_blocks must be at least 8"):
        PocParams(max_round_blocks=2, beacon_reveal_blocks=2, reveal_window_blocks=1,
                  verdict_window_blocks=1, verdict_open_blocks=2, unbonding_blocks=7)  # fmt: skip


def test_unbonding_waits_for_its_completion_time(chain):
    deposit = MsgDepositCollateral(depositor=A, amount="100")
    withdraw = MsgWithdrawCollateral(depositor=A, amount="40")
    chain.broadcast(signed_tx(ALICE, [deposit, withdraw], sequence=0, account_number=0))
    (result,) = chain.block()
    assert result.code == 0, result.raw_log
    info = collateral.info(chain.app.committed_view(), A)
    assert info.bonded == "60" and [e.amount for e in info.unbonding] == ["40"]
    assert info.unbonding[0].completion_time_unix >= chain.app.last_block_time_ns // 10**9 + 60


def test_withdrawals_of_a_height_share_an_entry_and_pending_entries_are_capped(tmp_path):
    """As x/staking's MaxEntries: 63 one-udlc withdrawals in a tx (or several txs of a block)
    make one entry, and past MAX_ENTRIES pending a withdrawal is refused until one is paid."""
    poc = {"unbonding_period_seconds": 0, "max_round_blocks": 2, "beacon_reveal_blocks": 2,
           "reveal_window_blocks": 1, "verdict_window_blocks": 1, "verdict_open_blocks": 2,
           "unbonding_blocks": 8}  # fmt: skip
    chain = local_chain(tmp_path, {A: 10**9}, poc=poc)
    withdraw = MsgWithdrawCollateral(depositor=A, amount="1")
    sequence = [0]

    def sent(*msgs: Message, gas: int = GAS) -> TxResponse:
        raw = signed_tx(ALICE, list(msgs), sequence=sequence[0], account_number=0, gas_limit=gas)
        result = chain.broadcast(raw)
        sequence[0] += result.code == 0
        return result

    deposit = MsgDepositCollateral(depositor=A, amount="1000")
    assert sent(deposit, *[withdraw] * 63, gas=2_000_000).code == 0
    chain.block()
    entries = collateral.info(chain.app.committed_view(), A).unbonding
    assert [e.amount for e in entries] == ["63"]
    first_due = entries[0].completion_height
    for _ in range(collateral.MAX_ENTRIES - 1):
        assert sent(withdraw).code == 0
        assert sent(withdraw).code == 0  # the same height: the same entry
        chain.block()
    entries = collateral.info(chain.app.committed_view(), A).unbonding
    assert [e.amount for e in entries] == ["63"] + ["2"] * (collateral.MAX_ENTRIES - 1)
    refused = sent(withdraw)
    assert refused.code == codes.INVALID_REQUEST
    assert f"too many unbonding entries for {A}: 7 pending, at most 7" in refused.raw_log
    assert f"the first at height {first_due}" in refused.raw_log
    while chain.app.height < first_due:
        chain.block()
    assert len(collateral.info(chain.app.committed_view(), A).unbonding) < collateral.MAX_ENTRIES
    assert sent(withdraw).code == 0


def test_end_block_reads_only_the_due_head_of_the_unbonding_queue(tmp_path, monkeypatch):
    """2,000 pending entries, three of them due: the queue is read up to the first entry not
    due (a row of the store's first chunk), whether its blocks or its time have not come."""
    chain = local_chain(tmp_path, {A: 10})
    app, poc = chain.app, chain.app.params.poc
    state = CacheStore(app.store)
    addresses = [encode_address(i.to_bytes(20, "big")) for i in range(1, 2001)]
    for height, address in enumerate(addresses, start=1):
        collateral.bond_at_genesis(state, DENOM, address, 5)
        ctx = Context(state, height, height * 10**9, app.chain_id, app.params)
        collateral.start_unbonding(ctx, address, 5)
    app.store.commit(state.writes, {})
    read, chunk = [], app.store._read_chunk

    def counted(*args):
        rows = chunk(*args)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(app.store, "_read_chunk", counted)
    blocks_come = (3 + poc.unbonding_blocks, 10**6 * 10**9)  # (height, time): by blocks
    time_comes = (10**6, (3 + poc.unbonding_period_seconds) * 10**9)  # by time
    for height, time_ns in (blocks_come, time_comes):
        read.clear()
        ctx = Context(CacheStore(app.store), height, time_ns, app.chain_id, app.params)
        collateral.end_block(ctx)
        paid = [dict((a.key, a.value) for a in e.attributes)["depositor"] for e in ctx.events
                if e.type == "complete_unbonding"]  # fmt: skip
        assert paid == addresses[:3] and read == [ChainStore._FIRST_CHUNK]
        assert [collateral.bonded(ctx.store, a) for a in addresses[:4]] == [0] * 4
        assert bank.balance(ctx.store, addresses[2], DENOM) == 5
        assert bank.balance(ctx.store, addresses[3], DENOM) == 0


def test_run_registry_needs_collateral(chain):
    config = make_run_config(FAKE_DATA, "tiny", min_collateral="500", inner_steps=20,
                             checkpoint_interval=5)  # fmt: skip
    create = MsgCreateRun(creator=A, run_id="r1", config=config)
    register = MsgRegisterHost(host=B, run_id="r1", endpoint="127.0.0.1:1")
    assert chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0)).code == 0
    chain.block()
    result = chain.broadcast(signed_tx(BOB, [register], sequence=0, account_number=1))
    assert result.code == codes.INSUFFICIENT_FUNDS and "needs 500" in result.raw_log
    deposit = MsgDepositCollateral(depositor=B, amount="500")
    raw = signed_tx(BOB, [deposit, register], sequence=0, account_number=1)
    assert chain.broadcast(raw).code == 0
    chain.block()
    view = chain.app.committed_view()
    assert [h.address for h in registry.hosts(view, "r1")] == [B]
    assert registry.get_run(view, "r1").config.inner_steps == 20
    # Registering again moves the endpoint.
    moved = MsgRegisterHost(host=B, run_id="r1", endpoint="127.0.0.1:2")
    assert chain.broadcast(signed_tx(BOB, [moved], sequence=1, account_number=1)).code == 0
    chain.block()
    assert registry.hosts(chain.app.committed_view(), "r1")[0].endpoint == "127.0.0.1:2"
    # Registered collateral is locked.
    withdraw = MsgWithdrawCollateral(depositor=B, amount="1")
    result = chain.broadcast(signed_tx(BOB, [withdraw], sequence=2, account_number=1))
    assert result.code == codes.INVALID_REQUEST and "require 500" in result.raw_log
    # Duplicate run, unknown run.
    result = chain.broadcast(signed_tx(ALICE, [create], sequence=1, account_number=0))
    assert result.code == codes.INVALID_REQUEST
    unknown = MsgRegisterHost(host=B, run_id="nope")
    result = chain.broadcast(signed_tx(BOB, [unknown], sequence=2, account_number=1))
    assert result.code == codes.NOT_FOUND
    # One bond cannot stand behind two runs: the second needs its own 500 free.
    second = MsgCreateRun(creator=A, run_id="r2", config=config)
    assert chain.broadcast(signed_tx(ALICE, [second], sequence=1, account_number=0)).code == 0
    chain.block()
    join = MsgRegisterHost(host=B, run_id="r2", endpoint="127.0.0.1:3")
    result = chain.broadcast(signed_tx(BOB, [join], sequence=2, account_number=1))
    assert result.code == codes.INSUFFICIENT_FUNDS and "0 free (500 bonded, 500 locked)" in (
        result.raw_log
    )
    more = MsgDepositCollateral(depositor=B, amount="500")
    assert chain.broadcast(signed_tx(BOB, [more, join], sequence=2, account_number=1)).code == 0
    chain.block()
    held = collateral.info(chain.app.committed_view(), B)
    assert (held.bonded, held.locked) == ("1000", "1000")


def test_failed_message_reverts_whole_tx_but_keeps_fee(chain):
    raw = signed_tx(ALICE, [send(B, 5), send(B, 10**12)], sequence=0, account_number=0)
    (result,) = include_unchecked(chain, raw)
    assert result.code == codes.INSUFFICIENT_FUNDS
    assert balance(chain, B) == 1_000_000
    assert balance(chain, A) == 10_000_000 - FEE
    assert chain.app.committed_view().get(b"acc/" + A.encode())  # sequence bumped
    assert chain.broadcast(signed_tx(ALICE, [send(B, 1)], sequence=1, account_number=0)).code == 0


def test_app_hash_changes_with_state_and_is_persisted(chain):
    genesis_hash = chain.app.app_hash
    chain.block()
    # An empty block changes only the state's record of its block (height, time, hash).
    empty_block_hash = chain.app.app_hash
    assert [key for key, _ in chain.app.store.iterate(b"chain/")] == [BLOCK_KEY]
    assert empty_block_hash != genesis_hash
    chain.broadcast(signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0))
    chain.block()
    assert chain.app.app_hash not in (genesis_hash, empty_block_hash)
    assert chain.app.store.block(2).hash  # block rows persisted


@pytest.mark.parametrize(
    "amount",
    ["\u0665", "\u00b2", "1" * 79, str(1 << 256), "-1", " 5", "", "1e3"],  # Arabic five, ², …
)
def test_amounts_are_ascii_digits_within_256_bits(chain, amount):
    msg = MsgSend(from_address=A, to_address=B, amount=[Coin(denom=DENOM, amount=amount)])
    result = chain.broadcast(signed_tx(ALICE, [msg], sequence=0, account_number=0))
    assert result.code == codes.INVALID_COINS, result.raw_log
    # The same amount as a fee (simulated: the edited tx's signature no longer matters).
    tx = TxRaw.FromString(signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0))
    auth = AuthInfo.FromString(tx.auth_info_bytes)
    auth.fee.amount[0].amount = amount
    tx.auth_info_bytes = auth.SerializeToString()
    assert chain.app.simulate(tx.SerializeToString()).code == codes.INVALID_COINS


def test_a_send_of_a_zero_coin_is_refused_as_the_sdk_does(chain):
    """Zero coins were dropped, so thousands of them (each its own denom) made a send's
    CheckTx slow for nothing; a send's coins are all positive, a denom is given once."""
    zeros = [Coin(denom=f"z{i:04d}", amount="0") for i in range(3)]
    for coins, why in (([*zeros, Coin(denom=DENOM, amount="5")], "0z0000 is not positive"),
                       ([Coin(denom=DENOM, amount="5")] * 2, "invalid coins")):  # fmt: skip
        msg = MsgSend(from_address=A, to_address=B, amount=coins)
        result = chain.broadcast(signed_tx(ALICE, [msg], sequence=0, account_number=0))
        assert result.code == codes.INVALID_COINS and why in result.raw_log, result.raw_log


def test_an_upper_case_address_is_refused_not_a_second_account(chain):
    """bech32 reads ``DILO1…`` too, but state is keyed by the address as written: a send there
    created an account no key signs for, and the coins were lost."""
    msg = MsgSend(from_address=A, to_address=B.upper(), amount=[Coin(denom=DENOM, amount="5")])
    result = chain.broadcast(signed_tx(ALICE, [msg], sequence=0, account_number=0))
    assert result.code == codes.INVALID_ADDRESS and "lower case" in result.raw_log, result.raw_log
    assert chain.app.store.get(b"bal/" + B.upper().encode() + b"/" + DENOM.encode()) is None


@pytest.mark.parametrize("denom", ["x" * 4096, "1abc", "ab", "udlc\n", "u dlc", ""])
def test_denoms_follow_the_sdk_s_rule_before_any_balance_is_read(chain, denom):
    """A stranger's denom of 4 KB would otherwise be looked up (and cached) as a balance key:
    coins are refused by their denom first, as the Cosmos SDK's ``Coins.Validate``."""
    msg = MsgSend(from_address=A, to_address=B, amount=[Coin(denom=denom, amount="1")])
    result = chain.broadcast(signed_tx(ALICE, [msg], sequence=0, account_number=0))
    assert result.code == codes.INVALID_COINS, result.raw_log


def test_gas_limit_above_int64_is_a_coded_rejection(chain):
    raw = signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0, gas_limit=(1 << 64) - 1,
                    fee=10**9)  # fmt: skip
    for result in (chain.broadcast(raw), chain.app.simulate(raw)):
        assert result.code == codes.INVALID_GAS_LIMIT and "maximum" in result.raw_log
    assert [r.code for r in chain.block()] == []  # nothing admitted; the chain goes on


def test_run_parameters_and_message_counts_are_bounded(chain):
    config = make_run_config(FAKE_DATA, "tiny", inner_steps=4_000_000, checkpoint_interval=2)
    create = MsgCreateRun(creator=A, run_id="huge", config=config)
    result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
    assert result.code == codes.INVALID_REQUEST and "above the chain's maximum" in result.raw_log
    config = make_run_config(FAKE_DATA, "tiny", inner_steps=1000, checkpoint_interval=2)
    create = MsgCreateRun(creator=A, run_id="many", config=config)
    result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
    assert result.code == codes.INVALID_REQUEST and "more than 64 segments" in result.raw_log
    config = make_run_config(FAKE_DATA, "tiny", inner_steps=8, checkpoint_interval=1)
    create = MsgCreateRun(creator=A, run_id="one-step", config=config)
    result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
    assert result.code == codes.INVALID_REQUEST and "at least 2" in result.raw_log
    hostile = [({"batch_size": 4096, "seq_len": 4096}, "1048576 tokens a step"),
               # the tiny model's attention at 8,192 positions: 3.6 x its parameters' cost a
               # token is taken, at 16,384 (7.3 x) a verifier's step would be mostly attention
               ({"batch_size": 1, "seq_len": 16_384}, "attention would cost a token 7.3 times"),
               ({"inner_lr": float("inf")}, "must be finite"),
               ({"grad_clip": float("nan")}, "must be finite")]  # fmt: skip
    for change, message in hostile:
        config = make_run_config(FAKE_DATA, "tiny")
        for name, value in change.items():
            setattr(config, name, value)
        create = MsgCreateRun(creator=A, run_id="hostile", config=config)
        result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
        assert result.code == codes.INVALID_REQUEST and message in result.raw_log, result.raw_log
    # A run id that prints as another's (a newline after "demo") and a config nested deeper
    # than parsers at different stack depths agree on are refused in kind.
    deep = make_run_config(FAKE_DATA, "tiny")
    deep.model_config = deep.model_config[:-1] + ',"x":' + "[" * 900 + "]" * 900 + "}"
    for run_id, config, message in [
        ("demo\n", make_run_config(FAKE_DATA, "tiny"), "invalid run id 'demo\\n'"),
        ("deep", deep, "nests deeper than 32"),
    ]:
        create = MsgCreateRun(creator=A, run_id=run_id, config=config)
        result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
        assert result.code == codes.INVALID_REQUEST and message in result.raw_log, result.raw_log
    crowd = signed_tx(ALICE, [send(B, 1)] * 65, sequence=0, account_number=0, gas_limit=10**7)
    for answer in (chain.broadcast(crowd), chain.app.simulate(crowd)):
        assert answer.code == codes.INVALID_REQUEST and "at most 64 per tx" in answer.raw_log
    assert chain.app.params.poc.max_segments_per_round == 64  # a genesis parameter


def test_active_runs_and_start_delays_are_bounded(tmp_path):
    chain = local_chain(tmp_path, {A: 10**9}, poc={"max_active_runs": 2})
    delays = [("a", 0), ("b", 0), ("c", 0)]
    results = []
    for seq, (run_id, delay) in enumerate(delays):
        config = make_run_config(FAKE_DATA, "tiny", start_delay_blocks=delay)
        create = MsgCreateRun(creator=A, run_id=run_id, config=config)
        results.append(chain.broadcast(signed_tx(ALICE, [create], sequence=seq, account_number=0)))
    assert [r.code for r in results[:2]] == [0, 0]
    assert results[2].code == codes.INVALID_REQUEST and "maximum of 2 runs" in results[2].raw_log
    config = make_run_config(FAKE_DATA, "tiny", start_delay_blocks=10**6)
    late = MsgCreateRun(creator=A, run_id="late", config=config)
    result = chain.broadcast(signed_tx(ALICE, [late], sequence=2, account_number=0))
    assert result.code == codes.INVALID_REQUEST and "start_delay_blocks" in result.raw_log


def test_simulate_is_capped_by_the_chain_not_the_tx(tmp_path):
    chain = local_chain(tmp_path, {A: 10**9}, auth={"simulate_gas_limit": 100_000})
    raw = signed_tx(ALICE, [send(B, 1)] * 10, sequence=0, account_number=0, gas_limit=10**9,
                    fee=10**8)  # fmt: skip
    result = chain.app.simulate(raw)
    assert result.code == codes.OUT_OF_GAS and "out of gas" in result.raw_log
    small = signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0)
    assert chain.app.simulate(small).code == 0


def test_a_run_whose_model_no_one_could_build_is_refused(chain):
    """Run configs are hostile input to every host and verifier: sizes that do not divide, a
    model over the chain's parameter budget, a config that names code to load."""
    bad = [({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
           ({"num_hidden_layers": 100_000, "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 32}, "over the chain's budget"),
           ({"auto_map": {"AutoModelForCausalLM": "evil.LM"}}, "may not load code")]  # fmt: skip
    for seq, (change, message) in enumerate(bad):
        config = make_run_config(FAKE_DATA, "tiny")
        config.model_config = model_config.canonical({**json.loads(config.model_config), **change})
        create = MsgCreateRun(creator=A, run_id=f"bad{seq}", config=config)
        result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
        assert result.code == codes.INVALID_REQUEST and message in result.raw_log, result.raw_log


def _asking(chain, just_too_far: str, just_enough: str, message: str) -> None:
    """A run asking its hosts for ``just_too_far`` collateral is refused with ``message``, one
    asking ``just_enough`` is taken."""
    results = []
    for seq, amount in enumerate([just_too_far, just_enough]):
        config = make_run_config(FAKE_DATA, "tiny", min_collateral=amount)
        create = MsgCreateRun(creator=A, run_id=f"stake{seq}", config=config)
        results.append(chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0)))
    refused, taken = results
    assert refused.code == codes.INVALID_REQUEST and message in refused.raw_log, refused.raw_log
    assert taken.code == 0, taken.raw_log


def test_a_run_s_host_slash_may_not_exceed_what_withholding_a_secret_costs(chain):
    """Withholding a beacon secret re-rolls a round's seed, worth at most a cheater's slash: a
    run may not put more at stake for a host than that costs a verifier (0.3 x 10,000,000)."""
    _asking(chain, "10000001", "10000000", "a host's slash (3000000.3) may not exceed")


def test_a_run_asks_its_hosts_for_at_least_the_chain_s_minimum_collateral(tmp_path):
    """A run's creator could otherwise register hosts bonded 1 udlc whose garbage commits force
    full replays and are slashed nothing."""
    chain = local_chain(tmp_path, {A: 10**9}, poc={"min_host_collateral": 1_000_000})
    _asking(chain, "999999", "1000000", "min_collateral below the chain's minimum 1000000")
    assert PocParams().min_host_collateral == 1_000_000  # the default a network starts with


def test_host_locations_are_host_port_or_a_plain_url(chain):
    """Every peer and verifier reads a host's location: a blob service's host:port or an
    object store's public URL. A unix socket, a URL with a user, query or '..', a 200 KB
    string are refused; names, IPv4 and bracketed IPv6 addresses, http(s) URLs are taken."""
    from dilochain.protocol.endpoint import location_problem

    for bad in [
        "unix:/var/run/x.sock", "unix:///tmp/s", "file:///etc/passwd", "ftp://h/x", "h", "h:0",
        "h:99999", "a" * 200_000 + ":1", "h_1:5", "-h:5", "[::1:5", "[zz::1]:5", "h:1/x",
        "u@h:5", "http://u:p@h/x", "http://h/x?a=1", "http://h/x#f", "http://h/../etc",
        "http://h:0/x", "https://h/a b", "http://h_1/x", "https://" + "a" * 600 + "/x",
        "http://[::1/x", "http://example.com\n:80/p", "http://h/p\n", "h:1\n", "h\n:1",
        "http://2130706433/x", "http://0x7f.1/x", "http://[fe80::1%eth0]/x", "http://h.123/x",
    ]:  # fmt: skip
        assert location_problem(bad) is not None, bad
    for good in ["h:1", "10.0.0.5:9090", "[::1]:5", "node-1.example.org:443",
                 "https://pub-1.r2.dev", "http://127.0.0.1:7070/b/runs/r-1",
                 "https://b.s3.us-east-1.amazonaws.com/p/run", "http://[::1]:80/b/"]:  # fmt: skip
        assert location_problem(good) is None, good
    config = make_run_config(FAKE_DATA, "tiny", min_collateral="10")
    create = MsgCreateRun(creator=A, run_id="ends", config=config)
    assert chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0)).code == 0
    chain.block()
    register = MsgRegisterHost(host=A, run_id="ends", endpoint="unix:/var/run/docker.sock")
    deposit = MsgDepositCollateral(depositor=A, amount="10")
    result = chain.broadcast(signed_tx(ALICE, [deposit, register], sequence=1, account_number=0))
    assert result.code == codes.INVALID_REQUEST and "endpoint:" in result.raw_log
    url = "https://pub-1.r2.dev/dilochain/ends"
    register = MsgRegisterHost(host=A, run_id="ends", endpoint=url)
    result = chain.broadcast(signed_tx(ALICE, [deposit, register], sequence=1, account_number=0))
    assert result.code == 0, result.raw_log
    chain.block()
    assert [h.endpoint for h in registry.hosts(chain.app.committed_view(), "ends")] == [url]


def test_a_run_escrows_a_deposit_that_grows_with_its_config_and_comes_back(chain):
    """Creating a run costs what it costs the network while it lasts: a deposit of the base
    plus so much per byte of its config and per block of its life, refunded to the creator
    when the run ends."""
    params = chain.app.params.poc
    config = make_run_config(FAKE_DATA, "tiny", round_blocks=2, total_rounds=1)
    deposit = registry.run_deposit(params, config)
    life = config.start_delay_blocks + schedule.round_period(2, params)  # one round
    assert deposit == (params.run_deposit + params.run_deposit_per_byte * config.ByteSize()
                       + params.run_deposit_per_block * life)  # fmt: skip
    # Holding one of the max_active_runs slots for the longest schedule locks ~10^9 udlc more.
    longest = make_run_config(FAKE_DATA, "tiny", round_blocks=10_000, total_rounds=100_000)
    extra = registry.run_deposit(params, longest) - params.run_deposit
    assert extra > 10**9 * params.run_deposit_per_block and params.run_deposit_per_block == 1
    before = balance(chain, A)
    create = MsgCreateRun(creator=A, run_id="paid", config=config)
    result = chain.broadcast(signed_tx(ALICE, [create], sequence=0, account_number=0))
    assert result.code == 0
    chain.block()
    view = chain.app.committed_view()
    fee = before - balance(chain, A) - deposit
    assert 0 < fee < 10_000 and bank.balance(view, registry.RUNS_ACCOUNT, DENOM) == deposit
    assert registry.get_run(view, "paid").deposit == str(deposit)
    while registry.active_runs(chain.app.committed_view()):
        chain.block()
    assert balance(chain, A) == before - fee
    assert bank.balance(chain.app.committed_view(), registry.RUNS_ACCOUNT, DENOM) == 0
    poor = local_chain(chain.app.store.path.parent / "poor", {B: deposit - 1})
    refused = poor.broadcast(signed_tx(BOB, [MsgCreateRun(creator=B, run_id="x", config=config)],
                                       sequence=0, account_number=0))  # fmt: skip
    assert refused.code == codes.INSUFFICIENT_FUNDS


def _gas_capped_chain(tmp_path, max_gas: int):
    """A chain whose blocks' txs may ask ``max_gas`` in all (-1: any)."""
    genesis = GenesisDoc.model_validate({
        "chain_id": CHAIN_ID, "consensus_params": {"block": {"max_gas": max_gas}},
        "app_state": {"accounts": [{"address": A, "coins": [{"denom": DENOM, "amount": 10**9}]}]},
    })  # fmt: skip
    app = Application(ChainStore(tmp_path / "chain.db"), genesis)
    app.init_chain()
    return app


def test_block_max_gas_bounds_proposals_and_each_tx(tmp_path):
    app = _gas_capped_chain(tmp_path / "capped", 500_000)
    t1, t2, t3 = (signed_tx(ALICE, [send(B, 1)], sequence=s, account_number=0) for s in range(3))
    over = signed_tx(ALICE, [send(B, 1)], sequence=0, account_number=0, gas_limit=500_001)
    refused = app.check_tx(over)
    assert (refused.code, refused.raw_log) == (
        codes.INVALID_GAS_LIMIT, "tx gas limit 500001 exceeds block max gas 500000")  # fmt: skip
    assert app.check_tx(t1).code == 0
    # 3 x 200,000 passes 500,000: the proposer stops at two, a proposal of three is refused.
    assert app.prepare_proposal([t1, t2, t3], 1 << 20) == [t1, t2]
    assert app.process_proposal([t1, t2], 1 << 20)
    assert not app.process_proposal([t1, t2, t3], 1 << 20)
    assert app.process_proposal([t1, b"\x00junk", t2], 1 << 20)  # never runs: no gas
    # -1 (the default): no bound, as before.
    unbounded = _gas_capped_chain(tmp_path / "unbounded", -1)
    assert unbounded.max_block_gas is None and unbounded.check_tx(over).code == 0
    assert unbounded.prepare_proposal([t1, t2, t3], 1 << 20) == [t1, t2, t3]
    assert unbounded.process_proposal([t1, t2, t3, over], 1 << 20)
