"""gRPC services: the Cosmos SDK ones cosmpy's LedgerClient calls, and dilochain.poc.v1.Query.

The handlers run on grpc.aio's event loop, the loop that also serves CometBFT's ABCI
connections, so a query never sees a block half applied. Broadcasts and blocks go to CometBFT
(its mempool and its block store); queries and ``GetTx`` read the application's committed state.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from importlib.metadata import version

import grpc
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_q
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.auth.v1beta1.auth_pb2 import Params as AuthParams
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2_grpc as bank_grpc
from cosmpy.protos.cosmos.bank.v1beta1.bank_pb2 import Params as BankParams
from cosmpy.protos.cosmos.base.abci.v1beta1.abci_pb2 import GasInfo, Result
from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2 as node_q
from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2_grpc as node_grpc
from cosmpy.protos.cosmos.base.query.v1beta1.pagination_pb2 import PageResponse
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_q
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin
from cosmpy.protos.cosmos.consensus.v1 import query_pb2 as consensus_q
from cosmpy.protos.cosmos.consensus.v1 import query_pb2_grpc as consensus_grpc
from cosmpy.protos.cosmos.staking.v1beta1 import query_pb2 as staking_q
from cosmpy.protos.cosmos.staking.v1beta1 import query_pb2_grpc as staking_grpc
from cosmpy.protos.cosmos.staking.v1beta1 import staking_pb2 as staking_pb
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc
from cosmpy.protos.tendermint.p2p.types_pb2 import DefaultNodeInfo
from cosmpy.protos.tendermint.types.params_pb2 import BlockParams, ConsensusParams
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_reflection.v1alpha import reflection

from dilochain.chain.address import require_address
from dilochain.chain.app import Application
from dilochain.chain.block_feed import BlockFeed, EventsService
from dilochain.chain.block_reads import BoundedReads, Busy
from dilochain.chain.comet_rpc import (
    PARSER,
    CometRpc,
    CometRpcError,
    CometUnreachable,
    broadcast_response,
    tx_response_from_json,
)
from dilochain.chain.context import QueryContext, QueryHandler
from dilochain.chain.errors import TxError, codes
from dilochain.chain.grpc_errors import Readiness
from dilochain.chain.modules import (
    auth,
    bank,
    beacon,
    challenges,
    collateral,
    registry,
    rewards,
    rounds,
    screening,
    slashing,
    validator_set,
    verifiers,
)
from dilochain.chain.pagination import page_rows
from dilochain.chain.query_router import ABCI_QUERY_PEER, QueryRouter
from dilochain.chain.simulate_gate import SimulateBusy, SimulateGate
from dilochain.chain.staking_query import (
    bond_status,
    of_operator_address,
    operator_address,
    pool_tokens,
    self_delegation,
    staking_params,
    to_staking,
)
from dilochain.chain.store_query import STORE_PATH, query_key
from dilochain.protocol.address import ADDRESS_PREFIX, decode_address
from dilochain.protocol.endpoint import caller_address
from dilochain.protocol.hashing import tx_hash
from dilochain.protocol.params import valid_denom
from dilochain.protocol.pb.poc.v1 import events_pb2 as ev_pb
from dilochain.protocol.pb.poc.v1 import events_pb2_grpc as ev_grpc
from dilochain.protocol.pb.poc.v1 import query_pb2 as poc_q
from dilochain.protocol.pb.poc.v1 import query_pb2_grpc as poc_grpc
from dilochain.protocol.pb.poc.v1.types_pb2 import ChainValidator

APP_VERSION = version("dilochain")  # pyproject.toml's
_TX_HASH = re.compile(r"[0-9A-Fa-f]{64}")


class Services:
    """Shared state of all servicers: the app, CometBFT's RPC, the Simulate gate and whether
    the node's state is current."""

    def __init__(
        self, app: Application, rpc: CometRpc, simulate_gate: SimulateGate | None = None,
        readiness: Readiness | None = None,
    ):  # fmt: skip
        self.app = app
        self.rpc = rpc
        self.simulate_gate = simulate_gate or SimulateGate()
        self.readiness = readiness or Readiness()
        self.feed = BlockFeed(app.height)  # told of each commit by the ABCI handler
        # Answers kept encoded: a cached one is sent as it is, never built and encoded again
        # on the loop that runs consensus (a 21 MiB block's answer took 92 ms a call). Building
        # one holds the GIL all the same (a thread only keeps it off the loop's own stack):
        # what spares the loop is the cache, 4 answers of each kind.
        self.blocks = BoundedReads(self._block)
        self.txs = BoundedReads(self._tx, "txs")

    async def _block(self, height: int) -> bytes:
        """The encoded answer of ``GetBlockByHeight`` at ``height`` (and of ``GetLatestBlock``,
        whose fields are the same), decoded and encoded on a thread."""
        block_id, block = await self.rpc.block(height)

        def encoded() -> bytes:
            answer = tm_q.GetBlockByHeightResponse(block_id=block_id, block=block)
            return answer.SerializeToString()

        return await asyncio.get_running_loop().run_in_executor(PARSER, encoded)

    async def _tx(self, hash_hex: str) -> bytes:
        """The encoded answer of ``GetTx`` for the committed tx ``hash_hex``, from CometBFT's tx
        index (as the Cosmos SDK: the application keeps no copy of txs), on a thread."""
        found = await self.rpc.tx(bytes.fromhex(hash_hex))
        block = self.app.store.block(int(found["height"]))

        def encoded() -> bytes:
            response, tx = tx_response_from_json(found, block.time_ns if block else 0)
            return tx_s.GetTxResponse(tx=tx, tx_response=response).SerializeToString()

        return await asyncio.get_running_loop().run_in_executor(PARSER, encoded)


