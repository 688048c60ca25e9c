"""The validator-set drill of a chaos run (:mod:`dilochain.chaos`): what the validators of a
public network go through, while the run trains. A new node joins the running network by state
sync (a snapshot, not every block) and then the validator set by bonding stake; it is stopped
past the downtime window, jailed, started again and unjailed by its operator; then a twin of a
genesis validator (a second node started with its consensus key) signs twice, and CometBFT's
evidence gets that validator slashed and tombstoned. Operators act through the ``dilochain``
CLI, as a person would.

The joiner's power is small (3 to the genesis validators' 10 each), so that with it down any
three genesis validators still hold more than 2/3 (a validator the chaos run kills meanwhile
does not halt the chain) and its turns to propose, which fail while it is down, are rare.

The twin signs a different block than its original whenever their key proposes: the twin's
mempool holds a tx of its own that it does not gossip (``mempool_broadcast`` off), so the two
proposals differ and each prevotes its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dilochain.chain.home import (
    NodeConfig,
    genesis_path,
    init_home,
    listen_addresses,
    node_id,
    validator_of,
)
from dilochain.chain.modules.validator_set import BONDED, JAILED, TOMBSTONED, status_name
from dilochain.chain.testnet import free_ports
from dilochain.client import broadcast, connect
from dilochain.keyring import Keyring
from dilochain.localnet import ChainProcess, LocalNetwork, rpc_call, state_sync_settings
from dilochain.poc_client import PocClient
from dilochain.protocol.params import DENOM
from dilochain.testutil import CHAIN_ID, wallet

GENESIS_BOND = 10_000_000  # each genesis validator's self-bond: power 10
JOIN_BOND = 3_000_000  # the joiner's: power 3
TWINNED = 1  # the genesis validator (node1) whose key the twin signs with
# Jailed after missing 41 of the last 80 blocks: a validator killed or paused by the chaos run
# is back within a few seconds (some 15 blocks); the drill keeps the joiner down until jailed.
VALIDATOR_SET = {"signed_blocks_window": 80, "min_signed_per_window": "0.5",
                 "downtime_jail_blocks": 8, "min_self_bond": 10**6}  # fmt: skip
SNAPSHOTS = ("--snapshot-interval", "20", "--snapshot-keep", "3")
STEPS = {
    "join": "a node joined by state sync and then the validator set",
    "downtime": "the validator down past its window was jailed, then unjailed",
    "double-sign": "the double-signer was slashed and tombstoned",
}


@dataclass
class _Operator:
    name: str
    home: Path
    address: str


@dataclass
class ValidatorDrill:
    """The drill in ``root``; :meth:`operators` before the genesis (their stakes), :meth:`start`
    once the network runs, :meth:`checks` at the end, :meth:`close` always."""

    root: Path
    password: str
    block_time: str
    say: Callable[[str], None] = print
    results: dict[str, tuple[bool, str]] = field(default_factory=dict)
    _operators: list[_Operator] = field(default_factory=list)
    _nodes: list[ChainProcess] = field(default_factory=list)  # the joiner, the twin
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _started: float = 0.0

    def operators(self, validators: int) -> list[tuple[str, int]]:
        """Keys for the operators of ``validators`` genesis validators and of the joiner; the
        genesis stakes (operator, self-bond) for :func:`~dilochain.chain.testnet.init_testnet`."""
        if validators < 4:
            raise ValueError("the validator drill needs four validators (it takes two out)")
        for name in [*(f"operator-{i}" for i in range(validators)), "joiner"]:
            home = self.root / name
            address = Keyring(home / "keyring").add("op", self.password)[0].address
            self._operators.append(_Operator(name, home, address))
        return [(op.address, GENESIS_BOND) for op in self._operators[:-1]]

    @property
    def accounts(self) -> list[str]:
        """Accounts the genesis must fund: the operators and the twin's own tx sender."""
        return [*(op.address for op in self._operators), str(_twin_sender().address())]

    @property
    def names(self) -> dict[str, str]:
        """The operators' names by account address (for reports)."""
        return {op.address: op.name for op in self._operators}

    @property
    def spared(self) -> str:
        """The validator the chaos run must leave alone (the drill's twin signs with its key,
        and the drill reads the chain from it)."""
        return f"node{TWINNED}"

    def start(self, network: LocalNetwork) -> None:
        """Run the steps, one after another, in a thread."""
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(network,),
                                        name="validator-drill", daemon=True)  # fmt: skip
        self._thread.start()

    @property
    def joined(self) -> list[ChainProcess]:
        """The node that joined the validator set, once it has."""
        return self._nodes[:1] if self.results.get("join", (False,))[0] else []

    @property
    def done(self) -> bool:
        """Whether every step has ended (passed or failed)."""
        return self._thread is not None and not self._thread.is_alive()

    def close(self) -> None:
        """Stop the drill and the nodes it started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        for node in self._nodes:
            node.kill()

    def _run(self, network: LocalNetwork) -> None:
        do = {"join": self._join, "downtime": self._downtime, "double-sign": self._double_sign}
        for step in STEPS:
            try:
                self.results[step] = (True, do[step](network))
            except Exception as err:  # a step that failed is reported; the rest cannot follow
                self.results[step] = (False, f"{type(err).__name__}: {err}")
                self._say(f"{step} failed: {err}")
                return
            self._say(f"{step}: {self.results[step][1]}")

    def _say(self, line: str) -> None:
        self.say(f"t={time.monotonic() - self._started:6.1f}s  validator drill: {line}")

    def checks(self, poc: PocClient) -> dict[str, tuple[bool, str]]:
        """Each step's outcome, and that no validator outside the drill was slashed."""
        found = {name: self.results.get(s, (False, "not reached")) for s, name in STEPS.items()}
        drilled = {self._operators[TWINNED].address, self._operators[-1].address}
        others = [op.name for op in self._operators
                  if op.address not in drilled and poc.slashes(op.address)]  # fmt: skip
        found["no other validator slashed"] = (not others, ", ".join(others) or "none")
        return found

    # ---- the steps ------------------------------------------------------------------------
    def _join(self, network: LocalNetwork) -> str:
        """A fresh node restores a snapshot from the network, then its operator bonds it in."""
        operator = self._operators[-1]
        node = self._new_node(operator.home, network, "joiner")
        status = rpc_call(node.rpc_address, "status")["sync_info"]
        earliest = int(status["earliest_block_height"])
        if earliest <= 1:
            raise AssertionError("the joiner replayed from genesis instead of a snapshot")
        consensus = validator_of(operator.home).address
        self._cli("tx", "validator", "create", "op", "--amount", str(JOIN_BOND), "--moniker",
                  "joiner", "--home", str(operator.home), *self._chain(network))  # fmt: skip
        self._wait(lambda: _power(network, consensus) > 0, "the joiner's voting power")
        self._wait(lambda: _signed(network, consensus), "the joiner signing a block")
        return f"restored at height {earliest - 1}, power {_power(network, consensus)}, signing"

    def _double_sign(self, network: LocalNetwork) -> str:
        """A twin of node1 (its consensus key, a node of its own) until node1 is tombstoned."""
        original = network.nodes[TWINNED].home
        twin_home = self.root / "twin"
        twin = self._new_node(twin_home, network, "twin", key_of=original)
        consensus = validator_of(original).address
        client, sender = connect(twin.address, CHAIN_ID), _twin_sender()
        sent = 0
        deadline = time.monotonic() + 180
        while _power(network, consensus) > 0:
            self._check_time(deadline, "the twin's double-signing evidence")
            if int(rpc_call(twin.rpc_address, "num_unconfirmed_txs")["n_txs"]) == 0:
                with contextlib.suppress(Exception):  # taken meanwhile: sent again next time
                    broadcast(client, sender, _send_one(sender))
                    sent += 1
            time.sleep(0.3)
        twin.kill()
        status = _validator(network, consensus).status
        reasons = [s.reason for s in _slashes(network, self._operators[TWINNED].address)]
        if status != TOMBSTONED or reasons != ["duplicate_vote"]:
            raise AssertionError(f"node1 is {status_name(status)}, slashed for {reasons}")
        return f"tombstoned, slashed for {reasons[0]} ({sent} private txs fed to the twin)"

    def _downtime(self, network: LocalNetwork) -> str:
        """The joiner stopped until jailed, started again after its jail, unjailed by its
        operator."""
        node, operator = self._nodes[0], self._operators[-1]
        consensus = validator_of(node.home).address
        node.kill()
        jailed = self._wait(lambda: (r := _validator(network, consensus)).status == JAILED and r,
                            "the joiner jailed")  # fmt: skip
        until = int(jailed.jailed_until)
        self._wait(lambda: _height(network) >= until, f"the end of the joiner's jail ({until})")
        node.start(wait=False)
        self._wait(lambda: _caught_up(node, network), "the joiner caught up")
        self._cli("tx", "validator", "unjail", "op", "--home", str(operator.home),
                  *self._chain(network))  # fmt: skip
        self._wait(lambda: _power(network, consensus) > 0, "the joiner's voting power back")
        self._wait(lambda: _signed(network, consensus), "the joiner signing again")
        reasons = [s.reason for s in _slashes(network, operator.address)]
        status = self._listed(network, consensus)["status"]
        if reasons != ["downtime"] or status != status_name(BONDED):
            raise AssertionError(f"the joiner is {status}, slashed for {reasons}")
        return f"jailed until block {until}, unjailed, bonded and signing"

    # ---- helpers --------------------------------------------------------------------------
    def _new_node(self, home: Path, network: LocalNetwork, moniker: str,
                  key_of: Path | None = None) -> ChainProcess:  # fmt: skip
        """A node of ``network`` made by state sync, trusting node1's RPC (the validator the chaos
        run leaves alone), started and caught up. Its operator runs ``chain init``; with
        ``key_of``, it is a twin: that home's consensus key, and txs sent to it not gossiped."""
        rpc, p2p = (f"127.0.0.1:{port}" for port in free_ports(2))
        homes = [n.home for n in network.nodes] + [n.home for n in self._nodes]
        peers, trusted = [_peer(h) for h in homes], _reference(network).rpc_address
        if key_of is None:
            self._cli("chain", "init", "--home", str(home), "--chain-id", CHAIN_ID,
                      "--moniker", moniker, "--rpc-address", rpc, "--p2p-address", p2p,
                      "--cometbft-metrics-address", "", "--block-time", self.block_time,
                      "--persistent-peers", ",".join(peers), "--state-sync", trusted)  # fmt: skip
        else:
            config = NodeConfig(
                moniker=moniker, rpc_address=rpc, p2p_address=p2p, cometbft_metrics_address="",
                block_time=self.block_time, persistent_peers=peers, mempool_broadcast=False,
                **state_sync_settings([trusted]),
            )  # fmt: skip
            init_home(home, CHAIN_ID, overwrite=True, config=config)
            key = Path("config") / "priv_validator_key.json"
            shutil.copy(key_of / key, home / key)
        shutil.copy(genesis_path(network.nodes[0].home), genesis_path(home))
        node = ChainProcess(home, block_time=None, options=SNAPSHOTS)
        self._nodes.append(node)
        node.start(first_block=False)
        self._wait(lambda: _caught_up(node, network), f"{moniker} caught up by state sync")
        return node

    def _chain(self, network: LocalNetwork) -> list[str]:
        return ["--chain", ",".join(n.address for n in network.nodes)]

    def _listed(self, network: LocalNetwork, consensus: str) -> dict:
        """``query validators``' entry for ``consensus``, as its operator reads it."""
        listed = self._cli("query", "validators", *self._chain(network), "--output", "json")
        return next(v for v in json.loads(listed) if v["consensus_address"] == consensus)

    def _cli(self, *args: str) -> str:
        """``dilochain ARGS`` (the keyring password in the environment); its standard output."""
        done = subprocess.run(
            [sys.executable, "-m", "dilochain.cli.main", *args], capture_output=True,
            text=True, timeout=120,
            env={**os.environ, "DILOCHAIN_KEYRING_PASSWORD": self.password},
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"dilochain {' '.join(args[:3])}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def _wait(self, condition: Callable[[], object], what: str, timeout: float = 180) -> object:
        """Poll ``condition`` (errors of a node restarting count as not yet) until true."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError, StopIteration):
                if found := condition():
                    return found
            self._check_time(deadline, what)
            time.sleep(0.3)

    def _check_time(self, deadline: float, what: str) -> None:
        if self._stop.is_set():
            raise RuntimeError(f"stopped while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached in time: {what}")


def _twin_sender():
    return wallet(7_001)


def _send_one(sender) -> object:
    from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
    from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin

    address = str(sender.address())
    return MsgSend(from_address=address, to_address=address, amount=[Coin(denom=DENOM, amount="1")])


def _peer(home: Path) -> str:
    return f"{node_id(home)}@{listen_addresses(home)[1]}"


def _reference(network: LocalNetwork) -> ChainProcess:
    """A validator the chaos run leaves alone, to read the chain from."""
    return network.nodes[TWINNED]


def _height(network: LocalNetwork) -> int:
    return _reference(network).height()


def _power(network: LocalNetwork, consensus: str) -> int:
    """``consensus``'s voting power in CometBFT's current set (0: not in it)."""
    listed = rpc_call(_reference(network).rpc_address, "validators")["validators"]
    return next((int(v["voting_power"]) for v in listed if v["address"] == consensus), 0)


def _signed(network: LocalNetwork, consensus: str) -> bool:
    """Whether ``consensus`` signed the block before the latest one."""
    commit = rpc_call(_reference(network).rpc_address, "block")["block"]["last_commit"]
    return any(s["validator_address"] == consensus and s["block_id_flag"] == 2
               for s in commit["signatures"])  # fmt: skip


def _caught_up(node: ChainProcess, network: LocalNetwork) -> bool:
    status = rpc_call(node.rpc_address, "status")["sync_info"]
    return not status["catching_up"] and int(status["latest_block_height"]) >= _height(network)


def _validator(network: LocalNetwork, consensus: str):
    with PocClient(_reference(network).address) as poc:
        return next(v for v in poc.validators() if v.consensus_address == consensus)


def _slashes(network: LocalNetwork, address: str) -> list:
    with PocClient(_reference(network).address) as poc:
        return poc.slashes(address)
