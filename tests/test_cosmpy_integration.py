"""The real chain process driven by an unmodified cosmpy LedgerClient."""

from __future__ import annotations

import json
import logging
import math
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from cosmpy.aerial.tx import Transaction
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1.service_pb2 import BroadcastMode, BroadcastTxRequest

from dilochain import client as client_module
from dilochain.chain.errors import codes
from dilochain.client import Sender, broadcast, submit
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgDepositCollateral
from dilochain.testutil import CHAIN_ID, signed_tx, wallet
from tests.conftest import FUNDS

pytestmark = pytest.mark.integration
POLL = 0.1


def test_genesis_balance_send_and_fee(running_chain):
    client, (alice, bob, *_) = running_chain.client, running_chain.wallets
    assert client.query_bank_balance(alice.address(), DENOM) == FUNDS
    assert client.query_chain_id() == "dilochain-test"
    tx = client.send_tokens(bob.address(), 12_345, DENOM, alice).wait_to_complete(poll_period=POLL)
    response = tx.response
    assert response.code == 0 and response.height >= 1
    fee = math.ceil(response.gas_wanted * 0.025)
    assert client.query_bank_balance(alice.address(), DENOM) == FUNDS - 12_345 - fee
    assert client.query_bank_balance(bob.address(), DENOM) == FUNDS + 12_345
    assert response.events["transfer"]["amount"] in {"12345udlc", f"{fee}udlc"}
    block = client.query_block(response.height)
    assert tx.tx_hash in block.tx_hashes
    account = client.query_account(alice.address())
    assert account.sequence == 1


def test_deposit_collateral_with_a_cosmpy_transaction(running_chain):
    client, carol = running_chain.client, running_chain.wallets[2]
    msg = MsgDepositCollateral(depositor=str(carol.address()), amount="7000000")
    tx = broadcast(client, carol, msg).wait_to_complete(poll_period=POLL)
    assert tx.response.code == 0
    assert tx.response.events["deposit_collateral"]["amount"] == "7000000udlc"
    with PocClient(running_chain.address) as poc:
        assert poc.collateral(str(carol.address())).bonded == "7000000"


def _raw_broadcast(client, raw: bytes):
    request = BroadcastTxRequest(tx_bytes=raw, mode=BroadcastMode.BROADCAST_MODE_SYNC)
    return client.txs.BroadcastTx(request).tx_response


def test_rejections_keep_the_chain_serving(running_chain):
    client, dave = running_chain.client, running_chain.wallets[3]
    account = client.query_account(dave.address())
    send = MsgSend(
        from_address=str(dave.address()),
        to_address=str(running_chain.wallets[0].address()),
        amount=[Coin(denom=DENOM, amount="1")],
    )

    def tx(**kw):
        args = {"sequence": account.sequence, "account_number": account.number, **kw}
        return signed_tx(dave, [send], **args)

    good = tx()
    flipped = bytearray(good)
    flipped[-5] ^= 0xFF
    overdraft = MsgSend(
        from_address=str(dave.address()),
        to_address=str(dave.address()),
        amount=[Coin(denom=DENOM, amount=str(FUNDS * 10))],
    )
    cases = {
        "bad signature": (bytes(flipped), codes.UNAUTHORIZED),
        "wrong chain id": (tx(chain_id="another-chain"), codes.UNAUTHORIZED),
        "wrong account number": (tx(account_number=account.number + 50), codes.UNAUTHORIZED),
        "fee below minimum": (tx(fee=1), codes.INSUFFICIENT_FEE),
        "malformed bytes": (b"\x0a\x05hello\xff", codes.TX_DECODE),
        "unknown message type": (
            signed_tx(dave, [Coin(denom="x", amount="1")], sequence=account.sequence,
                      account_number=account.number),
            codes.TX_DECODE,
        ),
        "overdraft": (
            signed_tx(dave, [overdraft], sequence=account.sequence,
                      account_number=account.number),
            codes.INSUFFICIENT_FUNDS,
        ),
    }  # fmt: skip
    for name, (raw, code) in cases.items():
        response = _raw_broadcast(client, raw)
        assert response.code == code, f"{name}: {response.raw_log}"
        assert response.raw_log, name
    # The good tx goes through, and its replay (same sequence) is rejected.
    assert _raw_broadcast(client, good).code == 0
    client.wait_for_query_tx(_raw_broadcast(client, tx(sequence=account.sequence + 1)).txhash)
    # CometBFT's mempool cache refuses a committed tx's bytes before the app sees them
    # (the app's own sequence check is tested in-process); a re-signed replay reaches the app.
    replay = _raw_broadcast(client, good)
    assert replay.code == codes.TX_IN_MEMPOOL, replay.raw_log
    resigned = tx(sequence=account.sequence, memo="replay")
    assert _raw_broadcast(client, resigned).code == codes.WRONG_SEQUENCE
    # Still serving and producing blocks.
    height = client.query_height()
    tx_after = client.send_tokens(dave.address(), 1, DENOM, dave).wait_to_complete(poll_period=POLL)
    assert tx_after.response.height > height - 1