class _UsesServices:
    """A servicer over the shared :class:`Services`."""

    def __init__(self, services: Services):
        self.s = services

    @property
    def view(self):
        """Committed state, as every query reads it."""
        return self.s.app.committed_view()


async def _valid(check: Callable[[str], object], value: str, context) -> str:
    """``value`` if ``check`` takes it; else the call ends INVALID_ARGUMENT with its error,
    before any state is read."""
    try:
        check(value)
    except ValueError as err:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
    return value


async def _valid_address(address: str, context: grpc.aio.ServicerContext) -> str:
    return await _valid(decode_address, address, context)


class AuthQuery(_UsesServices, auth_grpc.QueryServicer):
    """cosmos.auth.v1beta1.Query."""

    async def _account(self, request, context):
        address = await _valid_address(request.address, context)
        account = auth.get_account(self.view, address)
        if account is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"account {address} not found")
        return account

    async def Account(self, request, context):
        response = auth_q.QueryAccountResponse()
        response.account.Pack(await self._account(request, context), type_url_prefix="/")
        return response

    async def AccountInfo(self, request, context):
        return auth_q.QueryAccountInfoResponse(info=await self._account(request, context))

    async def Params(self, request, context):
        limits = self.s.app.params.auth
        return auth_q.QueryParamsResponse(params=AuthParams(
            max_memo_characters=limits.max_memo_characters,
            tx_sig_limit=limits.max_msgs_per_tx,  # a tx has a signer per distinct message signer
            tx_size_cost_per_byte=limits.tx_size_cost_per_byte,
            sig_verify_cost_ed25519=0,  # ed25519 account keys are not accepted
            sig_verify_cost_secp256k1=limits.sig_verify_cost_secp256k1,
        ))  # fmt: skip

    async def Bech32Prefix(self, request, context):
        return auth_q.Bech32PrefixResponse(bech32_prefix=ADDRESS_PREFIX)


