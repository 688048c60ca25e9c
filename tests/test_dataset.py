"""Data preparation (training/prepare.py) and the checked, memory-mapped dataset it writes
(training/dataset.py): deterministic bytes, every input format, and one clear error per bad
input naming the file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from dilochain.testutil import shipped_data
from dilochain.training.dataset import (
    MANIFEST,
    TOKENIZER,
    DataError,
    Dataset,
    DataUnavailable,
    file_sha256,
    find_dataset,
    read_manifest,
)
from dilochain.training.prepare import PrepareOptions, documents, input_files, pins_of, prepare

SMALL = PrepareOptions(vocab_size=320, shard_tokens=2048, heldout_tokens=1024)
WORDS = ["the cat sat on the mat", "a dog ran in the park", "birds sing at dawn"]


def _texts(tmp_path, count=60):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(count):
        (folder / f"{i:03d}.txt").write_text(f"document {i}: " + " ".join(WORDS) * (i % 7 + 3))
    return folder


def _prepare(inputs, out, options=SMALL, tokenizer=None):
    files = input_files(inputs)
    return prepare(lambda: documents(files, options.text_field), out, options, tokenizer)


def _hashes(folder):
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir())}


def test_same_input_and_options_give_identical_bytes(tmp_path):
    texts = _texts(tmp_path)
    a = _prepare([texts], tmp_path / "a")
    b = _prepare([texts], tmp_path / "b")
    assert a == b and _hashes(tmp_path / "a") == _hashes(tmp_path / "b")
    manifest = read_manifest(tmp_path / "a" / MANIFEST)
    assert manifest.tokenizer_sha256 == a.tokenizer_hash == file_sha256(tmp_path / "a" / TOKENIZER)
    # A text this small has fewer merges than asked for: the vocabulary is the tokenizer's own.
    trained = Tokenizer.from_file(str(tmp_path / "a" / TOKENIZER)).get_vocab_size()
    assert manifest.dtype == "uint16" and manifest.vocab_size == trained <= 320
    assert manifest.eos_id == 0
    assert manifest.heldout.tokens == 1024 and len(manifest.shards) >= 2
    sizes = [s.tokens for s in manifest.shards]
    assert all(s == 2048 for s in sizes[:-1]) and 1024 <= sizes[-1] < 3072
    # another vocabulary is another dataset
    assert _prepare([texts], tmp_path / "c", PrepareOptions(290, "text", 2048, 1024)) != a


def test_token_stream_is_the_documents_with_end_of_text(tmp_path):
    texts = _texts(tmp_path, 20)
    pins = _prepare([texts], tmp_path / "d")
    data = Dataset(tmp_path / "d", pins.manifest_hash, pins.tokenizer_hash)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tmp_path / "d" / TOKENIZER))
    stream = []
    for path in sorted(texts.iterdir()):
        stream += [*tokenizer.encode(path.read_text()).ids, 0]
    manifest = data.manifest
    on_disk = np.concatenate([data._open(e) for e in [manifest.heldout, *manifest.shards]]).tolist()
    assert on_disk == stream


def test_jsonl_and_parquet_inputs(tmp_path):
    rows = [{"text": f"{w} number {i}", "id": i} for i in range(400) for w in WORDS[:1]]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": [r["text"] for r in rows], "id": [r["id"] for r in rows]}),
                   parquet)  # fmt: skip
    assert list(documents([jsonl], "text")) == [r["text"] for r in rows]
    assert list(documents([parquet], "text")) == [r["text"] for r in rows]
    # the same documents in either format make the same dataset
    assert _prepare([jsonl], tmp_path / "j") == _prepare([parquet], tmp_path / "p")


def test_a_given_tokenizer_is_reused_byte_for_byte(tmp_path):
    texts = _texts(tmp_path)
    first = _prepare([texts], tmp_path / "first")
    again = _prepare([texts], tmp_path / "again", tokenizer=tmp_path / "first" / TOKENIZER)
    assert again.tokenizer_hash == first.tokenizer_hash and again == first


@pytest.mark.parametrize(
    "name, content, needle",
    [
        (
            "bad.jsonl",
            '{"text": "fine"}\n{"body": "no text"}\n',
            "bad.jsonl:2: field 'text' is missing (keys: 'body'); choose another with --text-field",
        ),
        ("bad.jsonl", '{"text": 5}\n', "field 'text' is not text"),
        ("bad.jsonl", '{"text": "fine"}\nnot json\n', "bad.jsonl:2: not a JSON line"),
        ("bad.txt", b"\xff\xfe binary", "bad.txt: not UTF-8"),
        ("bad.parquet", b"PAR1 not really", "bad.parquet: not a readable Parquet file"),
    ],
)
def test_bad_inputs_name_the_file(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError, match=re.escape(needle)):
        list(documents([path], "text"))


def test_too_little_text_and_missing_column(tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("hardly anything")
    with pytest.raises(DataError, match=r"too few tokens"):
        _prepare([tiny], tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["x"]}), table)
    with pytest.raises(DataError, match=r"t.parquet: no column 'text'"):
        list(documents([table], "text"))


@pytest.fixture
def dataset(tmp_path):
    pins = _prepare([_texts(tmp_path)], tmp_path / "ds")
    return tmp_path / "ds", pins


def test_dataset_refuses_what_the_run_did_not_pin(dataset):
    folder, pins = dataset
    with pytest.raises(DataError, match=r"manifest.json: sha256 .* is not the run's data manifest"):
        Dataset(folder, "00" * 32, pins.tokenizer_hash)
    with pytest.raises(DataError, match=r"tokenizer.json: sha256 .* is not the run's tokenizer"):
        Dataset(folder, pins.manifest_hash, "00" * 32)


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove"])
def test_damaged_shards_are_refused_on_first_use(dataset, damage):
    folder, pins = dataset
    data = Dataset(folder, pins.manifest_hash, pins.tokenizer_hash)
    shard = folder / data.manifest.shards[1].file
    raw = shard.read_bytes()
    if damage == "truncate":
        shard.write_bytes(raw[:-2])
        needle = "bytes; the manifest says"
    elif damage == "flip":
        shard.write_bytes(bytes([raw[0] ^ 1]) + raw[1:])
        needle = "is not the run's shard"
    else:
        shard.unlink()
        needle = "shard missing"
    data.batch((0,), 1, 0, 2, 8)  # an intact shard still reads
    with pytest.raises(DataError, match=rf"{shard.name}: .*{needle}|{needle}"):
        data.batch((1,), 1, 0, 2, 8)


def test_token_ids_beyond_the_vocabulary_are_refused(dataset):
    folder, _ = dataset
    manifest = read_manifest(folder / MANIFEST)
    entry = manifest.shards[0]
    tokens = np.fromfile(folder / entry.file, dtype="<u2")
    tokens[5] = manifest.vocab_size  # one past the last id
    tokens.tofile(folder / entry.file)
    shards = [entry.model_copy(update={"sha256": file_sha256(folder / entry.file)}),
              *manifest.shards[1:]]  # fmt: skip
    (folder / MANIFEST).write_bytes(manifest.model_copy(update={"shards": shards}).to_bytes())
    data = Dataset(folder, file_sha256(folder / MANIFEST), manifest.tokenizer_sha256)
    with pytest.raises(DataError, match=rf"{entry.file}: token id {manifest.vocab_size} is not"):
        data.batch((0,), 1, 0, 2, 8)


def test_find_dataset_picks_the_run_s_by_hash(dataset, tmp_path):
    folder, pins = dataset
    shipped, shipped_pins = shipped_data()
    found = find_dataset([shipped.root, tmp_path], pins.manifest_hash, pins.tokenizer_hash)
    assert found.root == folder
    found = find_dataset([tmp_path, shipped.root], shipped_pins.manifest_hash,
                         shipped_pins.tokenizer_hash)  # fmt: skip
    assert found.root == shipped.root
    with pytest.raises(DataError, match=r"no dataset in .* has the run's manifest"):
        find_dataset([shipped.root, tmp_path], "00" * 32, pins.tokenizer_hash)
    with pytest.raises(DataError, match=r"larger than the model's vocab_size 256"):
        found.check_vocab(256)


def test_manifest_schema_errors_name_the_field(dataset):
    folder, _ = dataset
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["shards"][0]["file"] = "../../etc/passwd"
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"manifest.json: shards.0.file: String should match"):
        read_manifest(folder / MANIFEST)
    with pytest.raises(DataError, match=r"shards.0.file"):
        pins_of(folder)  # a folder's pins are read through the same check


def test_data_prepare_cli(tmp_path):
    texts = _texts(tmp_path)
    cli = [sys.executable, "-m", "dilochain.cli.main", "data", "prepare"]
    sizes = ["--vocab-size", "320", "--shard-tokens", "2048", "--heldout-tokens", "1024"]
    ok = subprocess.run([*cli, "--input", str(texts), "--out", str(tmp_path / "out"), *sizes],
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    pins = pins_of(tmp_path / "out")
    assert pins.manifest_hash in ok.stdout and pins.tokenizer_hash in ok.stdout
    assert pins == _prepare([texts], tmp_path / "api")  # the CLI writes what the API writes
    again = subprocess.run([*cli, "--input", str(texts), "--out", str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.startswith("error: ") and "exists and is not empty" in again.stderr
    # Without sizes a small corpus holds out about 5% of itself, not the 2^20 tokens a large
    # one would (which failed any input under ~4 MB).
    auto = [*cli, "--input", str(texts), "--out", str(tmp_path / "auto"), "--vocab-size", "320"]
    small = subprocess.run(auto, capture_output=True, text=True, timeout=120)
    assert small.returncode == 0, small.stderr
    size = sum(p.stat().st_size for p in texts.iterdir())
    assert read_manifest(tmp_path / "auto" / MANIFEST).heldout.tokens == max(1024, size // 80)
    out = tmp_path / "json"  # the same input and sizes: the same pins, as JSON
    as_json = subprocess.run([*cli, "--input", str(texts), "--out", str(out), *sizes, "--output",
                              "json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    manifest = read_manifest(out / MANIFEST)
    assert json.loads(as_json.stdout) == {
        "out": str(out), "shards": len(manifest.shards),
        "training_tokens": sum(s.tokens for s in manifest.shards), "heldout_tokens": 1024,
        "data_manifest_hash": pins.manifest_hash, "tokenizer_hash": pins.tokenizer_hash,
        "vocab_size": pins.vocab_size,
    }  # fmt: skip


def test_hostile_inputs_to_prepare_are_one_line_errors(tmp_path):
    """JSON nested past the recursion limit, an --out that is a file, a tokenizer whose ids lie
    outside its vocabulary (they would wrap around in the shards' dtype)."""
    texts = _texts(tmp_path)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep\.jsonl:1: JSON nested too deeply"):
        list(documents([deep], "text"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="exists and is not a folder"):
        _prepare([texts], tmp_path / "file")
    sparse = tmp_path / "sparse.json"
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.save(str(sparse))
    doc = json.loads(sparse.read_text())
    doc["model"]["vocab"]["the"] = 70_000  # past uint16, in a vocabulary of 2
    sparse.write_text(json.dumps(doc))
    with pytest.raises(DataError, match="token id 70000, outside its vocabulary of 2"):
        _prepare([texts], tmp_path / "sparse", tokenizer=sparse)


def test_a_dataset_fetched_by_hash_arrives_lazily_and_checked(dataset, tmp_path):
    source, pins = dataset
    by_hash = {file_sha256(p): p.read_bytes() for p in source.iterdir()}
    asked: list[str] = []

    def fetch(digest: str, limit: int, out) -> None:
        asked.append(digest)
        if digest not in by_hash:
            raise DataUnavailable(f"{digest[:8]} is on no peer")
        assert len(by_hash[digest]) <= limit
        out.write(by_hash[digest])

    data = Dataset(tmp_path / "fetched", pins.manifest_hash, pins.tokenizer_hash, fetch)
    assert asked == [pins.manifest_hash, pins.tokenizer_hash]  # the shards come when used
    local = Dataset(source, pins.manifest_hash, pins.tokenizer_hash)
    assert torch.equal(data.batch((1,), 7, 3, 4, 16), local.batch((1,), 7, 3, 4, 16))
    assert asked[2:] == [data.manifest.shards[1].sha256]
    assert {p.name for p, _ in data.files()} == {MANIFEST, TOKENIZER, data.manifest.shards[1].file}
    # A shard no peer serves is tried again later; one that arrives corrupt stays refused.
    missing = data.manifest.shards[0]
    served = by_hash.pop(missing.sha256)
    for _ in range(2):
        with pytest.raises(DataUnavailable):
            data.prefetch((0,))
    by_hash[missing.sha256] = served[:-2] + b"\x00\x00"
    with pytest.raises(DataError, match="is not the run's shard"):
        data.prefetch((0,))
    by_hash[missing.sha256] = served
    with pytest.raises(DataError, match="is not the run's shard"):  # no re-hash, no re-fetch
        data.prefetch((0,))
    assert asked.count(missing.sha256) == 3


def test_two_fetches_of_one_dataset_at_once_both_arrive_whole(dataset, tmp_path):
    """A verifier's screens and replays of a run may fetch its dataset at the same moment:
    each fetch streams into a file of its own, so neither truncates or interleaves the
    other's bytes (both once wrote one ``.manifest.json.part``, and the loser's check failed
    the run for good)."""
    source, pins = dataset
    by_hash = {file_sha256(p): p.read_bytes() for p in source.iterdir()}
    both = threading.Barrier(2)

    def fetch(digest: str, limit: int, out) -> None:
        out.truncate(0)  # as a peer fetch does before each attempt
        data = by_hash[digest]
        for i in range(0, len(data), max(1, len(data) // 4)):
            both.wait(timeout=10)  # the two fetches write in step
            out.write(data[i : i + max(1, len(data) // 4)])
            out.flush()

    made, failed = [], []

    def load() -> None:
        try:
            made.append(Dataset(tmp_path / "d", pins.manifest_hash, pins.tokenizer_hash, fetch))
        except Exception as err:  # the test reports it
            failed.append(err)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failed and len(made) == 2, failed
    assert file_sha256(tmp_path / "d" / MANIFEST) == pins.manifest_hash
    assert not [p for p in (tmp_path / "d").iterdir() if p.name.endswith(".part")]


def test_sizes_a_manifest_declares_are_bounded_before_anything_is_fetched(dataset, tmp_path):
    """A manifest is a stranger's file: a shard of 2^40 tokens (whose fetch limit would follow
    it) or a million shards is refused as it is read, not fetched."""
    import json as json_module

    from dilochain.training.manifest import MAX_SHARD_TOKENS, MAX_SHARDS, read_manifest

    source, _ = dataset
    honest = json_module.loads((source / MANIFEST).read_text())
    huge = {**honest, "shards": [{**honest["shards"][0], "tokens": 1 << 40}]}
    many = {**honest, "shards": honest["shards"][:1] * (MAX_SHARDS + 1)}
    for bad, what in ((huge, str(MAX_SHARD_TOKENS)), (many, str(MAX_SHARDS))):
        path = tmp_path / "manifest.json"
        path.write_text(json_module.dumps(bad))
        with pytest.raises(DataError, match=what):
            read_manifest(path)


def test_a_shard_that_arrives_at_a_drip_holds_no_other_file_of_the_run(dataset, tmp_path):
    """A host serving one shard slowly held the dataset's one lock for the whole fetch: every
    screen and replay of the run waited, on files checked long before. A fetch now holds its
    own file's lock alone."""
    source, pins = dataset
    by_hash = {file_sha256(p): p.read_bytes() for p in source.iterdir()}
    fetching, release = threading.Event(), threading.Event()
    slow = {}

    def fetch(digest: str, limit: int, out) -> None:
        if digest == slow.get("shard"):
            fetching.set()
            assert release.wait(30)
        out.write(by_hash[digest])

    data = Dataset(tmp_path / "fetched", pins.manifest_hash, pins.tokenizer_hash, fetch)
    data.prefetch((1,))  # shard 1 and the held-out shard: here and checked
    slow["shard"] = data.manifest.shards[0].sha256
    dripping = threading.Thread(target=data.prefetch, args=((0,),))
    dripping.start()
    try:
        assert fetching.wait(30)
        read = []
        reader = threading.Thread(
            target=lambda: read.append(
                (data.heldout_sample(3, 2, 16).shape, data.batch((1,), 7, 3, 4, 16).shape[0])
            )
        )
        reader.start()
        reader.join(20)
        assert read == [((2, 17), 4)]  # read while shard 0 still arrives
    finally:
        release.set()
        dripping.join(30)
    assert data.batch((0,), 7, 3, 4, 16).shape[0] == 4
