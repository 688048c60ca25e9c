"""The open validator set, block by block in-process: joining by stake, powers sent to CometBFT,
downtime jailing and unjailing, double-sign evidence, leaving, and the set's limits."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from decimal import Decimal

import grpc
import pytest
from cosmpy.protos.cosmos.base.query.v1beta1.pagination_pb2 import PageRequest
from cosmpy.protos.cosmos.crypto.ed25519.keys_pb2 import PubKey
from cosmpy.protos.cosmos.staking.v1beta1 import query_pb2 as staking_q
from cosmpy.protos.tendermint.abci import types_pb2 as abci
from cosmpy.protos.tendermint.types.validator_pb2 import BlockIDFlag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from dilochain.chain.abci import AbciHandler
from dilochain.chain.app import Application
from dilochain.chain.context import Context
from dilochain.chain.errors import codes
from dilochain.chain.grpc_services import Services, register_all
from dilochain.chain.modules import collateral, slashing, verifiers
from dilochain.chain.modules import validator_set as vs
from dilochain.chain.query_router import QueryRouter
from dilochain.chain.staking_query import tokens
from dilochain.chain.state import CacheStore
from dilochain.chain.store import ChainStore
from dilochain.chain.testing import InProcessChain
from dilochain.genesis.document import GenesisError, parse_genesis
from dilochain.protocol.address import decode_address, encode_address
from dilochain.protocol.params import DENOM, ValidatorSetParams
from dilochain.protocol.pb.poc.v1.tx_pb2 import (
    MsgCreateValidator,
    MsgDepositCollateral,
    MsgLeaveValidatorSet,
    MsgRegisterVerifier,
    MsgUnjailValidator,
    MsgWithdrawCollateral,
)
from dilochain.protocol.pb.poc.v1.types_pb2 import ChainValidator
from dilochain.testutil import CHAIN_ID, signed_tx, wallet

OPERATOR, JOINER = wallet(41), wallet(42)
OP, J, OP2 = str(OPERATOR.address()), str(JOINER.address()), str(wallet(43).address())
WINDOW, JAIL, RELEASE = 4, 3, 5  # max missed in a window: 4 - 0.5 x 4 = 2


def _private(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)


def _key(seed: int) -> bytes:
    return _private(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


G1, G2, K = _key(1), _key(2), _key(3)


def _proof(seed: int, operator: str) -> bytes:
    return _private(seed).sign(vs.proof_message(CHAIN_ID, operator))


def _genesis_validator(key: bytes, operator: str = "", self_bond: int = 10_000_000) -> dict:
    value = base64.b64encode(key).decode()
    return {"address": vs.consensus_address(key), "power": 10, "operator": operator,
            "self_bond": self_bond if operator else 0,
            "pub_key": {"type": "tendermint/PubKeyEd25519", "value": value}}  # fmt: skip


def _chain(tmp_path, genesis_keys=(G1, G2), staked=True, **validator_set) -> InProcessChain:
    params = {"power_reduction": 1_000_000, "min_self_bond": 1_000_000,
              "signed_blocks_window": WINDOW, "downtime_jail_blocks": JAIL,
              "slash_fraction_downtime": "0.01", "release_blocks": RELEASE,
              "release_seconds": 1, **validator_set}  # fmt: skip
    funded = [{"address": a, "coins": [{"denom": DENOM, "amount": 10**9}]} for a in (OP, J)]
    evidence = {"max_age_num_blocks": RELEASE, "max_age_duration": 10**9}
    operators = (OP, OP2) if staked else ("", "")
    genesis = parse_genesis({
        "chain_id": CHAIN_ID,
        "consensus_params": {"evidence": evidence},
        "validators": [_genesis_validator(k, operators[i]) for i, k in enumerate(genesis_keys)],
        "app_state": {"accounts": funded, "params": {"validator_set": params}},
    })  # fmt: skip
    app = Application(ChainStore(tmp_path / "chain.db"), genesis)
    app.init_chain()
    return InProcessChain(app)


class _Signer:
    """Sends one wallet's txs with increasing sequence numbers."""

    def __init__(self, chain: InProcessChain, who, account_number: int):
        self.chain, self.who, self.account, self.sequence = chain, who, account_number, 0

    def send(self, *msgs) -> int:
        """CheckTx's code; the sequence moves on when the tx is admitted."""
        raw = signed_tx(self.who, list(msgs), sequence=self.sequence,
                        account_number=self.account)  # fmt: skip
        code = self.chain.broadcast(raw).code
        self.sequence += code == 0
        return code


