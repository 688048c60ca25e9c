"""Exporting a global state (training/export.py): Hugging Face's own loader opens the folder and
computes the same logits as the node's model."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global
from dilochain.training.export import export_pretrained
from dilochain.training.model import build_model, load_params
from dilochain.training.run_config import make_run_config

DATA, PINS = shipped_data()
CFG = make_run_config(PINS, "tiny")


def test_exported_model_opens_with_from_pretrained_and_matches(tmp_path):
    trained = build_model(CFG.model_config, 5)  # stands in for a trained global state
    state = initial_global({n: p.detach().clone() for n, p in trained.named_parameters()})
    export_pretrained(build_model(CFG.model_config, CFG.seed), state,
                      DATA.root / "tokenizer.json", tmp_path)  # fmt: skip
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in tmp_path.iterdir()
    }
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path)
    ours = build_model(CFG.model_config, CFG.seed)
    load_params(ours, {n: p.detach() for n, p in trained.named_parameters()})
    tokens = torch.randint(0, PINS.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(theirs(input_ids=tokens).logits, ours(input_ids=tokens).logits)
    on_disk = load_file(tmp_path / "model.safetensors")
    assert torch.equal(on_disk["model.embed_tokens.weight"],
                       trained.model.embed_tokens.weight.detach())  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    prompt = tokenizer("Exceptions are raised", return_tensors="pt").input_ids
    generated = theirs.generate(prompt, max_new_tokens=3, do_sample=False)
    assert generated.shape == (1, prompt.shape[1] + 3)
    assert tokenizer.decode(generated[0]).startswith("Exceptions are raised")
    assert tokenizer.eos_token == "<|endoftext|>" and theirs.config.eos_token_id == 0
