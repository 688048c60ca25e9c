"""Exporting a global state to a Hugging Face model folder (``config.json``,
``model.safetensors``, the run's tokenizer and a model card), which
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` open."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from dilochain.training.diloco import params_of
from dilochain.training.model import CausalLM, load_params
from dilochain.training.prepare import EOS

# Texts whose ids the exported tokenizer must reproduce: digits, spacing, punctuation and
# text that NFC changes, where tokenizer pipelines differ.
PROBES = ("Copyright (C) 2007 Free Software", "  def f(x):\n\treturn x**2  ",
          "Ünïcödé café naïve", "hello   world 12345, isn't it?")  # fmt: skip


@dataclass(frozen=True)
class ExportNotes:
    """What the model card says about the run (all from the chain)."""

    run_id: str
    round: int  # the state round ``round`` starts from: after rounds 0 to round - 1
    total_rounds: int
    global_state_sha256: str
    model_config_sha256: str
    data_manifest_sha256: str
    tokenizer_sha256: str
    losses: dict[int, float]  # round -> median held-out loss its hosts reported for its base
    derived: bool  # computed from the last recorded state and the rounds after it


def export_pretrained(model: CausalLM, state: dict[str, torch.Tensor], tokenizer_file: Path,
                      out: Path, seq_len: int | None = None) -> list[str]:  # fmt: skip
    """Load the global ``state`` into ``model`` (the run's, from ``build_model``) and write it
    with the run's tokenizer (``tokenizer.json`` of the tokenizers library) to ``out``;
    ``seq_len`` (the run's) becomes the tokenizer's ``model_max_length``. Returns the probe
    texts whose ids ``AutoTokenizer`` on ``out`` does not reproduce (empty when it does)."""
    load_params(model, params_of(state))
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    if seq_len is not None:
        tokenizer.model_max_length = seq_len
    if EOS in tokenizer.get_vocab():
        tokenizer.eos_token = tokenizer.bos_token = EOS
        model.config.eos_token_id = model.config.bos_token_id = tokenizer.eos_token_id
    # generate() reads generation_config.json, not config.json: the same tokens, and the KV
    # cache that training turned off (a review found bos 1 where the tokenizer's was 0).
    model.config.use_cache = model.generation_config.use_cache = True
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.generation_config, token, getattr(model.config, token, None))
    progress = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a CLI's one line says what was written
    try:
        model.save_pretrained(out)
    finally:
        if progress:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    for weights in out.glob("*.safetensors"):  # safetensors writes through a 0600 temp file
        weights.chmod(stat.S_IMODE((out / "config.json").stat().st_mode))
    trained = Tokenizer.from_file(str(tokenizer_file))
    theirs = AutoTokenizer.from_pretrained(out)
    return [text for text in PROBES
            if theirs(text, add_special_tokens=False)["input_ids"]
            != trained.encode(text, add_special_tokens=False).ids]  # fmt: skip


def model_card(notes: ExportNotes, model_type: str) -> str:
    """A ``README.md`` for the exported folder: where the weights come from and how to check."""
    done = (f"rounds 0-{notes.round - 1}" if notes.round > 1 else "round 0") + " trained"
    if notes.round == 0:
        which = "the run's initial global state, before any round trained"
    elif notes.round == notes.total_rounds:
        which = f"the final global state, after all {notes.total_rounds} rounds ({done})"
    else:
        which = (f"the global state after {notes.round} of the run's {notes.total_rounds} "
                 f"rounds ({done})")  # fmt: skip
    if notes.derived:
        which += (", computed from the chain's last recorded state and the accepted "
                  "pseudo-gradients after it")  # fmt: skip
    else:
        which += ", as recorded on chain"
    rows = "\n".join(f"| {r} | {loss:.4f} |" for r, loss in sorted(notes.losses.items()))
    table = ("| round | held-out loss of its starting state (median of hosts) |\n| --- | --- |\n"
             + rows) if rows else "No round reported a held-out loss."  # fmt: skip
    return f"""---
library_name: transformers
tags: [dilochain, diloco]
---
# {notes.run_id}

A {model_type} model trained with DiLoCo by the hosts of dilochain run `{notes.run_id}`; these
weights are {which}.

| | sha256 |
| --- | --- |
| global state | `{notes.global_state_sha256}` |
| model config | `{notes.model_config_sha256}` |
| data manifest | `{notes.data_manifest_sha256}` |
| tokenizer | `{notes.tokenizer_sha256}` |

{table}

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained(".")
tokenizer = AutoTokenizer.from_pretrained(".")
```
"""