class BankQuery(_UsesServices, bank_grpc.QueryServicer):
    """cosmos.bank.v1beta1.Query."""

    async def Balance(self, request, context):
        address = await _valid_address(request.address, context)
        await _valid(valid_denom, request.denom, context)
        amount = bank.balance(self.view, address, request.denom)
        return bank_q.QueryBalanceResponse(balance=Coin(denom=request.denom, amount=str(amount)))

    async def AllBalances(self, request, context):
        address = await _valid_address(request.address, context)
        held = bank.all_balances(self.view, address)
        return bank_q.QueryAllBalancesResponse(
            balances=[Coin(denom=d, amount=str(a)) for d, a in sorted(held.items())]
        )

    async def TotalSupply(self, request, context):
        held = bank.total_supply(self.view)
        return bank_q.QueryTotalSupplyResponse(
            supply=[Coin(denom=d, amount=str(a)) for d, a in sorted(held.items())]
        )

    async def SupplyOf(self, request, context):
        await _valid(valid_denom, request.denom, context)
        amount = bank.supply(self.view, request.denom)
        return bank_q.QuerySupplyOfResponse(amount=Coin(denom=request.denom, amount=str(amount)))

    # Nothing in a bank balance is locked (collateral and vesting rewards are held by the poc
    # module until released): every balance is spendable.
    async def SpendableBalances(self, request, context):
        balances = (await self.AllBalances(request, context)).balances
        return bank_q.QuerySpendableBalancesResponse(balances=balances)

    async def SpendableBalanceByDenom(self, request, context):
        balance = (await self.Balance(request, context)).balance
        return bank_q.QuerySpendableBalanceByDenomResponse(balance=balance)

    async def Params(self, request, context):
        return bank_q.QueryParamsResponse(params=BankParams(default_send_enabled=True))

    async def DenomsMetadata(self, request, context):
        return bank_q.QueryDenomsMetadataResponse(metadatas=[bank.DENOM_METADATA])

    async def DenomMetadata(self, request, context):
        if request.denom != bank.DENOM_METADATA.base:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"client metadata for denom {request.denom[:128]!r}")  # fmt: skip
        return bank_q.QueryDenomMetadataResponse(metadata=bank.DENOM_METADATA)


class TxService(_UsesServices, tx_grpc.ServiceServicer):
    """cosmos.tx.v1beta1.Service."""

    async def Simulate(self, request, context):
        raw = request.tx_bytes or request.tx.SerializeToString()
        try:
            # Through abci_query it holds CometBFT's query connection: never waits.
            waits = context.peer() != ABCI_QUERY_PEER
            result = await self.s.simulate_gate.run(lambda: self.s.app.simulate(raw), waits,
                                                    caller_address(context.peer()))  # fmt: skip
        except SimulateBusy as err:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        if result.code:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, result.raw_log)
        return tx_s.SimulateResponse(
            gas_info=GasInfo(gas_wanted=result.gas_wanted, gas_used=result.gas_used),
            result=Result(
                data=bytes.fromhex(result.data), log=result.raw_log, events=result.events
            ),
        )

    async def BroadcastTx(self, request, context):
        digest = tx_hash(request.tx_bytes).hex().upper()
        try:
            checked = await self.s.rpc.broadcast_tx_sync(request.tx_bytes)
        except CometRpcError as err:
            return tx_s.BroadcastTxResponse(tx_response=broadcast_response(digest, None, str(err)))
        return tx_s.BroadcastTxResponse(tx_response=broadcast_response(digest, checked))

    async def GetTx(self, request, context):
        if not _TX_HASH.fullmatch(request.hash):  # never echo more than a hash's length
            shown = request.hash[:80]
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"invalid tx hash {shown!r}: 64 hex digits")  # fmt: skip
        try:
            return await self.s.txs.get(request.hash.upper())  # encoded: sent as it is
        except Busy as err:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
        except CometUnreachable as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except CometRpcError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"tx not found: {request.hash}")


async def _block(services: Services, height: int | None, context) -> bytes:
    """The encoded answer for the block at ``height`` (None: the latest), sent as it is."""
    height = services.app.height if height is None else height  # the latest: the app's last
    try:
        return await services.blocks.get(height)
    except Busy as err:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err))
    except CometUnreachable as err:  # worth asking again, or another node
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
    except CometRpcError as err:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"block {height}: {err}")