def _record(chain: InProcessChain, key: bytes):
    return vs.get(chain.app.committed_view(), vs.consensus_address(key))


def _votes(**signed: bool) -> list[vs.Vote]:
    keys = {"g1": G1, "g2": G2, "k": K}
    return [vs.Vote(vs.consensus_address(keys[name]), ok) for name, ok in signed.items()]


def _join(chain: InProcessChain, amount: int = 3_000_000) -> _Signer:
    joiner = _Signer(chain, JOINER, 1)
    deposit = MsgDepositCollateral(depositor=J, amount=str(amount + 2_000_000))
    create = MsgCreateValidator(operator=J, pub_key=K, amount=str(amount), moniker="k",
                                key_proof=_proof(3, J))  # fmt: skip
    assert joiner.send(deposit, create) == 0
    (result,) = chain.block()
    assert result.code == 0, result.raw_log
    return joiner


def test_genesis_members_are_staked_and_a_validator_joins_with_its_bond(tmp_path):
    chain = _chain(tmp_path)
    g1 = _record(chain, G1)
    assert (g1.status, g1.power, g1.operator, g1.self_bond) == (vs.BONDED, 10, OP, "10000000")
    view = chain.app.committed_view()
    # A genesis self-bond is the operator's collateral, reserved: it cannot be withdrawn.
    assert collateral.bonded(view, OP2) == collateral.locked(view, OP2) == 10_000_000
    genesis_operator = _Signer(chain, OPERATOR, 0)
    assert genesis_operator.send(MsgWithdrawCollateral(depositor=OP, amount="1")) != 0
    _join(chain)
    assert chain.last.validator_updates == [(K, 3)]  # 3,000,000 udlc / 1,000,000
    record = _record(chain, K)
    assert (record.status, record.power, record.self_bond, record.operator) == (
        vs.BONDED, 3, "3000000", J)  # fmt: skip
    view = chain.app.committed_view()
    assert collateral.locked(view, J) == 3_000_000 and collateral.bonded(view, J) == 5_000_000
    chain.block()
    assert chain.last.validator_updates == []  # sent once
    joiner = _Signer(chain, JOINER, 1)
    joiner.sequence = 1
    assert joiner.send(MsgWithdrawCollateral(depositor=J, amount="2000001")) != 0


def test_creating_a_validator_refuses_hostile_input(tmp_path):
    chain = _chain(tmp_path)
    joiner = _Signer(chain, JOINER, 1)
    assert joiner.send(MsgDepositCollateral(depositor=J, amount="5000000")) == 0
    chain.block()

    def create(**fields) -> int:
        msg = {"operator": J, "pub_key": K, "amount": "2000000", "moniker": "k",
               "key_proof": _proof(3, J), **fields}  # fmt: skip
        return joiner.send(MsgCreateValidator(**msg))

    assert create(pub_key=K[:31]) == codes.INVALID_PUBKEY
    assert create(pub_key=b"") == codes.INVALID_PUBKEY
    # Only the key's holder registers it: no proof, a proof for another operator or chain.
    assert create(key_proof=b"") == codes.UNAUTHORIZED
    assert create(key_proof=_proof(3, OP)) == codes.UNAUTHORIZED
    assert create(key_proof=_private(3).sign(vs.proof_message("other", J))) == codes.UNAUTHORIZED
    assert create(pub_key=_key(9)) == codes.UNAUTHORIZED  # K's proof for key 9
    assert create(pub_key=G2, key_proof=_proof(2, J)) == codes.INVALID_REQUEST  # taken
    assert create(amount="999999") == codes.INSUFFICIENT_FUNDS  # below min_self_bond
    assert create(amount="6000000") == codes.INSUFFICIENT_FUNDS  # more than is bonded
    assert create(amount="-1") == codes.INVALID_COINS
    assert create(moniker="x" * 65) == codes.INVALID_REQUEST
    assert create(moniker="a\nb") == codes.INVALID_REQUEST
    assert create() == 0
    chain.block()
    again = create(pub_key=_key(9), key_proof=_proof(9, J))
    assert again == codes.INVALID_REQUEST  # one validator per operator
    operator = _Signer(chain, OPERATOR, 0)
    taken = MsgCreateValidator(operator=OP, pub_key=K, amount="2000000", key_proof=_proof(3, OP))
    assert operator.send(MsgDepositCollateral(depositor=OP, amount="3000000"), taken) != 0


