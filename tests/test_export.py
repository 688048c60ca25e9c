"""Exporting a global state (training/export.py): Hugging Face's own loader opens the folder and
computes the same logits as the node's model."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

from dilochain.protocol import model_config
from dilochain.testutil import shipped_data
from dilochain.training.diloco import initial_global
from dilochain.training.export import PROBES, ExportNotes, export_pretrained, model_card
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
    # generate() reads generation_config.json: the tokenizer's tokens, and the KV cache on
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["bos_token_id"] == generation["eos_token_id"] == tokenizer.eos_token_id
    assert generation.get("use_cache", True) and theirs.config.use_cache
    # safetensors writes through a temp file of its own: readable by the owner alone, where the
    # folder is meant to be shared (or uploaded by another user's tool)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(("round_", "derived", "says"), [
    (10, False, "the final global state, after all 10 rounds (rounds 0-9 trained), as recorded"),
    (10, True, "after all 10 rounds (rounds 0-9 trained), computed from the chain's last"),
    (3, False, "the global state after 3 of the run's 10 rounds (rounds 0-2 trained), as"),
    (1, False, "the global state after 1 of the run's 10 rounds (round 0 trained), as"),
    (0, False, "the run's initial global state, before any round trained, as recorded"),
])  # fmt: skip
def test_the_model_card_counts_rounds_as_the_export_s_notes_do(round_, derived, says):
    """An export of a finished 10-round run said "the state after round 9 of 10" beside a
    dilochain.json saying round 10: rounds are numbered from 0, and the card now says how many
    trained and which."""
    hashes = dict.fromkeys(("global_state_sha256", "model_config_sha256",
                            "data_manifest_sha256", "tokenizer_sha256"), "aa")  # fmt: skip
    notes = ExportNotes(run_id="r", round=round_, total_rounds=10, losses={0: 7.6, 1: 6.1},
                        derived=derived, **hashes)  # fmt: skip
    card = " ".join(model_card(notes, "llama").split())
    assert says in card and "| 1 | 6.1000 |" in card


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral"])
def test_every_model_type_s_exported_tokenizer_gives_the_training_ids(tmp_path, model_type):
    """transformers picks a tokenizer class by model type (Qwen2Tokenizer rebuilds its own
    normaliser and split whatever tokenizer.json says): a run's tokenizer gives the same ids
    through every one, and the export says so; its length limit is the run's seq_len."""
    settings = {**json.loads(CFG.model_config), "model_type": model_type}
    model = build_model(model_config.canonical(settings), CFG.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    assert export_pretrained(model, state, DATA.root / "tokenizer.json", tmp_path, 32) == []
    theirs, ours = AutoTokenizer.from_pretrained(tmp_path), Tokenizer.from_file(
        str(DATA.root / "tokenizer.json"))  # fmt: skip
    for text in [*PROBES, "Tabs\tand\r\nnewlines, 3.14159 and ½ and e\u0301"]:
        assert theirs(text, add_special_tokens=False)["input_ids"] == ours.encode(text).ids, text
    assert theirs.model_max_length == 32


def test_a_tokenizer_qwen2_cannot_reproduce_is_reported(tmp_path):
    """A GPT-2-style tokenizer (what runs used before) under a Qwen2 model: the export names a
    text whose ids differ instead of shipping a silently different tokenizer."""
    old = Tokenizer(models.BPE())
    old.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    old.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    old.train_from_iterator(["Copyright (C) 2007 and 2008, 12345 " * 50], trainer=trainer)
    old.save(str(tmp_path / "old.json"))
    settings = {**json.loads(CFG.model_config), "model_type": "qwen2", "vocab_size": 300}
    model = build_model(model_config.canonical(settings), CFG.seed)
    state = initial_global({n: p.detach().clone() for n, p in model.named_parameters()})
    assert export_pretrained(model, state, tmp_path / "old.json", tmp_path / "out")
