"""The run's model (training/model.py, protocol/model_config.py): any causal LM transformers
builds from the run's config.json, the same weights for the same seed, clear errors otherwise."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dilochain.protocol import model_config
from dilochain.protocol.model_config import ModelConfigError
from dilochain.testutil import FAKE_DATA
from dilochain.training.model import (
    build_checked_model,
    build_model,
    lm_loss,
    load_params,
    parameter_count,
)
from dilochain.training.run_config import PRESETS, llama, make_run_config

TINY = make_run_config(FAKE_DATA, "tiny").model_config
ARCHITECTURES = {
    "llama": llama(32, 1, 2, 16),
    "qwen2": {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "max_position_embeddings": 16},
    "mistral": {"model_type": "mistral", "vocab_size": 300, "hidden_size": 32,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 16, "sliding_window": 8},
}  # fmt: skip


def test_the_same_seed_builds_the_same_weights():
    before = torch.get_rng_state()
    a, b, c = build_model(TINY, 1), build_model(TINY, 1), build_model(TINY, 2)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's RNG is left alone
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    assert not all(torch.equal(pa[n], pc[n]) for n in pa)


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_any_causal_lm_trains(kind):
    config = model_config.canonical(ARCHITECTURES[kind])
    model = build_model(config, 7)
    assert type(model).__name__.lower().startswith(kind)
    tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(0))
    loss = lm_loss(model, tokens)
    # The same next-token loss transformers computes itself.
    theirs = model(input_ids=tokens[:, :-1], labels=tokens[:, :-1]).loss
    reference = torch.nn.functional.cross_entropy(
        model(input_ids=tokens).logits[:, :-1].reshape(-1, model.config.vocab_size),
        tokens[:, 1:].reshape(-1),
    )
    assert torch.allclose(loss, reference, atol=1e-5) and torch.isfinite(theirs)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_presets_are_llama_and_load_params_round_trips():
    for name, preset in PRESETS.items():
        assert preset["model"]["model_type"] == "llama", name
    model = build_model(TINY, 1)
    params = {n: p.detach().clone() + 1 for n, p in model.named_parameters()}
    load_params(model, params)
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match="do not match"):
        load_params(model, {**params, "extra": torch.ones(1)})
    assert parameter_count(model) == sum(p.numel() for p in params.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"vocab_size":256}', "no model_type"),
        ('{"model_type":"llama","vocab_size":100}', "vocab_size"),
        ('{"model_type":"llama","vocab_size":true}', "vocab_size"),
        ('{"vocab_size":256,"model_type":"llama"}', "canonical"),
        ('{"model_type":"llama","vocab_size":256,"x":"' + "a" * 20_000 + '"}', "over"),
        # Python's parser recurses per level: how deep it may go would depend on the stack
        # the caller already has, so the chain's CheckTx and FinalizeBlock could disagree.
        (
            '{"model_type":"llama","vocab_size":256,"x":' + "[" * 900 + "]" * 900 + "}",
            "nests deeper than 32",
        ),
        ("[" * 10_000, "nests deeper than 32"),
        ('{"model_type":"llama","rope_theta":NaN,"vocab_size":256}', "NaN is not JSON"),
        ('{"model_type":"llama","rope_theta":-Infinity,"vocab_size":256}', "not JSON"),
    ],
)
def test_bad_model_configs_are_named(text, message):
    with pytest.raises(ModelConfigError, match=message):
        model_config.parse(text)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(alphabet='[]{}"\\ax'),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(alphabet='[]{}"\\ax', max_size=4), inner,
                                      max_size=3), max_leaves=20))  # fmt: skip
def test_nesting_is_measured_as_the_parser_sees_it_whatever_the_strings_hold(value):
    def depth(v) -> int:
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max(map(depth, children), default=0)

    assert model_config._depth(json.dumps(value)) == depth(value)
    config = {"model_type": "llama", "vocab_size": 256, "x": value}
    assert model_config.parse(model_config.canonical(config)) == config


def test_a_model_transformers_does_not_know_is_one_clear_error():
    unknown = model_config.canonical({"model_type": "no-such-lm", "vocab_size": 256})
    with pytest.raises(ModelConfigError, match="no-such-lm"):
        build_model(unknown, 1)
    not_causal = model_config.canonical({"model_type": "t5", "vocab_size": 256})
    with pytest.raises(ModelConfigError, match="t5"):
        build_model(not_causal, 1)


BASE = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
        ({"hidden_size": 33}, "does not divide into 2 heads"),
        ({"num_key_value_heads": 3}, "do not divide into 3 kv heads"),
        ({"num_hidden_layers": -1}, "num_hidden_layers must be a positive integer"),
        ({"intermediate_size": True}, "intermediate_size must be a positive integer"),
        ({"hidden_size": 1 << 40}, "hidden_size must be a positive integer"),
        ({"hidden_size": None, "n_embd": None}, "no hidden size"),
        ({"num_hidden_layers": 4096, "hidden_size": 8192}, "over the chain's budget"),
        ({"auto_map": {"AutoModelForCausalLM": "evil.Evil"}}, "may not load code"),
        ({"trust_remote_code": True}, "may not load code"),
    ],
)
def test_hostile_model_configs_are_refused_before_anyone_builds_them(change, message):
    config = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(ModelConfigError, match=message):
        model_config.check_budget(model_config.canonical(config), 10**10)


@pytest.mark.parametrize(
    "change",
    [
        {"initializer_range": "x"},  # transformers' strict dataclass validation
        {"layer_types": ["x"]},
        {"pad_token_id": 10**9},  # an AssertionError inside torch's Embedding
        {"tie_word_embeddings": "yes"},
        {"rope_scaling": [1, 2]},
        {"hidden_act": "no-such-activation"},
    ],
)
def test_what_the_chain_takes_but_transformers_cannot_build_is_one_error(change):
    text = model_config.canonical({**BASE, **change})
    model_config.check_budget(text, 10**10)  # the chain cannot know
    with pytest.raises(ModelConfigError, match="cannot"):
        build_checked_model(text, 0, 10**10)


def test_a_size_the_model_does_not_read_is_refused_it_would_price_tokens_falsely():
    """The chain prices a run's tokens (its rewards) by the config's sizes: a GPT-2 config
    with an intermediate_size of millions, which GPT-2 ignores, priced a token of a 250k
    model as one of 10 billion. Hosts and verifiers refuse it (unverified, a fail-closed
    chain pays it nothing); two names of one size that differ the chain refuses itself."""
    gpt2 = {"model_type": "gpt2", "vocab_size": 256, "n_embd": 32, "n_layer": 1, "n_head": 2,
            "n_positions": 16}  # fmt: skip
    inflated = model_config.canonical({**gpt2, "intermediate_size": 26_000_000})
    assert model_config.token_cost(inflated, 16) > 10**4 * model_config.token_cost(
        model_config.canonical(gpt2), 16
    )  # what the chain would pay for
    with pytest.raises(ModelConfigError, match="gpt2 model does not read intermediate_size"):
        build_checked_model(inflated, 0, 10**11)
    build_checked_model(model_config.canonical({**gpt2, "hidden_size": 32}), 0, 10**10)  # alias
    twice = model_config.canonical({**gpt2, "hidden_size": 4096})
    with pytest.raises(ModelConfigError, match="hidden size under several names"):
        model_config.check_budget(twice, 10**11)
    for kind in ARCHITECTURES:  # what every shipped architecture's config gives, it reads
        build_checked_model(model_config.canonical(ARCHITECTURES[kind]), 0, 10**10)


def test_a_model_this_machine_cannot_hold_is_refused_before_it_is_built(monkeypatch):
    from dilochain.training import model as model_module

    monkeypatch.setattr(model_module, "_available_memory", lambda: 1000)
    with pytest.raises(ModelConfigError, match=r"need .* GB, and this machine has"):
        build_checked_model(model_config.canonical(BASE), 0, 10**10)


def test_a_config_naming_code_never_runs_it(tmp_path, monkeypatch):
    """A run's config that points transformers at a module (auto_map) is refused before
    transformers sees it, whoever builds it; the module is never imported."""
    marker = tmp_path / "ran"
    (tmp_path / "evil_lm.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = model_config.canonical(
        {**BASE, "auto_map": {"AutoConfig": "evil_lm.Config", "AutoModelForCausalLM": "evil_lm.LM"}}
    )
    for build in (lambda: build_checked_model(text, 0, 10**10), lambda: build_model(text, 0)):
        with pytest.raises(ModelConfigError, match="may not load code"):
            build()
    assert not marker.exists()


def test_a_round_s_work_follows_its_compute_not_its_token_count():
    """A run's creator picks the tokens a round trains and the model; rewards follow what they
    cost together: a model several times larger costs that much more a token, and the same
    compute earns the same, whatever the mix of tokens and model size."""
    from dilochain.chain.modules.rounds import work_per_round
    from dilochain.protocol.pb.poc.v1.types_pb2 import Run

    small = make_run_config(FAKE_DATA, "small")
    tiny = make_run_config(FAKE_DATA, "tiny")
    cost = {c.model_config: model_config.token_cost(c.model_config, c.seq_len)
            for c in (small, tiny)}  # fmt: skip
    ratio = cost[small.model_config] / cost[tiny.model_config]
    assert ratio > 5
    # An embedding table costs a token one row: a million positions earn nothing more.
    config = json.loads(tiny.model_config)
    vast = model_config.canonical({**config, "max_position_embeddings": 150_000_000})
    assert model_config.token_cost(vast, tiny.seq_len) == cost[tiny.model_config]
    assert model_config.parameter_estimate(json.loads(vast)) > 1000 * cost[tiny.model_config]
    runs = {name: Run(config=c) for name, c in (("small", small), ("tiny", tiny))}
    runs["tiny"].config.inner_steps = round(
        small.inner_steps
        * ratio
        * small.batch_size
        * small.seq_len
        / (tiny.batch_size * tiny.seq_len)
    )
    assert work_per_round(runs["tiny"]) == pytest.approx(work_per_round(runs["small"]), rel=0.05)
