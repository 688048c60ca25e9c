"""The run's model: any causal LM that Hugging Face ``transformers`` builds from the run's
``config.json`` (``protocol/model_config.py``), initialised from the run seed, so every host and
verifier holds the same weights. One model path for every run; the default presets are tiny
Llama configs."""

from __future__ import annotations

import functools
import inspect

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from dilochain.protocol import model_config
from dilochain.protocol.model_config import ModelConfigError
from dilochain.training.tensor_codec import state_bound

CausalLM = PreTrainedModel


def _hf_config(config_json: str):
    settings = model_config.parse(config_json)
    try:
        config = AutoConfig.for_model(**settings)
    except (ValueError, KeyError, TypeError) as err:
        raise ModelConfigError(f"transformers cannot read the model config: {err}") from None
    unread = [n for n in model_config.SIZE_NAMES
              if settings.get(n) is not None and not _reads(type(config), n)]  # fmt: skip
    if unread:
        raise ModelConfigError(
            f"a {config.model_type} model does not read {', '.join(unread)}: the chain prices "
            "a run's tokens (and so its rewards) by the sizes its config gives, so a size the "
            "model does not have is refused"
        )
    config.use_cache = False
    return config


@functools.lru_cache(maxsize=64)
def _known_settings(cls: type) -> frozenset[str]:
    fields = getattr(cls, "__dataclass_fields__", {})
    aliases = getattr(cls, "attribute_map", {})
    return frozenset(inspect.signature(cls.__init__).parameters) | set(fields) | set(aliases)


def _reads(cls: type, name: str) -> bool:
    """Whether transformers' config class ``cls`` has a setting ``name`` (a field, an
    argument or an alias of one), rather than keeping it as an attribute nothing reads."""
    return name in _known_settings(cls)


def _from_config(config) -> CausalLM:
    try:  # a run's config never loads code (the chain refuses auto_map; this refuses it again)
        return AutoModelForCausalLM.from_config(
            config, attn_implementation="sdpa", dtype=torch.float32, trust_remote_code=False
        )
    except (ValueError, KeyError, TypeError) as err:
        kind = config.model_type
        raise ModelConfigError(f"transformers cannot build a {kind!r} LM: {err}") from None


def build_model(config_json: str, seed: int) -> CausalLM:
    """The run's initial model (float32, SDPA attention): the same weights for everyone with
    the same seed. Raises :class:`ModelConfigError` for a config transformers cannot build."""
    config = _hf_config(config_json)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _from_config(config)


# The chain's parameter budget is for an estimate from the config's sizes; the model built may
# hold a little more (biases, extra norms), and no more than this much more.
BUDGET_MARGIN = 1.25


def build_checked_model(config_json: str, seed: int, max_parameters: int) -> CausalLM:
    """:func:`build_model` for a config anyone may have written: first built on the meta device
    (costing nothing) and its size checked against the chain's ``max_parameters``; whatever
    transformers or torch raise on the way (a zero head count, an absurd size) is a
    :class:`ModelConfigError`, so a hostile run is one line, never a crash."""
    try:
        count = parameter_count(check_model_config(config_json))
        if count > max_parameters * BUDGET_MARGIN:
            raise ModelConfigError(f"the model has {count:,} parameters, over the chain's "
                                   f"budget of {max_parameters:,}")  # fmt: skip
        available = _available_memory()
        if available is not None and 4 * count > available:
            raise ModelConfigError(f"the model's {count:,} float32 parameters need "
                                   f"{4 * count / 1e9:.1f} GB, and this machine has "
                                   f"{available / 1e9:.1f} GB available")  # fmt: skip
        return build_model(config_json, seed)
    except ModelConfigError:
        raise
    except Exception as err:  # hostile input: whatever it makes transformers or torch do
        raise ModelConfigError(f"the model cannot be built: {type(err).__name__}: "
                               f"{str(err)[:200]}") from None  # fmt: skip


def _available_memory() -> int | None:
    """Bytes of memory available for new allocations (Linux's MemAvailable; None elsewhere)."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_model_config(config_json: str) -> CausalLM:
    """The run's model without weights (on the meta device, so a 70B config costs nothing):
    whether transformers builds it, its vocabulary and size. Raises :class:`ModelConfigError`."""
    config = _hf_config(config_json)
    with torch.device("meta"):
        return _from_config(config)


@functools.lru_cache(maxsize=8)
def reference_params(config_json: str) -> dict[str, torch.Tensor]:
    """The run's parameters without values (meta tensors: names, shapes, float32), what every
    state a stranger publishes for the run is checked against before any arithmetic on it;
    raises :class:`ModelConfigError`."""
    return dict(check_model_config(config_json).named_parameters())


def load_params(model: nn.Module, params: dict[str, torch.Tensor]) -> None:
    """Copy ``params`` (one tensor per named parameter, tied weights once, each of its
    parameter's shape: ``copy_`` would broadcast) into ``model``."""
    names = dict(model.named_parameters())
    if set(params) != set(names) or any(params[n].shape != p.shape for n, p in names.items()):
        raise ValueError("parameters do not match the run's model")
    with torch.no_grad():
        for name, p in names.items():
            p.copy_(params[name])


def lm_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over a batch of (seq_len + 1)-token windows (float32)."""
    logits = model(input_ids=tokens[:, :-1]).logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def max_artifact_bytes(model: nn.Module) -> int:
    """An upper bound on any artifact of a run with this model: the largest are a global state
    (parameters and outer momentum) and a checkpoint's moments (two AdamW moments), float32,
    plus the room their headers can need. Fetches stop past it (or past their kind's limit)."""
    return state_bound(dict(model.named_parameters()), copies=2)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters())