def test_a_tx_near_the_size_limit_reaches_the_application(running_chain):
    """CometBFT's RPC took request bodies of 1 MB, and a tx goes to it base64-encoded, so
    txs of 740 kB to 1 MiB that the app would take were refused before it saw them."""
    from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import TxBody, TxRaw
    from google.protobuf.any_pb2 import Any

    body = TxBody(non_critical_extension_options=[Any(type_url="/x", value=b"x" * 1_000_000)])
    raw = TxRaw(body_bytes=body.SerializeToString(), auth_info_bytes=b"", signatures=[b""])
    big = raw.SerializeToString()
    assert 1_000_000 < len(big) < 1 << 20  # under the app's max_tx_bytes
    response = _raw_broadcast(running_chain.client, big)
    assert (response.code, response.raw_log) == (  # the app's own answer to it
        codes.INVALID_REQUEST,
        "must contain at least one message",
    )
    too_big = TxRaw(body_bytes=b"\x0a" + b"\x00" * (1 << 20)).SerializeToString()
    assert _raw_broadcast(running_chain.client, too_big).code == codes.TX_TOO_LARGE


def test_simulate_estimates_enough_gas(running_chain):
    client, alice, bob = running_chain.client, *running_chain.wallets[:2]
    tx = Transaction()
    tx.add_message(
        MsgSend(from_address=str(alice.address()), to_address=str(wallet(999).address()),
                amount=[Coin(denom=DENOM, amount="5")])
    )  # fmt: skip
    submitted = broadcast(client, alice, *tx.msgs).wait_to_complete(poll_period=POLL)
    assert submitted.response.gas_used <= submitted.response.gas_wanted
    # GetTx answers from CometBFT's tx index, with the block's events and time.
    response = client.query_tx(submitted.tx_hash)
    assert response.height == submitted.response.height and response.code == 0
    assert response.events["transfer"]["recipient"] == str(wallet(999).address())
    assert response.events["message"]["sender"] == str(alice.address())
    block_time = client.query_block(response.height).time
    assert response.timestamp == block_time.replace(microsecond=0)
    assert client.query_bank_balance(wallet(999).address(), DENOM) == 5
    assert bob  # bob is untouched by this test


def test_unknown_account_and_tx_are_not_found(running_chain):
    import grpc
    from cosmpy.aerial.exceptions import NotFoundError

    with pytest.raises(grpc.RpcError) as err:
        running_chain.client.query_account(wallet(424242).address())
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(NotFoundError):
        running_chain.client.query_tx("AB" * 32)