def test_a_validator_absent_too_often_is_jailed_and_its_operator_unjails_it(tmp_path):
    chain = _chain(tmp_path)
    joiner = _join(chain)
    joined = chain.app.height
    # Missing two blocks of every four is allowed.
    for height in range(joined + 1, joined + 9):
        chain.block(votes=_votes(g1=True, g2=True, k=height % 2 == 0))
        assert _record(chain, K).status == vs.BONDED
    # Absent from then on: the third miss of the window jails it.
    while _record(chain, K).status == vs.BONDED:
        assert chain.app.height < joined + 20
        chain.block(votes=_votes(g1=True, g2=True, k=False))
    jailed_at = chain.app.height
    record = _record(chain, K)
    assert (record.status, record.jailed_until) == (vs.JAILED, jailed_at + JAIL)
    assert chain.last.validator_updates == [(K, 0)]
    (slash,) = slashing.slashes(chain.app.committed_view(), J)
    assert (slash.reason, slash.amount) == ("downtime", "50000")  # 1% of 5,000,000 bonded
    # Votes of a jailed validator (still in CometBFT's set for two blocks) count nothing.
    chain.block(votes=_votes(g1=True, g2=True, k=False))
    assert _record(chain, K).missed_blocks == 0

    assert joiner.send(MsgUnjailValidator(operator=J)) == codes.INVALID_REQUEST  # too early
    while chain.app.height + 1 < jailed_at + JAIL:
        chain.block()
    assert joiner.send(MsgUnjailValidator(operator=J)) == 0
    chain.block()
    record = _record(chain, K)
    assert (record.status, record.signing_start) == (vs.BONDED, chain.app.height)
    assert chain.last.validator_updates == [(K, 3)]  # 4,950,000 bonded stand behind its 3 DLC
    operator = _Signer(chain, OPERATOR, 0)
    assert operator.send(MsgUnjailValidator(operator=OP)) == codes.INVALID_REQUEST  # not jailed


