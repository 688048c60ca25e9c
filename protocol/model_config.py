"""A run's model config: a Hugging Face ``config.json`` carried in the run's on-chain config as
canonical JSON. Checked here without transformers (the chain never imports it); what
transformers cannot build, hosts and verifiers refuse with one line."""

from __future__ import annotations

import hashlib
import json

MAX_BYTES = 16 * 1024
MIN_VOCAB = 256  # a byte-level BPE holds the 256 byte tokens at least


class ModelConfigError(ValueError):
    """A model config that no party could build a model from."""


def canonical(config: dict) -> str:
    """The canonical JSON of a config dict: sorted keys, no spaces."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def parse(text: str) -> dict:
    """The config dict of canonical JSON ``text``; :class:`ModelConfigError` says what is wrong."""
    if len(text.encode()) > MAX_BYTES:
        raise ModelConfigError(f"model config is over {MAX_BYTES} bytes")
    try:
        config = json.loads(text)
    except ValueError as err:
        raise ModelConfigError(f"model config is not JSON: {err}") from None
    if not isinstance(config, dict):
        raise ModelConfigError("model config is not a JSON object")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise ModelConfigError("model config has no model_type")
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < MIN_VOCAB:
        raise ModelConfigError(f"model config's vocab_size must be an integer >= {MIN_VOCAB}")
    if canonical(config) != text:
        raise ModelConfigError("model config is not canonical JSON (sorted keys, no spaces)")
    return config


def config_hash(text: str) -> str:
    """sha256 (hex) of a model config's canonical JSON: how logs and exports name it."""
    return hashlib.sha256(text.encode()).hexdigest()
