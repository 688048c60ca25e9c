"""CometBFT's RPC against this chain, as any Cosmos tool uses it: status, broadcast_tx_sync, tx,
block, tx_search, abci_query (gRPC paths) and a websocket subscription."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
import urllib.request

import aiohttp
import pytest
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_q
from cosmpy.protos.cosmos.auth.v1beta1.auth_pb2 import BaseAccount
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.ics23.v1 import proofs_pb2 as ics23

from dilochain.chain.errors import codes
from dilochain.chain.home import read_config
from dilochain.chain.modules import bank
from dilochain.chain.store_query import STORE_PATH
from dilochain.localnet import rpc_call
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import DENOM
from dilochain.protocol.state_proof import ProofError, verify_membership, verify_non_membership
from dilochain.testutil import CHAIN_ID, signed_tx, wallet
from tests.conftest import FUNDS

pytestmark = pytest.mark.integration


def wait_for_tx(address: str, digest: bytes, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return rpc_call(address, "tx", hash=base64.b64encode(digest).decode())
        except ValueError:  # not indexed yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_cometbft_serves_its_own_prometheus_metrics(running_chain):
    """CometBFT's instrumentation is on (its own address in config.toml): consensus height and
    rounds, which the application cannot see, are scraped there."""
    address = read_config(running_chain.home)["instrumentation"]["prometheus_listen_addr"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert "cometbft_consensus_height" in text


def test_status_broadcast_tx_block_and_search(running_chain):
    address = running_chain.process.rpc_address
    status = rpc_call(address, "status")
    assert status["node_info"]["network"] == CHAIN_ID
    assert int(status["sync_info"]["latest_block_height"]) >= 1

    sender = running_chain.wallets[0]
    receiver = str(wallet(777).address())
    send = MsgSend(from_address=str(sender.address()), to_address=receiver,
                   amount=[Coin(denom=DENOM, amount="42")])  # fmt: skip
    raw = signed_tx(sender, [send], sequence=0, account_number=0)
    checked = rpc_call(address, "broadcast_tx_sync", tx=base64.b64encode(raw).decode())
    assert checked["code"] == 0 and checked["hash"] == tx_hash(raw).hex().upper()

    found = wait_for_tx(address, tx_hash(raw))
    height = int(found["height"])
    assert found["tx_result"]["code"] == 0 and base64.b64decode(found["tx"]) == raw
    block = rpc_call(address, "block", height=str(height))["block"]
    assert base64.b64decode(block["data"]["txs"][0]) == raw
    by_sender = rpc_call(address, "tx_search", query=f"message.sender='{sender.address()}'")
    assert tx_hash(raw).hex().upper() in {t["hash"] for t in by_sender["txs"]}
    by_height = rpc_call(address, "tx_search", query=f"tx.height={height}")
    assert int(by_height["total_count"]) >= 1

    # A tx that does not decode is refused by CheckTx with a code; blocks keep coming.
    garbage = rpc_call(address, "broadcast_tx_sync", tx=base64.b64encode(b"\x00junk").decode())
    assert garbage["code"] == codes.TX_DECODE and garbage["log"]
    running_chain.process.wait_for_height(height + 2)


def test_abci_query_answers_grpc_paths(running_chain):
    address = running_chain.process.rpc_address
    owner = str(running_chain.wallets[1].address())
    request = bank_q.QueryBalanceRequest(address=owner, denom=DENOM)
    answer = rpc_call(address, "abci_query", path="/cosmos.bank.v1beta1.Query/Balance",
                 data=request.SerializeToString().hex())["response"]  # fmt: skip
    balance = bank_q.QueryBalanceResponse.FromString(base64.b64decode(answer["value"]))
    assert int(balance.balance.amount) <= FUNDS and balance.balance.denom == DENOM
    request = auth_q.QueryAccountRequest(address=owner)
    answer = rpc_call(address, "abci_query", path="/cosmos.auth.v1beta1.Query/Account",
                 data=request.SerializeToString().hex())["response"]  # fmt: skip
    account = BaseAccount()
    auth_q.QueryAccountResponse.FromString(base64.b64decode(answer["value"])).account.Unpack(
        account
    )
    assert account.address == owner and account.account_number == 1
    unknown = rpc_call(address, "abci_query", path="/nope.Query/Nothing", data="")["response"]
    assert unknown["code"] == codes.UNKNOWN_REQUEST and unknown["log"]


def _every_query_path() -> list[str]:
    """Every method of every gRPC service the chain registers, routed or not."""
    from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
    from cosmpy.protos.cosmos.consensus.v1 import query_pb2 as consensus_q
    from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s

    from dilochain.protocol.pb.poc.v1 import query_pb2 as poc_q

    modules = (auth_q, bank_q, consensus_q, poc_q, tx_s, tm_q)
    return [f"/{service.full_name}/{method.name}" for module in modules
            for service in module.DESCRIPTOR.services_by_name.values()
            for method in service.methods]  # fmt: skip


def test_no_query_stops_the_chain(running_chain):
    """Every registered query path with empty, garbage and oversized bytes, and random paths,
    through CometBFT's RPC: each is answered (a code where it fails) and blocks keep coming.
    (An unimplemented auth method once answered an ABCI exception, and CometBFT stopped.)"""
    address = running_chain.process.rpc_address
    start = running_chain.process.height()
    rng = random.Random(29)
    paths = [*_every_query_path(), "/" + rng.randbytes(12).hex(), "/a/b/c", "", "x" * 2000]
    assert "/cosmos.auth.v1beta1.Query/Params" in paths
    bodies = ["", "ff" * 9, rng.randbytes(64).hex(), rng.randbytes(300_000).hex()]
    answered = 0
    for path in paths:
        for body in bodies:
            answer = rpc_call(address, "abci_query", path=path, data=body)["response"]
            answered += 1
            assert answer.get("code", 0) != codes.INTERNAL, (path, answer.get("log"))
    assert answered == len(paths) * len(bodies)
    # A path that is not UTF-8: CometBFT's URI handler passes raw bytes on (0x…).
    for raw_path in ("0xff", "0xc3", "0x2fff2f"):
        url = f"http://{address}/abci_query?path={raw_path}&data=0x00"
        with urllib.request.urlopen(url, timeout=10) as reply:
            answer = json.load(reply)["result"]["response"]
        assert answer["code"] == codes.INVALID_REQUEST, answer
    running_chain.process.wait_for_height(start + 3)
    assert rpc_call(address, "status")["node_info"]["network"] == CHAIN_ID


def test_state_queries_are_proven_against_the_next_header(running_chain):
    """``abci_query`` of a state key with ``prove``: the value at height h and an ICS-23 proof
    that checks against the app hash of header h + 1; an absent key's proof of absence too."""
    address = running_chain.process.rpc_address
    owner = str(running_chain.wallets[2].address())
    key = bank.balance_key(owner, DENOM)
    for present in (key, bank.balance_key(owner, "nothing")):
        for _ in range(50):  # a block being committed answers CONFLICT: "ask again", as told
            answer = rpc_call(address, "abci_query", path=STORE_PATH, data=present.hex(),
                              prove=True)["response"]  # fmt: skip
            if answer.get("code", 0) != codes.CONFLICT:
                break
            time.sleep(0.05)
        assert answer.get("code", 0) == 0, answer
        height = int(answer["height"])
        value = base64.b64decode(answer.get("value") or "")
        (op,) = answer["proofOps"]["ops"]
        assert op["type"] == "ics23:smt" and base64.b64decode(op["key"]) == present
        proof = ics23.CommitmentProof.FromString(base64.b64decode(op["data"]))
        running_chain.process.wait_for_height(height + 1)
        header = rpc_call(address, "block", height=str(height + 1))["block"]["header"]
        root = bytes.fromhex(header["app_hash"])
        if present == key:
            assert int(value) > 0
            verify_membership(proof, root, key, value)
            with pytest.raises(ProofError):
                verify_membership(proof, root, key, str(int(value) + 1).encode())
        else:
            assert value == b""
            verify_non_membership(proof, root, present)
    refused = rpc_call(address, "abci_query", path=STORE_PATH, data="", prove=True)["response"]
    assert refused["code"] == codes.INVALID_REQUEST


def test_websocket_subscription_streams_new_blocks(running_chain):
    address = running_chain.process.rpc_address

    async def two_blocks() -> list[int]:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"ws://{address}/websocket") as ws,
        ):
            await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "subscribe",
                                "params": {"query": "tm.event='NewBlock'"}})  # fmt: skip
            heights = []
            while len(heights) < 2:
                message = await asyncio.wait_for(ws.receive_json(), 30)
                data = message.get("result", {}).get("data")
                if data:
                    heights.append(int(data["value"]["block"]["header"]["height"]))
            return heights

    first, second = asyncio.run(two_blocks())
    assert second == first + 1