class NodeService(_UsesServices, node_grpc.ServiceServicer):
    """cosmos.base.node.v1beta1.Service: what wallets ask before they price a fee."""

    async def Config(self, request, context):
        fees = self.s.app.params.fees
        price = format(fees.min_gas_price, "f")  # never "1E-7": coin parsers want digits
        return node_q.ConfigResponse(minimum_gas_price=f"{price}{fees.fee_denom}")

    async def Status(self, request, context):
        app = self.s.app
        return node_q.StatusResponse(
            earliest_store_height=1, height=app.height, app_hash=app.app_hash,
            timestamp=Timestamp(seconds=app.last_block_time_ns // 1_000_000_000),
        )  # fmt: skip


class TendermintService(_UsesServices, tm_grpc.ServiceServicer):
    """cosmos.base.tendermint.v1beta1.Service."""

    def __init__(self, services: Services, moniker: str):
        super().__init__(services)
        self.moniker = moniker

    async def GetLatestBlock(self, request, context):
        return await _block(self.s, None, context)

    async def GetBlockByHeight(self, request, context):
        return await _block(self.s, request.height, context)

    async def GetNodeInfo(self, request, context):
        return tm_q.GetNodeInfoResponse(
            default_node_info=DefaultNodeInfo(
                network=self.s.app.chain_id, moniker=self.moniker, version="cometbft"
            ),
            application_version=tm_q.VersionInfo(
                name="dilochain",
                app_name="dilochain",
                version=APP_VERSION,
                cosmos_sdk_version="v0.50-compatible",
            ),
        )

    async def GetSyncing(self, request, context):
        return tm_q.GetSyncingResponse(syncing=not self.s.readiness.ready)


class StakingQuery(_UsesServices, staking_grpc.QueryServicer):
    """cosmos.staking.v1beta1.Query over the open validator set (``chain.staking_query``)."""

    def _in_order(self, start: bytes, bonded: bool) -> Iterator[tuple[bytes, ChainValidator]]:
        """(page key, validator) in page order from ``start``: an open set's by operator, read
        a page at a time from the ``valop/`` index (the ``bonded`` ones only: from the index of
        those in play, at most ``max_validators`` and the leaving, the query wallets make); a
        closed one's (fixed at genesis, a member perhaps without an operator) by
        ``dilovaloper`` address."""
        if validator_set.closed(self.view):
            found = [(operator_address(r).encode(), r) for r in validator_set.members(self.view)]
        elif bonded:
            found = [(r.operator.encode(), r) for r in validator_set.in_play(self.view)]
        else:
            return validator_set.by_operator(self.view, start)
        return ((key, r) for key, r in sorted(found, key=lambda row: row[0]) if key >= start)

    async def Validators(self, request, context):
        reduction = self.s.app.params.validator_set.power_reduction
        try:
            wanted = staking_pb.BondStatus.Value(request.status) if request.status else None
            if wanted == staking_pb.BOND_STATUS_UNSPECIFIED:
                raise ValueError(request.status)
        except ValueError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"status {request.status[:40]!r}: one of BOND_STATUS_BONDED, "
                                "BOND_STATUS_UNBONDING, BOND_STATUS_UNBONDED")  # fmt: skip
        rows = self._in_order(request.pagination.key, wanted == staking_pb.BOND_STATUS_BONDED)
        matching = ((key, r) for key, r in rows if wanted is None or bond_status(r) == wanted)
        try:
            shown, next_key, total = page_rows(matching, request.pagination)
        except TxError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, err.log)
        return staking_q.QueryValidatorsResponse(
            validators=[to_staking(r, reduction) for r in shown],
            pagination=PageResponse(next_key=next_key, total=total),
        )

    async def Validator(self, request, context):
        record = of_operator_address(self.view, request.validator_addr)
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"validator {request.validator_addr[:80]!r} not found")  # fmt: skip
        reduction = self.s.app.params.validator_set.power_reduction
        return staking_q.QueryValidatorResponse(validator=to_staking(record, reduction))

    async def DelegatorDelegations(self, request, context):
        address = await _valid_address(request.delegator_addr, context)
        record = validator_set.of_operator(self.view, address)
        denom = self.s.app.params.poc.collateral_denom
        bonded = record is not None and record.self_bond not in ("", "0")
        own = [self_delegation(record, denom)] if bonded else []
        return staking_q.QueryDelegatorDelegationsResponse(delegation_responses=own)

    async def Params(self, request, context):
        return staking_q.QueryParamsResponse(params=staking_params(self.s.app.params))

    async def Pool(self, request, context):
        reduction = self.s.app.params.validator_set.power_reduction
        bonded, rest = pool_tokens(self.view, reduction)
        return staking_q.QueryPoolResponse(
            pool=staking_pb.Pool(bonded_tokens=str(bonded), not_bonded_tokens=str(rest))
        )


