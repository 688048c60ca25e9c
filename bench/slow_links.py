"""A round's artifact traffic over slow links: a host and a verifier in network namespaces, each
joined to this machine by a veth pair rate-limited both ways with ``tc … tbf``; the object
store (versitygw) sits on this machine, past both links, as a cloud bucket would.

One real round of ``--preset`` is trained (its wall-clock measured), then for each link rate
and each backend the bytes of a round cross the links with the node's own code:

- **blob**: the host serves its store (gRPC blob service, in its namespace); the verifier
  fetches what one screen and one challenge read (the final checkpoint's index and weights,
  pseudo-gradient, residual, base global state; a segment's start and end checkpoints, whole),
  and a peer host its
  pseudo-gradient, each through the host's link;
- **s3**: the host publishes what the node publishes before its commit and its reveal (final
  checkpoint's index and weights, pseudo-gradient, residual, global state; the challenged
  segment's checkpoints, whole)
  through its link; the verifier and the peer read them from the bucket through theirs.

It prints, per rate and backend, the seconds and bytes each role moves and the share of the
round (training + the host's uploads + the verifier's download) spent moving bytes. Needs root
(network namespaces); it removes what it creates.

    .venv/bin/python -m bench.slow_links [--preset small] [--rates 100mbit,1gbit]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HOST_NS, VERIFIER_NS = "dlc-bench-host", "dlc-bench-verifier"
# (namespace, its address, this machine's end, veth names)
LINKS = [(HOST_NS, "10.77.1.2", "10.77.1.1", "dlcbh0", "dlcbh1"),
         (VERIFIER_NS, "10.77.2.2", "10.77.2.1", "dlcbv0", "dlcbv1")]  # fmt: skip
BLOB_PORT = 7000


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def setup_links() -> None:
    """The two namespaces, their veth pairs and routes, forwarding on this machine."""
    teardown_links()
    _sh("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    for ns, inside, outside, here, there in LINKS:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        _sh("ip", "link", "set", there, "netns", ns)
        _sh("ip", "addr", "add", f"{outside}/24", "dev", here)
        _sh("ip", "link", "set", here, "up")
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{inside}/24", "dev", there)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", there, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        _sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", outside)


def shape(rate: str) -> None:
    """Limit every link to ``rate`` each way (tbf on both ends of each veth pair)."""
    for ns, _, _, here, there in LINKS:
        for prefix, dev in (((), here), (("ip", "netns", "exec", ns), there)):
            subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)  # fmt: skip
            _sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                "burst", "256kb", "latency", "100ms")  # fmt: skip


def teardown_links() -> None:
    """Remove the namespaces (their veth pairs go with them)."""
    for ns, *_ in LINKS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _in(ns: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run this module's ``args`` subcommand in namespace ``ns``; its JSON answer."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "bench.slow_links", *args],
        check=True, capture_output=True, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def train(preset: str, root: Path) -> tuple[dict[str, list[str]], float]:
    """One real round into a store at ``root``: (artifact hashes by role, training seconds)."""
    from dilochain.artifacts.store import LocalArtifactStore
    from dilochain.testutil import shipped_data
    from dilochain.training.checkpoint_codec import store_checkpoint
    from dilochain.training.diloco import initial_global, params_of
    from dilochain.training.model import build_model
    from dilochain.training.round_work import train_round
    from dilochain.training.run_config import make_run_config
    from dilochain.training.tensor_codec import encode_state
    from dilochain.training.train_step import set_deterministic

    set_deterministic(2)
    data, pins = shipped_data()
    cfg = make_run_config(pins, preset)
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    store = LocalArtifactStore(root)
    base = store.put(encode_state(state))

    started = time.perf_counter()
    result = train_round(model, cfg, data, "dilo1bench", 0, params_of(state), None,
                         sink=functools.partial(store_checkpoint, store.put_parts))  # fmt: skip
    seconds = time.perf_counter() - started
    pg, residual = store.put(result.pseudo_grad), store.put(result.residual)
    # a commit names, and a screen reads, its final checkpoint's weights, not its moments
    final = [h.hex() for h in result.checkpoints[-1].hashes(moments=False)]
    hexes = {
        "commit": [*final, pg.hex(), residual.hex(), base.hex()],
        "reveal": [h.hex() for c in result.checkpoints[:2] for h in c.hashes()],  # segment 0
        "screen": [*final, pg.hex(), residual.hex(), base.hex()],
        "peer": [pg.hex()],
    }
    hexes["challenge"] = hexes["reveal"]
    return hexes, seconds


def _serve(store_dir: str, address: str) -> None:
    from dilochain.artifacts.blob_service import serve_blobs
    from dilochain.artifacts.store import LocalArtifactStore

    server, _ = serve_blobs(LocalArtifactStore(Path(store_dir)), address)
    print(json.dumps({"serving": address}), flush=True)
    sys.stdin.read()  # until the bench closes our stdin
    server.stop(grace=0)


def _publish(store_dir: str, url: str, endpoint: str, hexes: list[str]) -> None:
    from dilochain.artifacts.object_store import ObjectStore
    from dilochain.artifacts.store import LocalArtifactStore

    local = LocalArtifactStore(Path(store_dir))
    store = ObjectStore(url, "bench", "dilo1bench", endpoint)
    started, moved = time.perf_counter(), 0
    for h in hexes:
        digest = bytes.fromhex(h)
        if store.publish(local.file(digest), digest):
            moved += local.size(digest)
    print(json.dumps({"seconds": time.perf_counter() - started, "bytes": moved}))


def _fetch(location: str, hexes: list[str]) -> None:
    from dilochain.artifacts.blob_service import fetch_artifact

    started, moved = time.perf_counter(), 0
    for h in dict.fromkeys(hexes):
        moved += fetch_artifact(location, bytes.fromhex(h), 1 << 34, io.BytesIO())
    print(json.dumps({"seconds": time.perf_counter() - started, "bytes": moved}))


def measure(rate: str, backend: str, root: Path, hexes: dict, s3) -> dict[str, dict]:
    """One backend at one rate: what the host, the verifier and a peer moved, and how long."""
    shape(rate)
    store_dir = str(root / "host")
    reads = hexes["screen"] + hexes["challenge"]
    if backend == "blob":
        address = f"{LINKS[0][1]}:{BLOB_PORT}"
        server = subprocess.Popen(
            ["ip", "netns", "exec", HOST_NS, sys.executable, "-m", "bench.slow_links", "serve",
             store_dir, address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            server.stdout.readline()
            verifier = _in(VERIFIER_NS, "fetch", address, *reads)
            peer = _in(VERIFIER_NS, "fetch", address, *hexes["peer"])
        finally:
            server.stdin.close()
            server.wait(30)
        served = {"seconds": 0.0, "bytes": verifier["bytes"] + peer["bytes"]}
        return {"host": served, "verifier": verifier, "peer": peer, "upload": 0.0}
    prefix = f"{rate}-{backend}"
    url, env = f"s3://{s3.bucket}/{prefix}", s3.env
    host = _in(HOST_NS, "publish", store_dir, url, s3.endpoint,
               *hexes["commit"], *hexes["reveal"], env=env)  # fmt: skip
    location = f"{s3.endpoint}/{s3.bucket}/{prefix}/bench/dilo1bench"
    verifier = _in(VERIFIER_NS, "fetch", location, *reads)
    peer = _in(VERIFIER_NS, "fetch", location, *hexes["peer"])
    return {"host": host, "verifier": verifier, "peer": peer, "upload": host["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("serve").add_argument("args", nargs=2)
    sub.add_parser("publish").add_argument("args", nargs="+")
    sub.add_parser("fetch").add_argument("args", nargs="+")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rates", default="100mbit,1gbit")
    args = parser.parse_args()
    if args.cmd == "serve":
        return _serve(*args.args)
    if args.cmd == "publish":
        return _publish(args.args[0], args.args[1], args.args[2], args.args[3:])
    if args.cmd == "fetch":
        return _fetch(args.args[0], args.args[1:])
    if os.geteuid() != 0:
        sys.exit("bench.slow_links needs root (network namespaces, tc)")
    from dilochain.local_s3 import LocalS3

    console = Console(width=max(Console().width, 140))
    with tempfile.TemporaryDirectory(prefix="dlc-slow-links-") as tmp:
        root = Path(tmp)
        with console.status(f"training one {args.preset} round"):
            hexes, train_seconds = train(args.preset, root / "host")
        setup_links()
        try:
            # The bucket on this machine's end of the host's link: reachable from both.
            with LocalS3(root / "s3", prefix="", host=LINKS[0][2]) as s3:
                rows = [
                    (rate, backend, measure(rate, backend, root, hexes, s3))
                    for rate in args.rates.split(",")
                    for backend in ("blob", "s3")
                ]
        finally:
            with contextlib.suppress(Exception):
                teardown_links()
    table = Table(title=f"one {args.preset} round over slow links (training {train_seconds:.1f} s)")
    for column in ("link", "backend", "host moves", "verifier moves", "peer moves",
                   "round (train + upload + verify fetch)", "moving bytes"):  # fmt: skip
        table.add_column(column, justify="right")
    for rate, backend, m in rows:
        moving = m["upload"] + m["verifier"]["seconds"]
        total = train_seconds + moving
        table.add_row(
            rate, backend,
            f"{m['host']['bytes'] / 1e6:.1f} MB" + (f" in {m['upload']:.1f} s" if m["upload"]
                                                    else " (served)"),
            f"{m['verifier']['bytes'] / 1e6:.1f} MB in {m['verifier']['seconds']:.1f} s",
            f"{m['peer']['bytes'] / 1e6:.1f} MB in {m['peer']['seconds']:.1f} s",
            f"{total:.1f} s", f"{moving / total:.0%}",
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