def test_garbage_requests_are_invalid_argument(running_chain):
    with grpc.insecure_channel(running_chain.address) as channel:
        for method in ("/cosmos.bank.v1beta1.Query/Balance", "/dilochain.poc.v1.Query/Run",
                       "/cosmos.tx.v1beta1.Service/BroadcastTx"):  # fmt: skip
            call = channel.unary_unary(method)  # raw bytes in and out
            with pytest.raises(grpc.RpcError) as err:
                call(b"\xff\xff\xff", timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "does not decode" in err.value.details()
        balance = channel.unary_unary(
            "/cosmos.bank.v1beta1.Query/Balance",
            request_serializer=bank_q.QueryBalanceRequest.SerializeToString,
            response_deserializer=bank_q.QueryBalanceResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as err:
            balance(bank_q.QueryBalanceRequest(address="d" * 3_000_000, denom=DENOM), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(err.value.details()) < 300 and "3000000 chars" in err.value.details()
        get_tx = channel.unary_unary(
            "/cosmos.tx.v1beta1.Service/GetTx",
            request_serializer=tx_s.GetTxRequest.SerializeToString,
            response_deserializer=tx_s.GetTxResponse.FromString,
        )
        for bad in ("ab" * 1_500_000, "zz" * 32, "ab" * 31):
            with pytest.raises(grpc.RpcError) as err:
                get_tx(tx_s.GetTxRequest(hash=bad), timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert len(err.value.details()) < 200 and "64 hex digits" in err.value.details()


def test_every_tx_sent_is_logged_with_its_hash_and_codes(running_chain, caplog):
    caplog.set_level(logging.INFO, logger="dilochain.client")
    client, carol = running_chain.client, running_chain.wallets[2]
    msg = MsgDepositCollateral(depositor=str(carol.address()), amount="1000")
    response = submit(client, carol, msg)
    lines = [r.getMessage() for r in caplog.records if r.name == "dilochain.client"]
    assert lines == [
        f"tx {response.hash} MsgDepositCollateral broadcast: code 0",
        f"tx {response.hash} MsgDepositCollateral in block {response.height}: code 0",
    ]


def test_two_signers_of_one_key_both_land(running_chain, caplog):
    """Two senders with one key at once (``node leave`` beside a running node): both read the
    same account sequence; the one refused signs again at the sequence the chain says is due
    (the other's is in the mempool), without waiting for the other's block."""
    caplog.set_level(logging.INFO, logger="dilochain.client")
    client, (_, bob, carol, *_) = running_chain.client, running_chain.wallets
    before = client.query_account(carol.address()).sequence
    send = MsgSend(from_address=str(carol.address()), to_address=str(bob.address()),
                   amount=[Coin(denom=DENOM, amount="5")])  # fmt: skip
    barrier = threading.Barrier(2)

    def one(_):
        barrier.wait()
        return submit(client, carol, send)

    with ThreadPoolExecutor(2) as pool:
        responses = list(pool.map(one, range(2)))
    assert all(r.code == 0 for r in responses)
    assert len({r.hash for r in responses}) == 2
    assert client.query_account(carol.address()).sequence == before + 2
    assert any(f"signing at sequence {before + 1}, not {before}" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_a_tx_waiting_for_its_block_holds_back_no_other_tx_of_the_key(running_chain, monkeypatch):
    """A host's reveal while its commit waits for a block: the second tx is signed at the next
    sequence (the first holds the one the chain shows) and lands while the first still waits:
    the first's wait is held until the second is in a block."""
    client, (alice, bob, *_) = running_chain.client, running_chain.wallets
    before = client.query_account(alice.address()).sequence
    sender = Sender(client, alice)
    first_waiting, second_landed = threading.Event(), threading.Event()
    lookup = client_module._lookup

    def held_lookup(c, digest):
        if threading.current_thread().name == "first":
            first_waiting.set()
            assert second_landed.wait(30), "the second tx waited for the first's block"
        return lookup(c, digest)

    monkeypatch.setattr(client_module, "_lookup", held_lookup)
    send = MsgSend(from_address=str(alice.address()), to_address=str(bob.address()),
                   amount=[Coin(denom=DENOM, amount="7")])  # fmt: skip
    results = {}
    first = threading.Thread(name="first", target=lambda: results.update(
        first=sender.submit(send, timeout=60, poll=POLL)))  # fmt: skip
    first.start()
    try:
        assert first_waiting.wait(30)  # the first is in the mempool, waiting for its block
        results["second"] = sender.submit(send, timeout=60, poll=POLL)
        second_landed.set()
    finally:
        second_landed.set()
        first.join(60)
    assert results["first"].code == 0 and results["second"].code == 0
    assert results["first"].height <= results["second"].height
    assert client.query_account(alice.address()).sequence == before + 2


class _Busy(grpc.RpcError):
    """The simulation gate's answer while strangers' simulations fill it."""

    def code(self):
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self):
        return "busy: too many simulations (ask again)"


def test_a_flood_of_simulations_holds_back_no_protocol_tx(running_chain, monkeypatch):
    """Simulation is free for anyone, so strangers can keep the gate full: a tx whose kinds of
    messages this process simulated before is then signed with that gas, half again, and lands
    in its window instead of waiting on strangers. One it never simulated waits as before."""
    client, (alice, bob, *_) = running_chain.client, running_chain.wallets
    sender = Sender(client, alice)
    send = MsgSend(from_address=str(alice.address()), to_address=str(bob.address()),
                   amount=[Coin(denom=DENOM, amount="3")])  # fmt: skip
    first = sender.submit(send, timeout=60, poll=POLL)
    simulated = first.gas_wanted
    assert first.code == 0 and simulated > 0

    def busy(*args, **kwargs):
        raise _Busy()

    monkeypatch.setattr(client_module, "prepare_basic_transaction", busy)
    landed = sender.submit(send, timeout=60, poll=POLL)
    assert landed.code == 0 and landed.gas_wanted == simulated * 3 // 2
    deposit = MsgDepositCollateral(depositor=str(alice.address()), amount="1")
    with pytest.raises(grpc.RpcError):  # never simulated: nothing to go by
        sender.submit(deposit, timeout=3, poll=POLL)


def test_the_queries_wallets_and_explorers_ask_at_start_up(running_chain):
    """What Keplr, cosmjs and explorers call first: auth and bank params, the address prefix,
    denom metadata, spendable balances, the node's minimum gas price, server reflection, and
    Simulate through ``abci_query`` (how cosmjs prices fee "auto")."""
    import base64

    from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_q
    from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2_grpc as auth_grpc
    from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2_grpc as bank_grpc
    from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2 as node_q
    from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2_grpc as node_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    from dilochain.localnet import rpc_call

    sender = running_chain.wallets[3]
    address = str(sender.address())
    with grpc.insecure_channel(running_chain.address) as channel:
        auth = auth_grpc.QueryStub(channel)
        bank = bank_grpc.QueryStub(channel)
        assert auth.Bech32Prefix(auth_q.Bech32PrefixRequest()).bech32_prefix == "dilo"
        assert auth.Params(auth_q.QueryParamsRequest()).params.sig_verify_cost_secp256k1 == 1000
        info = auth.AccountInfo(auth_q.QueryAccountInfoRequest(address=address)).info
        assert info.address == address
        (meta,) = bank.DenomsMetadata(bank_q.QueryDenomsMetadataRequest()).metadatas
        assert (meta.base, meta.display, meta.denom_units[1].exponent) == (DENOM, "dlc", 6)
        assert bank.DenomMetadata(bank_q.QueryDenomMetadataRequest(denom=DENOM)).metadata == meta
        with pytest.raises(grpc.RpcError) as err:
            bank.DenomMetadata(bank_q.QueryDenomMetadataRequest(denom="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        spendable = bank.SpendableBalances(bank_q.QuerySpendableBalancesRequest(address=address))
        held = bank.AllBalances(bank_q.QueryAllBalancesRequest(address=address))
        assert list(spendable.balances) == list(held.balances) and held.balances
        assert bank.Params(bank_q.QueryParamsRequest()).params.default_send_enabled
        config = node_grpc.ServiceStub(channel).Config(node_q.ConfigRequest())
        assert config.minimum_gas_price == f"0.025{DENOM}"
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
        assert {"cosmos.bank.v1beta1.Query", "cosmos.tx.v1beta1.Service",
                "dilochain.poc.v1.Query"} <= services  # fmt: skip
    send = MsgSend(from_address=address, to_address=str(wallet(998).address()),
                   amount=[Coin(denom=DENOM, amount="1")])  # fmt: skip
    raw = signed_tx(sender, [send], sequence=info.sequence, account_number=info.account_number)
    request = tx_s.SimulateRequest(tx_bytes=raw).SerializeToString().hex()
    path = "/cosmos.tx.v1beta1.Service/Simulate"
    rpc = running_chain.process.rpc_address
    answer = rpc_call(rpc, "abci_query", path=path, data=request)["response"]
    assert answer.get("code", 0) == 0, answer
    simulated = tx_s.SimulateResponse.FromString(base64.b64decode(answer["value"]))
    assert 0 < simulated.gas_info.gas_used < 200_000


def test_the_rest_server_maps_every_service_as_the_sdk_s_gateway_does(running_chain):
    """REST (LCD) as Keplr and explorers use it: the SDK's paths and JSON (proto field names,
    int64 as strings), a broadcast by POST, dilochain's own queries, errors as grpc-gateway's."""
    import base64
    import json
    import urllib.error
    import urllib.request

    base = f"http://{running_chain.process.rest_address}"

    def call(path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(base + path, data,
                                         {"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as err:
            return err.code, json.load(err)

    sender = running_chain.wallets[2]
    address = str(sender.address())
    status, held = call(f"/cosmos/bank/v1beta1/balances/{address}")
    assert status == 200 and held["balances"][0]["denom"] == DENOM
    assert int(held["balances"][0]["amount"]) > 0
    status, found = call(f"/cosmos/auth/v1beta1/accounts/{address}")
    account = found["account"]
    assert account["@type"] == "/cosmos.auth.v1beta1.BaseAccount" and account["address"] == address
    status, latest = call("/cosmos/base/tendermint/v1beta1/blocks/latest")
    assert status == 200 and int(latest["block"]["header"]["height"]) >= 1
    status, params = call("/dilochain/poc/v1/params")
    assert status == 200 and "screeners_per_commit" in params["params"]
    status, runs = call("/dilochain/poc/v1/runs?pagination.limit=2")
    assert status == 200 and runs["runs"] == []
    # A broadcast by POST, as Keplr sends it, and the tx looked up by hash.
    send = MsgSend(from_address=address, to_address=str(wallet(997).address()),
                   amount=[Coin(denom=DENOM, amount="3")])  # fmt: skip
    raw = signed_tx(sender, [send], sequence=int(account["sequence"]),
                    account_number=int(account["account_number"]))  # fmt: skip
    status, sent = call("/cosmos/tx/v1beta1/txs", {"tx_bytes": base64.b64encode(raw).decode(),
                                                   "mode": "BROADCAST_MODE_SYNC"})  # fmt: skip
    assert status == 200 and sent["tx_response"]["code"] == 0, sent
    running_chain.client.wait_for_query_tx(sent["tx_response"]["txhash"])
    status, got = call(f"/cosmos/tx/v1beta1/txs/{sent['tx_response']['txhash']}")
    assert status == 200 and got["tx_response"]["code"] == 0
    assert int(got["tx_response"]["height"]) > 0
    # Errors: grpc-gateway's statuses and body.
    status, error = call(f"/cosmos/auth/v1beta1/accounts/{wallet(424243).address()}")
    assert status == 404 and error["code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert "not found" in error["message"] and error["details"] == []
    assert call("/cosmos/bank/v1beta1/balances/nobody")[0] == 400
    assert call("/dilochain/poc/v1/runs?pagination.limit=lots")[0] == 400
    assert call("/dilochain/poc/v1/runs?no_such_field=1")[0] == 400
    assert call("/dilochain/poc/v1/runs?pagination.limit=-1")[0] == 400  # not a uint64
    deep = urllib.request.Request(base + "/cosmos/tx/v1beta1/simulate", b"[" * 100_000,
                                  {"Content-Type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(deep, timeout=10)
    assert refused.value.code == 400  # nesting no parser should follow, answered in kind
    assert call("/cosmos/bank/v1beta1/params")[0] == 200  # and the gateway serves on


COSMJS = Path(__file__).parent / "cosmjs"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_cosmjs_reads_the_chain_and_sends_with_fee_auto(running_chain):
    """An unmodified cosmjs 0.39 (tests/cosmjs/check.mjs) over CometBFT's RPC and the REST
    server: chain id, height, account, balance and validator set; a bank send with fee "auto"
    (cosmjs simulates it through ``abci_query``), found again by hash; the balance over REST."""
    assert (COSMJS / "node_modules").is_dir(), "run ./scripts/bootstrap.sh (npm ci in tests/cosmjs)"
    sender = running_chain.wallets[3]
    recipient = str(wallet(995).address())
    key = sender.signer().private_key_bytes.hex()
    rpc = f"http://{running_chain.process.rpc_address}"
    rest = f"http://{running_chain.process.rest_address}"
    done = subprocess.run(["node", "check.mjs", rpc, rest, key, recipient, DENOM, "0.025"],
                          cwd=COSMJS, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["chainId"] == CHAIN_ID and found["height"] > 0
    assert found["sender"] == str(sender.address()) and int(found["senderBalance"]) > 0
    assert found["validators"] == 1 and found["votingPower"][0] > 0
    assert found["code"] == 0 and found["found"]
    assert 0 < found["gasUsed"] <= found["gasWanted"] < 200_000  # simulated, times cosmjs' 1.4
    assert found["restStatus"] == 200
    assert found["restBalances"] == [{"denom": DENOM, "amount": "12345"}]
    # x/staking's view of the (closed, genesis) set: its power in udlc, no delegation.
    (bonded,) = found["bonded"]
    assert bonded["operator"].startswith("dilovaloper1") and not bonded["jailed"]
    assert int(bonded["tokens"]) == found["votingPower"][0] * 10**6
    assert found["staked"] is None and found["restValidators"] == [bonded["operator"]]
