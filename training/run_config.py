"""Building a run's training recipe (the chain's ``RunConfig``) with DiLoCo's defaults."""

from __future__ import annotations

from dilochain.protocol.pb.poc.v1.types_pb2 import ModelConfig, RunConfig

PRESETS: dict[str, dict] = {
    # ~3.2M parameters: a few steps per second on 2 CPU cores.
    "small": {"model": {"context": 64, "d_model": 256, "n_layers": 4, "n_heads": 4},
              "batch_size": 8, "inner_steps": 50, "checkpoint_interval": 10},
    # For tests and the devnet demo: rounds of well under a second.
    "tiny": {"model": {"context": 32, "d_model": 32, "n_layers": 1, "n_heads": 2},
             "batch_size": 4, "inner_steps": 8, "checkpoint_interval": 4},
}  # fmt: skip


def make_run_config(
    corpus_hash: str, preset: str = "small", *, model: dict | None = None, **overrides
) -> RunConfig:
    """A RunConfig from a preset; ``overrides`` and ``model`` replace any of its fields."""
    base = PRESETS[preset]
    fields = {
        "min_collateral": "1000000",
        "max_hosts": 16,
        "seed": 1,
        "round_blocks": 20,
        "total_rounds": 10,
        "inner_lr": 4e-4,
        "warmup_steps": 10,
        "weight_decay": 0.1,
        "grad_clip": 1.0,
        "outer_lr": 0.7,
        "outer_momentum": 0.9,
        "compression": "int8",
        "num_shards": 8,
        **{k: v for k, v in base.items() if k != "model"},
        **overrides,
    }
    shape = {"vocab_size": 256, **base["model"], **(model or {})}
    return RunConfig(model=ModelConfig(**shape), corpus_hash=corpus_hash, **fields)
