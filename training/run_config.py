"""Building a run's training recipe (the chain's ``RunConfig``) with DiLoCo's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from dilochain.protocol import model_config
from dilochain.protocol.pb.poc.v1.types_pb2 import RunConfig


@dataclass(frozen=True)
class Pins:
    """What a run pins of its dataset: sha256 (hex) of the manifest and of the tokenizer, and
    the tokenizer's vocabulary size (the model's by default)."""

    manifest_hash: str
    tokenizer_hash: str
    vocab_size: int


def llama(hidden: int, layers: int, heads: int, seq_len: int, vocab: int = 2048) -> dict:
    """A Hugging Face Llama ``config.json`` (SwiGLU MLP of ~8/3 the width, tied embeddings)."""
    return {
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": 8 * hidden // 3 // 16 * 16 or 16, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": heads,
        "max_position_embeddings": seq_len, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "initializer_range": 0.02,
    }  # fmt: skip


PRESETS: dict[str, dict] = {
    # 3.2M parameters: a few steps per second on 2 CPU cores.
    "small": {"model": llama(256, 4, 4, 64), "seq_len": 64,
              "batch_size": 8, "inner_steps": 50, "checkpoint_interval": 10},
    # For tests and the devnet demo: rounds of well under a second.
    "tiny": {"model": llama(32, 1, 2, 32), "seq_len": 32,
             "batch_size": 4, "inner_steps": 8, "checkpoint_interval": 4},
    # The devnet demo's (which sizes inner_steps to the machine): 0.2M parameters that learn
    # visibly in a minute of 2 CPU cores at a high inner lr; batches of 16 keep a round's inner
    # steps (and so its pseudo-gradient, which the outer momentum amplifies) to ~200 on a fast
    # machine, where batches of 8 gave ~300 and the global loss oscillated.
    "demo": {"model": llama(64, 2, 4, 32), "seq_len": 32, "batch_size": 16, "inner_steps": 48,
             "checkpoint_interval": 12, "inner_lr": 5e-3, "outer_lr": 0.7},
}  # fmt: skip


def make_run_config(
    data: Pins, preset: str = "small", *, model: dict | None = None, **overrides
) -> RunConfig:
    """A RunConfig on the dataset ``data`` from a preset (the model's vocabulary is the
    tokenizer's); ``overrides`` replace any of its fields (``model_config`` the whole model)
    and ``model`` any entries of the preset's model config."""
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
        "precision": "fp32",
        "carry_inner_state": True,
        "model_config": model_config.canonical(
            {**base["model"], "vocab_size": data.vocab_size, **(model or {})}
        ),
        "tokenizer_hash": data.tokenizer_hash,
        "data_manifest_hash": data.manifest_hash,
        **{k: v for k, v in base.items() if k != "model"},
        **overrides,
    }
    return RunConfig(**fields)