class ConsensusQuery(_UsesServices, consensus_grpc.QueryServicer):
    """cosmos.consensus.v1.Query: the block limits cosmpy clips gas estimates to."""

    async def Params(self, request, context):
        limits = self.s.app.genesis.consensus_params.block
        return consensus_q.QueryParamsResponse(
            params=ConsensusParams(
                block=BlockParams(max_bytes=limits.max_bytes, max_gas=limits.max_gas)
            )
        )


_GRPC_STATUS = {
    codes.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    codes.INVALID_ADDRESS: grpc.StatusCode.INVALID_ARGUMENT,
    codes.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
}


def _check_identifiers(request) -> None:
    """Refuse a request's malformed run id or address (an empty one: every address) before
    any state is read, as the SDK's queries check their arguments first."""
    fields = request.DESCRIPTOR.fields_by_name
    if "run_id" in fields:
        registry.require_run_id(request.run_id)
    if "address" in fields and request.address:
        require_address(request.address, "address")


def _poc_method(handler: QueryHandler):
    async def method(self, request, context):
        ctx = QueryContext(self.view, self.s.app.height, self.s.app.params)
        try:
            _check_identifiers(request)
            return handler(ctx, request)
        except TxError as err:
            await context.abort(_GRPC_STATUS.get(err.code, grpc.StatusCode.UNKNOWN), err.log)

    method.__doc__ = handler.__doc__
    return method


POC_QUERIES: dict[str, QueryHandler] = {
    **registry.QUERIES, **collateral.QUERIES, **rounds.QUERIES, **verifiers.QUERIES,
    **beacon.QUERIES, **screening.QUERIES, **challenges.QUERIES, **slashing.QUERIES,
    **rewards.QUERIES, **validator_set.QUERIES,
}  # fmt: skip

# dilochain.poc.v1.Query: every method is the query handler its module declares beside its state.
PocQuery = type(
    "PocQuery",
    (_UsesServices, poc_grpc.QueryServicer),
    {name: _poc_method(handler) for name, handler in POC_QUERIES.items()},
)


def _service(module, name: str):
    return module.DESCRIPTOR.services_by_name[name]


def register_all(
    server: grpc.aio.Server, services: Services, moniker: str, router: QueryRouter
) -> list[ServiceDescriptor]:
    """Add every servicer to ``server``, and every query servicer to ``router`` (abci_query),
    with raw state keys and their proofs at ``/store/main/key``; the services served."""
    queries = [
        (AuthQuery(services), auth_grpc.add_QueryServicer_to_server, _service(auth_q, "Query")),
        (BankQuery(services), bank_grpc.add_QueryServicer_to_server, _service(bank_q, "Query")),
        (ConsensusQuery(services), consensus_grpc.add_QueryServicer_to_server,
         _service(consensus_q, "Query")),
        (StakingQuery(services), staking_grpc.add_QueryServicer_to_server,
         _service(staking_q, "Query")),
        (PocQuery(services), poc_grpc.add_QueryServicer_to_server, _service(poc_q, "Query")),
    ]  # fmt: skip
    for servicer, add, descriptor in queries:
        add(servicer, server)
        router.add(servicer, descriptor)
    router.add_raw(STORE_PATH, lambda key, prove: query_key(services.app, key, prove))
    tx_service, node = TxService(services), NodeService(services)
    # Simulate through abci_query too: cosmjs estimates gas (fee "auto") that way.
    router.add(tx_service, _service(tx_s, "Service"), only={"Simulate"})
    router.add(node, _service(node_q, "Service"))
    tx_grpc.add_ServiceServicer_to_server(tx_service, server)
    node_grpc.add_ServiceServicer_to_server(node, server)
    tm_grpc.add_ServiceServicer_to_server(TendermintService(services, moniker), server)
    ev_grpc.add_EventsServicer_to_server(EventsService(services.feed, services.readiness), server)
    served = [descriptor for _, _, descriptor in queries]
    served += [_service(m, "Service") for m in (tx_s, node_q, tm_q)]
    names = [service.full_name for service in served] + [_service(ev_pb, "Events").full_name]
    reflection.enable_server_reflection([*names, reflection.SERVICE_NAME], server)
    return served
