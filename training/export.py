"""Exporting a global state to a Hugging Face model folder (``config.json``,
``model.safetensors`` and the run's tokenizer), which ``AutoModelForCausalLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` open."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from dilochain.training.diloco import params_of
from dilochain.training.model import CausalLM, load_params
from dilochain.training.prepare import EOS


def export_pretrained(
    model: CausalLM, state: dict[str, torch.Tensor], tokenizer_file: Path, out: Path
) -> None:
    """Load the global ``state`` into ``model`` (the run's, from ``build_model``) and write it
    with the run's tokenizer (``tokenizer.json`` of the tokenizers library) to ``out``."""
    load_params(model, params_of(state))
    model.config.use_cache = True  # for generation; training turned it off
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    if EOS in tokenizer.get_vocab():
        tokenizer.eos_token = tokenizer.bos_token = EOS
        model.config.eos_token_id = model.config.bos_token_id = tokenizer.eos_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
