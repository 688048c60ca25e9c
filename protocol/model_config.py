"""A run's model config: a Hugging Face ``config.json`` carried in the run's on-chain config as
canonical JSON. Anyone can create a run, so the config is hostile input to every host and
verifier: it is checked here without transformers (the chain never imports it) as far as that
goes — no key that loads code, positive sizes that divide, a parameter count within the chain's
budget — and what transformers still cannot build, hosts and verifiers refuse with one line."""

from __future__ import annotations

import hashlib
import json
import re

MAX_BYTES = 16 * 1024
MIN_VOCAB = 256  # a byte-level BPE holds the 256 byte tokens at least
# Keys through which transformers loads a model's code from elsewhere: never in a run.
CODE_KEYS = ("auto_map", "trust_remote_code", "custom_pipelines")
# Sizes by the names the common causal-LM configs give them (Llama, Mistral, Qwen2, GPT-2,
# GPT-NeoX, OPT, Phi …): the first name a config uses counts.
SIZES = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "intermediate": ("intermediate_size", "n_inner", "ffn_dim"),
    "head_dim": ("head_dim",),
    "positions": ("max_position_embeddings", "n_positions"),
}
SIZE_NAMES = tuple(name for names in SIZES.values() for name in names)
# Attention may cost a token at most this many times what the parameters cost it: 0.3-0.5 for
# 1-8B models trained on 8,192-token sequences, 32 for a 4M-parameter model at 65,536 (an
# hour's screen on a core).
MAX_ATTENTION_SHARE = 4
LIMIT = 1 << 31  # no size of a real model is near it; above it every product overflows
# Real configs nest two or three deep (rope_scaling, quantization_config). Bounded before
# parsing: Python's parser recurses per level, and whether a deep document overflows the stack
# would depend on how deep the caller's stack already is (a validity no two callers agree on).
MAX_DEPTH = 32
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


class ModelConfigError(ValueError):
    """A model config that no party could build a model from."""


def canonical(config: dict) -> str:
    """The canonical JSON of a config dict: sorted keys, no spaces."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def parse(text: str) -> dict:
    """The config dict of canonical JSON ``text``; :class:`ModelConfigError` says what is wrong."""
    if len(text.encode()) > MAX_BYTES:
        raise ModelConfigError(f"model config is over {MAX_BYTES} bytes")
    if _depth(text) > MAX_DEPTH:
        raise ModelConfigError(f"model config nests deeper than {MAX_DEPTH} levels")
    try:
        config = json.loads(text, parse_constant=_no_constant)
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
    code = [k for k in CODE_KEYS if k in config]
    if code:
        raise ModelConfigError(f"model config may not load code ({', '.join(code)})")
    return config


def _depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets inside strings skipped)."""
    deepest = depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _no_constant(name: str) -> float:
    """Refuse ``NaN`` and ``Infinity``, which Python's parser takes but JSON has not."""
    raise ValueError(f"{name} is not JSON")


def _sizes(config: dict) -> dict[str, int]:
    found = {}
    for size, names in SIZES.items():
        name = next((n for n in names if config.get(n) is not None), None)
        if name is None:
            continue
        value = config[name]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < LIMIT:
            raise ModelConfigError(f"model config's {name} must be a positive integer")
        found[size] = value
    return found


def parameter_estimate(config: dict) -> int:
    """An upper estimate of a decoder LM's parameter count from its sizes (gated MLP, untied
    embeddings); :class:`ModelConfigError` for sizes that are missing, not positive or do not
    divide into heads."""
    sizes = _sizes(config)
    missing = [s for s in ("hidden", "layers") if s not in sizes]
    if missing:
        names = " or ".join(SIZES[missing[0]])
        raise ModelConfigError(f"model config gives no {missing[0]} size ({names})")
    hidden, layers = sizes["hidden"], sizes["layers"]
    heads = sizes.get("heads", 1)
    kv_heads = sizes.get("kv_heads", heads)
    if "head_dim" not in sizes and hidden % heads:
        raise ModelConfigError(f"hidden size {hidden} does not divide into {heads} heads")
    if heads % kv_heads:
        raise ModelConfigError(f"{heads} attention heads do not divide into {kv_heads} kv heads")
    return (
        layers * _per_layer(sizes)
        + 2 * config["vocab_size"] * hidden
        + sizes.get("positions", 0) * hidden
    )


def _head_dim(sizes: dict[str, int]) -> int:
    return sizes.get("head_dim", sizes["hidden"] // sizes.get("heads", 1))


def _per_layer(sizes: dict[str, int]) -> int:
    """A layer's parameters: attention, a gated MLP, norms and biases."""
    hidden, heads = sizes["hidden"], sizes.get("heads", 1)
    kv_heads = sizes.get("kv_heads", heads)
    attention = 2 * hidden * (heads + kv_heads) * _head_dim(sizes)
    return attention + 3 * hidden * sizes.get("intermediate", 4 * hidden) + 16 * hidden


def attention_share(config: dict, seq_len: int, parameters: int) -> float:
    """What attention costs a token (its scores and weighted sums over ``seq_len`` positions,
    in every layer) over what the parameters cost it: 2 x layers x seq_len x heads x head_dim
    over ``parameters`` (:func:`parameter_estimate` of ``config``, which checked its sizes). It
    grows with ``seq_len`` while the chain's budgets (parameters, tokens a step) do not, so it
    bounds what a run's step costs a verifier."""
    return _attention(_sizes(config), seq_len) / parameters


def _attention(sizes: dict[str, int], seq_len: int) -> int:
    return 2 * sizes["layers"] * seq_len * sizes.get("heads", 1) * _head_dim(sizes)


def token_cost(text: str, seq_len: int) -> int:
    """What training a token of a model costs, in multiply-adds of its forward pass: its
    layers' weights, the output projection over the vocabulary, and attention over
    ``seq_len`` positions; not its embedding tables, which a token only reads a row of (a
    ``max_position_embeddings`` of millions costs a token nothing). An integer: rewards are
    split by it on chain. The config was checked by :func:`check_budget`."""
    config = parse(text)
    sizes = _sizes(config)
    weights = sizes["layers"] * _per_layer(sizes) + config["vocab_size"] * sizes["hidden"]
    return weights + _attention(sizes, seq_len)


def check_budget(text: str, max_parameters: int, seq_len: int = 0) -> int:
    """The estimate of a canonical config's parameters, if within ``max_parameters`` (the
    chain's budget) and, at ``seq_len`` tokens a sequence, its attention within
    ``MAX_ATTENTION_SHARE``; :class:`ModelConfigError` otherwise."""
    config = parse(text)
    estimate = parameter_estimate(config)
    for size, names in SIZES.items():  # the first name counts here; a model may read another
        given = {config[n] for n in names if config.get(n) is not None}
        if len(given) > 1:
            raise ModelConfigError(
                f"model config gives its {size} size under several names, "
                f"differently ({', '.join(n for n in names if n in config)})"
            )
    if estimate > max_parameters:
        raise ModelConfigError(f"the model has about {estimate:,} parameters, over the chain's "
                               f"budget of {max_parameters:,}")  # fmt: skip
    share = attention_share(config, seq_len, estimate)
    if share > MAX_ATTENTION_SHARE:
        raise ModelConfigError(f"seq_len {seq_len}: attention would cost a token {share:.1f} "
                               f"times what the model's parameters do (at most "
                               f"{MAX_ATTENTION_SHARE})")  # fmt: skip
    return estimate


def config_hash(text: str) -> str:
    """sha256 (hex) of a model config's canonical JSON: how logs and exports name it."""
    return hashlib.sha256(text.encode()).hexdigest()
