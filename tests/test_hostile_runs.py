"""Runs are hostile input (anyone may create one): a run whose model transformers cannot build,
though the chain's checks let it through, costs a verifier one log line and a host one error
line; neither crashes, and the verifier goes on with the other runs."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from dilochain.client import broadcast
from dilochain.keyring import Keyring
from dilochain.protocol import model_config
from dilochain.protocol.pb.poc.v1.tx_pb2 import MsgCreateRun
from dilochain.testutil import shipped_data
from dilochain.training.run_config import make_run_config
from dilochain.verifier.config import VerifierConfig
from dilochain.verifier.service import VerifierService
from tests.conftest import cli

pytestmark = pytest.mark.integration


def _create(chain, run_id: str, **change) -> None:
    cfg = make_run_config(shipped_data()[1], "tiny", min_collateral="5000000")
    cfg.model_config = model_config.canonical({**json.loads(cfg.model_config), **change})
    msg = MsgCreateRun(creator=str(chain.wallets[0].address()), run_id=run_id, config=cfg)
    broadcast(chain.client, chain.wallets[0], msg).wait_to_complete(poll_period=0.1)


def test_a_run_whose_model_cannot_be_built_is_passed_over(running_chain, tmp_path, caplog):
    _create(running_chain, "hostile", pad_token_id=10**9)  # an AssertionError inside torch
    _create(running_chain, "fine")
    cfg = VerifierConfig(home=tmp_path / "v", key="k", chain=(running_chain.address,),
                         data=(shipped_data()[0].root,))  # fmt: skip
    service = VerifierService(cfg, running_chain.client, running_chain.wallets[1])
    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(1) as pool:
        for _ in range(2):
            for run in service.poc.runs(active=True):
                assert service.replay_step(run, pool) == 0
    assert service.datasets["hostile"] is None and service.datasets["fine"] is not None
    refusals = [r for r in caplog.records if "hostile" in r.getMessage()]
    assert len(refusals) == 1 and "cannot be built" in refusals[0].getMessage()
    Keyring(tmp_path / "h" / "keyring").add("k", "pw")
    node = cli("node", "start", "--home", str(tmp_path / "h"), "--key", "k", "--run", "hostile",
               "--chain", running_chain.address,
               env={"DILOCHAIN_KEYRING_PASSWORD": "pw"})  # fmt: skip
    errors = [ln for ln in node.stderr.splitlines() if ln.startswith("error: ")]
    assert node.returncode == 1 and "Traceback" not in node.stderr, node.stderr[-2000:]
    assert len(errors) == 1 and "cannot be built" in errors[0], errors
