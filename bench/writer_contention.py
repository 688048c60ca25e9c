"""What a background checkpoint writer costs the training loop beside it: the same inner steps
alone and with a thread that, every 50 ms, does one piece of a checkpoint's proof work on a
full checkpoint of the preset (encode it, hash it, or copy its tensors), alternated in one run.
A piece that holds the GIL (safetensors' own encoder, or joining the encoding into one bytes
object) stalls the loop; one that releases it (SHA-256, file writes, torch copies) does not,
which is why the node's writer hashes and writes the encoding's parts (a header and views of
the tensors) without joining them.

    .venv/bin/python -m bench.writer_contention [--preset small] [--steps 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from rich.console import Console
from rich.table import Table
from safetensors.torch import save

from dilochain.testutil import shipped_data
from dilochain.training.checkpoint_codec import CheckpointEncoding
from dilochain.training.diloco import initial_global, params_of
from dilochain.training.model import build_model, parameter_count
from dilochain.training.run_config import make_run_config
from dilochain.training.tensor_codec import METADATA, Encoding, encode_state
from dilochain.training.train_step import fresh_inner_state, set_deterministic, train_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    set_deterministic(1)
    data, pins = shipped_data()
    cfg = make_run_config(pins, args.preset)
    model = build_model(cfg.model_config, cfg.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    checkpoint = {k: v.clone() for k, v in fresh_inner_state(model, cfg, params_of(state))
                  .checkpoint().items()}  # fmt: skip
    encoded = Encoding.of(checkpoint)
    pieces = {
        "nothing beside it": None,
        "safetensors.torch.save (one bytes object)": lambda: save(checkpoint, METADATA),
        "encode_state (the parts joined)": lambda: encode_state(checkpoint),
        "encode as parts + SHA-256 (the writer)": lambda: CheckpointEncoding.of(checkpoint).index,
        "torch copies of the tensors": lambda: [v.clone() for v in checkpoint.values()],
    }

    def steps_beside(piece) -> float:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                piece()
                stop.wait(0.05)

        thread = threading.Thread(target=loop) if piece else None
        if thread:
            thread.start()
        inner = fresh_inner_state(model, cfg, params_of(state))
        started = time.perf_counter()
        for _ in range(args.steps):
            train_step(inner, cfg, data, (0,), 1, 0)
        seconds = time.perf_counter() - started
        stop.set()
        if thread:
            thread.join()
        return seconds

    times: dict[str, list[float]] = {name: [] for name in pieces}
    for _ in range(args.repeats):
        for name, piece in pieces.items():
            times[name].append(steps_beside(piece))
    megabytes = len(encoded) / 1e6
    Console().print(f"preset {args.preset}: {parameter_count(model):,} parameters, checkpoint "
                    f"{megabytes:.0f} MB, {args.steps} steps, 1 thread")  # fmt: skip
    alone = statistics.median(times["nothing beside it"])
    table = Table("beside the training loop, every 50 ms", "seconds (median)", "vs alone")
    for name, found in times.items():
        seconds = statistics.median(found)
        table.add_row(name, f"{seconds:.3f}", f"{seconds / alone:.2f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
