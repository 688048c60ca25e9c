"""The REST gateway's routes and parameters, from the services' own definitions (the served
gateway against a real chain: ``test_cosmpy_integration.py``)."""

from __future__ import annotations

import pytest
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_q
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_s

from dilochain.chain.rest_gateway import BadRequest, routes, set_parameter
from dilochain.protocol.pb.poc.v1 import query_pb2 as poc_q


def test_routes_come_from_http_rules_and_else_from_the_method_s_name():
    found = {(r.verb, r.path): r for r in routes([
        bank_q.DESCRIPTOR.services_by_name["Query"], tx_s.DESCRIPTOR.services_by_name["Service"],
        poc_q.DESCRIPTOR.services_by_name["Query"],
    ])}  # fmt: skip
    balance = found["GET", "/cosmos/bank/v1beta1/balances/{address}/by_denom"]
    assert balance.grpc_path == "/cosmos.bank.v1beta1.Query/Balance" and not balance.body
    assert ("GET", "/cosmos/bank/v1beta1/denoms_metadata/{denom:.+}") in found  # {denom=**}
    broadcast = found["POST", "/cosmos/tx/v1beta1/txs"]
    assert broadcast.body and broadcast.request is tx_s.BroadcastTxRequest
    info = found["GET", "/dilochain/poc/v1/round_info"]
    assert info.grpc_path == "/dilochain.poc.v1.Query/RoundInfo"


def test_parameters_fill_nested_scalar_fields_and_refuse_what_does_not_fit():
    request = bank_q.QueryAllBalancesRequest()
    set_parameter(request, "address", "dilo1xyz")
    set_parameter(request, "pagination.limit", "5")
    set_parameter(request, "pagination.count_total", "true")
    set_parameter(request, "pagination.key", "AQI")  # URL-safe base64 without padding
    assert (request.address, request.pagination.limit) == ("dilo1xyz", 5)
    assert request.pagination.count_total and request.pagination.key == b"\x01\x02"
    mode = tx_s.BroadcastTxRequest()
    set_parameter(mode, "mode", "BROADCAST_MODE_SYNC")
    assert mode.mode == tx_s.BROADCAST_MODE_SYNC
    for name, value in [("pagination.limit", "many"), ("pagination.count_total", "yes"),
                        ("pagination.key", "%%%"), ("nope", "1"), ("pagination", "1"),
                        ("address.inner", "x"), ("mode", "LOUD")]:  # fmt: skip
        with pytest.raises(BadRequest):
            set_parameter(bank_q.QueryAllBalancesRequest() if name != "mode" else mode,
                          name, value)  # fmt: skip