def test_double_signing_slashes_the_bond_it_had_and_tombstones_the_validator(tmp_path):
    chain = _chain(tmp_path)
    joiner = _join(chain)
    infraction = chain.app.height
    # It withdraws its free collateral after the infraction: that is slashed too.
    assert joiner.send(MsgWithdrawCollateral(depositor=J, amount="2000000")) == 0
    chain.block()
    evidence = vs.Evidence(vs.consensus_address(K), infraction, "duplicate_vote")
    chain.block(evidence=[evidence])
    tombstoned_at = chain.app.height
    assert chain.last.validator_updates == [(K, 0)]
    record = _record(chain, K)
    assert record.status == vs.TOMBSTONED
    # Its last vote can be for the next block; evidence of it lives RELEASE blocks more.
    assert record.release_height == tombstoned_at + 3 + RELEASE
    view = chain.app.committed_view()
    (slash,) = slashing.slashes(view, J)
    assert (slash.reason, slash.amount) == ("duplicate_vote", str(5_000_000 // 20))
    assert collateral.bonded(view, J) == 2_850_000  # 3,000,000 less 5%
    chain.block(evidence=[evidence])  # the same evidence again takes nothing more
    assert len(slashing.slashes(chain.app.committed_view(), J)) == 1
    assert joiner.send(MsgUnjailValidator(operator=J)) == codes.INVALID_REQUEST
    while chain.app.height < record.release_height:
        assert collateral.locked(chain.app.committed_view(), J) == 3_000_000
        chain.block()
    view = chain.app.committed_view()
    assert collateral.locked(view, J) == 0
    assert _record(chain, K).status == vs.TOMBSTONED  # kept, but no longer visited per block
    assert view.get(b"valset/" + vs.consensus_address(K).encode()) is None
    create = MsgCreateValidator(operator=J, pub_key=K, amount="1000000", key_proof=_proof(3, J))
    assert joiner.send(create) == codes.INVALID_REQUEST  # the key is barred for good


def test_leaving_keeps_the_stake_slashable_until_evidence_expires_then_forgets_it(tmp_path):
    chain = _chain(tmp_path)
    joiner = _join(chain)
    assert joiner.send(MsgLeaveValidatorSet(operator=J)) == 0
    chain.block()
    left = chain.app.height
    assert chain.last.validator_updates == [(K, 0)]
    record = _record(chain, K)
    assert (record.status, record.release_height) == (vs.LEAVING, left + 3 + RELEASE)
    assert joiner.send(MsgLeaveValidatorSet(operator=J)) == codes.INVALID_REQUEST
    while _record(chain, K) is not None:
        assert collateral.locked(chain.app.committed_view(), J) == 3_000_000
        chain.block()
    assert chain.app.height == left + 3 + RELEASE
    view = chain.app.committed_view()
    assert collateral.locked(view, J) == 0
    assert [key for key, _ in view.iterate(b"valset/")] == [
        b"valset/" + vs.consensus_address(k).encode() for k in sorted(
            (G1, G2), key=vs.consensus_address)]  # fmt: skip
    # Forgotten: the operator may join again, with the same key or another.
    rejoin = MsgCreateValidator(operator=J, pub_key=K, amount="4000000", key_proof=_proof(3, J))
    assert joiner.send(rejoin) == 0
    chain.block()
    assert chain.last.validator_updates == [(K, 4)]


def test_the_set_is_never_emptied_and_only_the_strongest_sign(tmp_path):
    chain = _chain(tmp_path, genesis_keys=(G1,), max_validators=1)
    chain.block(evidence=[vs.Evidence(vs.consensus_address(G1), 1, "duplicate_vote")])
    assert _record(chain, G1).status == vs.TOMBSTONED
    assert chain.last.validator_updates == []  # the only signer is kept until another joins
    for _ in range(RELEASE + 4):  # while CometBFT counts it, its bond is not released
        chain.block()
    assert collateral.locked(chain.app.committed_view(), OP) == 10_000_000
    _join(chain, amount=2_000_000)
    assert sorted(chain.last.validator_updates) == sorted([(G1, 0), (K, 2)])
    assert _record(chain, G1).release_height == chain.app.height + 3 + RELEASE

    capped = _chain(tmp_path / "capped", genesis_keys=(G1,), max_validators=1)
    _join(capped, amount=30_000_000)  # 30 > 10: it takes the only seat
    assert sorted(capped.last.validator_updates) == sorted([(G1, 0), (K, 30)])
    assert _record(capped, G1).status == vs.BONDED and _record(capped, G1).power == 0


def test_the_longest_release_and_jail_genesis_allows_fit_every_record(tmp_path):
    chain = _chain(tmp_path, release_seconds=10**9, release_blocks=10**12,
                   downtime_jail_blocks=10**12)  # fmt: skip
    joiner = _join(chain)
    while _record(chain, K).status == vs.BONDED:
        chain.block(votes=_votes(g1=True, g2=True, k=False))
    assert _record(chain, K).jailed_until == chain.app.height + 10**12
    assert joiner.send(MsgLeaveValidatorSet(operator=J)) == 0
    chain.block()
    left = chain.app.height
    while not _record(chain, K).release_time_ns:  # once its last possible vote has passed
        assert chain.app.height < left + 5  # (an end of block that overflows writes nothing)
        chain.block()
    record = _record(chain, K)
    assert (record.release_height, chain.app.height) == (left + 3 + 10**12, left + 2)
    assert record.release_time_ns == chain.app.last_block_time_ns + 10**18
    assert record.release_time_ns < 2**63


def test_power_counts_only_collateral_no_other_duty_reserved(tmp_path):
    chain = _chain(tmp_path)
    joiner = _Signer(chain, JOINER, 1)
    deposit = MsgDepositCollateral(depositor=J, amount="13000000")
    create = MsgCreateValidator(operator=J, pub_key=K, amount="3000000", key_proof=_proof(3, J))
    assert joiner.send(deposit, MsgRegisterVerifier(verifier=J), create) == 0  # 10 + 3 DLC
    chain.block()
    assert _record(chain, K).power == 3
    view = chain.app.committed_view()
    ctx = Context(view, chain.app.height, 0, CHAIN_ID, chain.app.params)
    collateral.slash(ctx, J, Decimal("0.5"))  # 6.5 DLC left behind 13 reserved
    assert vs._power(view, _record(chain, K), 1_000_000) == 0
    verifiers.remove_if_uncovered(ctx, J)
    assert not verifiers.is_verifier(view, J)


def test_a_closed_genesis_set_stays_as_it_is(tmp_path):
    chain = _chain(tmp_path, staked=False)
    joiner = _Signer(chain, JOINER, 1)
    create = MsgCreateValidator(operator=J, pub_key=K, amount="2000000", key_proof=_proof(3, J))
    assert joiner.send(MsgDepositCollateral(depositor=J, amount="3000000"), create) == (
        codes.UNAUTHORIZED)  # fmt: skip
    for _ in range(3 * WINDOW):  # nobody to unjail it: downtime is not counted
        chain.block(votes=_votes(g1=True, g2=False))
    double_sign = vs.Evidence(vs.consensus_address(G2), 2, "duplicate_vote")
    chain.block(evidence=[double_sign])
    assert [e.type for e in chain.last.events] == ["double_sign"]  # reported, no stake to take
    assert _record(chain, G2).status == vs.BONDED and _record(chain, G2).power == 10
    assert chain.last.validator_updates == []


def test_abci_passes_votes_and_evidence_in_and_validator_updates_out(tmp_path):
    chain = _chain(tmp_path)
    handler = AbciHandler(chain.app, None, "test")
    absent = BlockIDFlag.BLOCK_ID_FLAG_ABSENT
    request = abci.RequestFinalizeBlock(
        height=1, hash=b"h",
        decided_last_commit=abci.CommitInfo(votes=[abci.VoteInfo(
            validator=abci.Validator(address=bytes.fromhex(vs.consensus_address(G1)), power=10),
            block_id_flag=absent)]),
        misbehavior=[abci.Misbehavior(
            type=abci.MisbehaviorType.DUPLICATE_VOTE,
            validator=abci.Validator(address=bytes.fromhex(vs.consensus_address(G2)), power=10),
            height=1)],
    )  # fmt: skip
    response = handler._finalize_block(request).finalize_block
    (update,) = response.validator_updates
    assert (update.pub_key.ed25519, update.power) == (G2, 0)
    assert [e.type for e in response.events] == ["slash", "tombstone_validator"]
    handler._commit(abci.RequestCommit())
    assert _record(chain, G1).missed_blocks == 1


def test_genesis_refuses_a_stake_release_shorter_than_evidence_lives():
    with pytest.raises(GenesisError, match="release_blocks must be at least"):
        parse_genesis({"chain_id": CHAIN_ID, "app_state": {"params": {
            "validator_set": {"release_blocks": 10}}}})  # fmt: skip
    with pytest.raises(GenesisError, match="operator"):
        parse_genesis({"chain_id": CHAIN_ID, "validators": [_genesis_validator(G1, "dilo1x")]})
    shown = vs.params_message(ValidatorSetParams())
    assert Decimal(shown.min_signed_per_window) == Decimal("0.5") and shown.max_validators == 100


def _staking(chain: InProcessChain, method: str, request):
    """``cosmos.staking.v1beta1.Query/METHOD`` through abci_query, as cosmjs asks it."""
    router = QueryRouter(lambda: chain.app.height)

    async def ask():
        register_all(grpc.aio.server(), Services(chain.app, None), "test", router)
        return await router.query(f"/cosmos.staking.v1beta1.Query/{method}",
                                  request.SerializeToString())  # fmt: skip

    return asyncio.run(ask())


def test_wallets_and_explorers_see_the_set_through_cosmos_staking(tmp_path):
    chain = _chain(tmp_path)
    _join(chain)
    answer = _staking(chain, "Validators", staking_q.QueryValidatorsRequest(
        status="BOND_STATUS_BONDED"))  # fmt: skip
    assert answer.code == 0, answer.log
    shown = staking_q.QueryValidatorsResponse.FromString(answer.value).validators
    by_moniker = {v.description.moniker: v for v in shown}
    joined = by_moniker["k"]
    assert joined.operator_address == encode_address(decode_address(J), "dilovaloper")
    assert (joined.tokens, joined.jailed, joined.delegator_shares) == (
        "3000000", False, str(3_000_000 * 10**18))  # fmt: skip
    assert PubKey.FromString(joined.consensus_pubkey.value).key == K
    assert len(shown) == 3
    answer = _staking(
        chain, "DelegatorDelegations", staking_q.QueryDelegatorDelegationsRequest(delegator_addr=J)
    )
    (own,) = staking_q.QueryDelegatorDelegationsResponse.FromString(
        answer.value).delegation_responses  # fmt: skip
    assert (own.balance.amount, own.delegation.validator_address) == (
        "3000000", joined.operator_address)  # fmt: skip
    pool = staking_q.QueryPoolResponse.FromString(
        _staking(chain, "Pool", staking_q.QueryPoolRequest()).value).pool  # fmt: skip
    assert pool.bonded_tokens == str(23_000_000)
    for status in ("x", "BOND_STATUS_UNSPECIFIED"):
        refused = _staking(chain, "Validators", staking_q.QueryValidatorsRequest(status=status))
        assert refused.code != 0 and "BOND_STATUS_BONDED" in refused.log
    # Paged as the SDK pages: by operator address, a next_key, a total when asked for.
    everyone = sorted(v.operator_address for v in shown)
    pages, key = [], b""
    while True:
        paging = PageRequest(limit=2, key=key, count_total=not key)
        answer = staking_q.QueryValidatorsResponse.FromString(
            _staking(chain, "Validators", staking_q.QueryValidatorsRequest(pagination=paging)).value
        )
        pages.append([v.operator_address for v in answer.validators])
        assert answer.pagination.total == (0 if key else 3)
        if not (key := answer.pagination.next_key):
            break
    assert pages == [everyone[:2], everyone[2:]]
    refused = _staking(chain, "Validators", staking_q.QueryValidatorsRequest(
        pagination=PageRequest(key=b"x", offset=1)))  # fmt: skip
    assert refused.code != 0 and "key or offset" in refused.log


def _pool(chain: InProcessChain) -> tuple[int, int]:
    answer = _staking(chain, "Pool", staking_q.QueryPoolRequest())
    shown = staking_q.QueryPoolResponse.FromString(answer.value).pool
    return int(shown.bonded_tokens), int(shown.not_bonded_tokens)


def _pool_of_records(chain: InProcessChain) -> tuple[int, int]:
    """Pool as every record says it: the stake of those with power, and of the rest."""
    records = vs.members(chain.app.committed_view())
    held = [(r.power != 0, tokens(r, 1_000_000)) for r in records]
    return sum(t for bonded, t in held if bonded), sum(t for bonded, t in held if not bonded)


def test_the_pool_follows_every_change_of_the_set(tmp_path):
    chain = _chain(tmp_path)
    assert _pool(chain) == _pool_of_records(chain) == (20_000_000, 0)
    joiner = _join(chain)
    assert _pool(chain) == (23_000_000, 0)
    assert joiner.send(MsgLeaveValidatorSet(operator=J)) == 0
    chain.block()
    assert _pool(chain) == _pool_of_records(chain) == (20_000_000, 3_000_000)  # waits release
    while _record(chain, K) is not None:
        chain.block()
    assert _pool(chain) == _pool_of_records(chain) == (20_000_000, 0)  # released, forgotten
    evidence = vs.Evidence(vs.consensus_address(G2), chain.app.height, "duplicate_vote")
    chain.block(evidence=[evidence])
    assert _pool(chain) == _pool_of_records(chain) == (10_000_000, 10_000_000)
    while _record(chain, G2).self_bond != "0":
        chain.block()
    assert _pool(chain) == _pool_of_records(chain) == (10_000_000, 0)  # tombstoned, released
    closed = _chain(tmp_path / "closed", staked=False)
    assert _pool(closed) == _pool_of_records(closed) == (20_000_000, 0)  # power x reduction


def _many_jailed(chain: InProcessChain, count: int) -> list[str]:
    """``count`` jailed validators written straight into state; their operators."""
    state = CacheStore(chain.app.store)
    operators = []
    for i in range(count):
        operator = encode_address(hashlib.sha256(b"op%d" % i).digest()[:20])
        address = vs.consensus_address(b"key%d" % i)
        vs._put(state, ChainValidator(consensus_address=address, operator=operator,
                                      self_bond="1000000", status=vs.JAILED))  # fmt: skip
        state.set(b"valop/" + operator.encode(), address.encode())
        operators.append(operator)
    chain.app.store.commit(state.writes, {})
    return operators


def _rows_read(chain: InProcessChain, ask) -> tuple[object, int]:
    """What ``ask()`` returns, and how many state rows it read."""
    store, counted = chain.app.store, [0]
    peek, read_chunk = store.peek, store._read_chunk

    def counting_peek(key):
        counted[0] += 1
        return peek(key)

    def counting_chunk(low, end, size, values):
        rows = read_chunk(low, end, size, values)
        counted[0] += len(rows)
        return rows

    store.peek, store._read_chunk = counting_peek, counting_chunk
    try:
        return ask(), counted[0]
    finally:
        del store.peek, store._read_chunk


def test_staking_queries_read_only_the_rows_they_answer(tmp_path):
    chain = _chain(tmp_path)
    operators = [*_many_jailed(chain, 300), OP, OP2]
    valoper = sorted(encode_address(decode_address(o), "dilovaloper") for o in operators)

    def ask(method, request, response):
        return response.FromString(_staking(chain, method, request).value)

    first, read = _rows_read(chain, lambda: ask("Validators", staking_q.QueryValidatorsRequest(
        pagination=PageRequest(limit=1)), staking_q.QueryValidatorsResponse))  # fmt: skip
    assert [v.operator_address for v in first.validators] == valoper[:1]
    assert read <= 20  # one 16-row chunk of the index and the page's record, not 302 records
    following = ask("Validators", staking_q.QueryValidatorsRequest(pagination=PageRequest(
        limit=1, key=first.pagination.next_key)), staking_q.QueryValidatorsResponse)  # fmt: skip
    assert [v.operator_address for v in following.validators] == valoper[1:2]
    bonded, read = _rows_read(chain, lambda: ask("Validators", staking_q.QueryValidatorsRequest(
        status="BOND_STATUS_BONDED"), staking_q.QueryValidatorsResponse))  # fmt: skip
    assert sorted(v.description.moniker for v in bonded.validators) == ["", ""]  # OP's, OP2's
    assert read <= 12  # the index of those in play and their records: not every jailed one
    page, _ = _rows_read(chain, lambda: ask("Validators", staking_q.QueryValidatorsRequest(
        status="BOND_STATUS_BONDED", pagination=PageRequest(limit=1)),
        staking_q.QueryValidatorsResponse))  # fmt: skip
    rest = ask("Validators", staking_q.QueryValidatorsRequest(status="BOND_STATUS_BONDED",
               pagination=PageRequest(key=page.pagination.next_key)),
               staking_q.QueryValidatorsResponse)  # fmt: skip
    assert [v.operator_address for v in [*page.validators, *rest.validators]] == sorted(
        v.operator_address for v in bonded.validators
    )
    missing = staking_q.QueryValidatorRequest(validator_addr=valoper[0][:-1] + "x")
    answer, read = _rows_read(chain, lambda: _staking(chain, "Validator", missing))
    assert (answer.code, read) == (codes.NOT_FOUND, 0)  # not bech32: nothing read
    nobody = encode_address(b"\1" * 20, "dilovaloper")
    unknown = staking_q.QueryValidatorRequest(validator_addr=nobody)
    answer, read = _rows_read(chain, lambda: _staking(chain, "Validator", unknown))
    assert (answer.code, read) == (codes.NOT_FOUND, 2)  # its operator's index, its address's
    ok = staking_q.QueryValidatorRequest(validator_addr=valoper[7])
    found, read = _rows_read(chain, lambda: ask("Validator", ok,
                                                staking_q.QueryValidatorResponse))  # fmt: skip
    assert (found.validator.operator_address, found.validator.jailed, read) == (valoper[7], True, 2)
    pool, read = _rows_read(chain, lambda: _pool(chain))
    assert (pool, read) == ((20_000_000, 300_000_000), 2)
    own, read = _rows_read(chain, lambda: ask("DelegatorDelegations",
        staking_q.QueryDelegatorDelegationsRequest(delegator_addr=operators[5]),
        staking_q.QueryDelegatorDelegationsResponse))  # fmt: skip
    (delegation,) = own.delegation_responses
    assert (delegation.balance.amount, read) == ("1000000", 2)
