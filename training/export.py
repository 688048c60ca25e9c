"""Exporting a global state to a Hugging Face model folder (``config.json`` and
``model.safetensors``), which ``AutoModelForCausalLM.from_pretrained`` opens."""

from __future__ import annotations

from pathlib import Path

import torch

from dilochain.training.diloco import params_of
from dilochain.training.model import CausalLM, load_params


def export_pretrained(model: CausalLM, state: dict[str, torch.Tensor], out: Path) -> None:
    """Load the global ``state`` into ``model`` (the run's, from ``build_model``) and write it
    to ``out``."""
    load_params(model, params_of(state))
    model.config.use_cache = True  # for generation; training turned it off
    model.save_pretrained(out)
