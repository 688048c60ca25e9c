"""Exporting a global state to a Hugging Face model folder (``config.json`` and
``model.safetensors``), which ``AutoModelForCausalLM.from_pretrained`` opens."""

from __future__ import annotations

from pathlib import Path

import torch

from dilochain.training.diloco import params_of
from dilochain.training.model import CausalLM, build_model, load_params


def export_pretrained(
    config_json: str, seed: int, state: dict[str, torch.Tensor], out: Path
) -> CausalLM:
    """Write the global ``state`` of a run with this model config to ``out``; the model."""
    model = build_model(config_json, seed)
    load_params(model, params_of(state))
    model.config.use_cache = True  # for generation; training turned it off
    model.save_pretrained(out)
    return model
