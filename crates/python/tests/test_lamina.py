"""The `lamina` Python package against the `lamina` CLI, on the project's
models (`cargo xtask models`). Run by `cargo xtask test` after it builds the
wheel into a fresh venv (see xtask/src/wheel.rs), with:

  LAMINA_MODELS  the models directory
  LAMINA_BIN     the lamina CLI built from the same tree
"""

import json
import os
import subprocess
import threading

import numpy as np
import pytest

import lamina

BIN = os.environ["LAMINA_BIN"]
MINILM = "all-MiniLM-L6-v2-Q8_0"
GEMMA = "embeddinggemma-300m-Q8_0"
SMOL = "SmolLM2-135M-Instruct-Q8_0"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "Déjà vu: naïve café — 日本語 🦀",
    "a",
]


def cli(*args):
    out = subprocess.run([BIN, *args, "--threads", "2"], check=True, capture_output=True, text=True)
    return out.stdout


def cli_vectors(model, texts, *flags):
    lines = cli("embed", "-m", model, "--json", *flags, *texts).splitlines()
    return np.array([json.loads(l)["embedding"] for l in lines], dtype=np.float32)


@pytest.fixture(scope="module")
def minilm():
    return lamina.Embedder(MINILM, threads=2)


@pytest.fixture(scope="module")
def smol():
    return lamina.Generator(SMOL, threads=2, ctx=1024)


def test_vectors_are_the_clis(minilm):
    got = minilm.encode(TEXTS, batch_size=3)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), minilm.dim) == (4, 384)
    assert np.array_equal(got, cli_vectors(MINILM, TEXTS))
    one = minilm.encode(TEXTS[1])
    assert one.shape == (384,) and np.array_equal(one, got[1])
    assert abs(np.linalg.norm(one) - 1) < 1e-6


def test_tasks_and_matryoshka_are_the_clis():
    e = lamina.Embedder(GEMMA, threads=2)
    assert ("query", "task: search result | query: ") in e.tasks
    got = e.encode(TEXTS[:2], task="query", dim=256)
    assert got.shape == (2, 256)
    assert np.array_equal(got, cli_vectors(GEMMA, TEXTS[:2], "--task", "query", "--dim", "256"))
    assert np.array_equal(got, e.encode(TEXTS[:2], prompt_name="query", dim=256))


def test_unnormalized_vectors_point_the_same_way(minilm):
    raw = minilm.encode(TEXTS, normalize=False)
    unit = minilm.encode(TEXTS)
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1) > 1e-3)
    assert np.allclose(raw / norms[:, None], unit, atol=1e-6)


def test_greedy_and_seeded_text_is_the_clis(smol):
    prompt = "The capital of France is"
    got = smol.generate(prompt, max_tokens=24, temperature=0)
    want = json.loads(cli("generate", "-m", SMOL, "-p", prompt, "-n", "24", "--temp", "0", "--json", "-c", "1024"))
    assert got == want["text"] and got
    got = smol.generate(prompt, max_tokens=24, temperature=0.9, seed=7)
    want = json.loads(cli("generate", "-m", SMOL, "-p", prompt, "-n", "24", "--temp", "0.9", "-s", "7", "--json", "-c", "1024"))
    assert got == want["text"]


def test_streams_are_the_whole_text(smol):
    prompt = "Once upon a time"
    whole = smol.generate(prompt, max_tokens=20, temperature=0)
    pieces = list(smol.stream(prompt, max_tokens=20, temperature=0))
    assert len(pieces) > 1 and "".join(pieces) == whole
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    reply = smol.chat(msgs, max_tokens=16, temperature=0)
    assert "Paris" in reply
    assert "".join(smol.chat(msgs, max_tokens=16, temperature=0, stream=True)) == reply
    # A stream dropped early stops its generation; the generator goes on.
    s = smol.stream(prompt, max_tokens=200, temperature=0)
    next(s)
    del s
    assert smol.generate(prompt, max_tokens=20, temperature=0) == whole
    # A call while a stream is unread waits for its generation, not for
    # the reader; the stream can still be read afterwards.
    s = smol.stream(prompt, max_tokens=20, temperature=0)
    assert smol.generate(prompt, max_tokens=20, temperature=0) == whole
    assert "".join(s) == whole


def test_stop_strings_and_tokens(smol):
    text = smol.generate("1, 2, 3, 4,", max_tokens=20, temperature=0, stop=[" 7"])
    assert " 7" not in text and "6" in text
    ids = smol.tokenize("Hello world")
    assert smol.detokenize(ids) == "Hello world" and ids
    assert smol.n_ctx == 1024


def test_errors_are_python_exceptions(minilm, smol):
    with pytest.raises(FileNotFoundError, match="not found"):
        lamina.Embedder("no-such-model")
    with pytest.raises(ValueError, match="embedding model"):
        lamina.Generator(MINILM)
    with pytest.raises(RuntimeError, match="not an embedding model|embedding"):
        lamina.Embedder(SMOL)
    with pytest.raises(ValueError, match="dim"):
        minilm.encode(TEXTS, dim=1000)
    with pytest.raises(ValueError, match="context"):
        minilm.encode("word " * 1000)
    assert minilm.encode("word " * 1000, truncate=True).shape == (384,)
    with pytest.raises(ValueError, match="string"):
        minilm.encode([1, 2])
    with pytest.raises(ValueError, match="temperature"):
        smol.generate("hi", temperature=-1)
    with pytest.raises(ValueError, match="context"):
        smol.generate("word " * 2000)
    with pytest.raises(ValueError, match="role"):
        smol.chat([{"content": "hi"}])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        smol.detokenize([10**9])


def test_one_object_serves_many_threads(minilm, smol):
    want = minilm.encode(TEXTS)
    texts = {i: smol.generate(f"Number {i}:", max_tokens=8, temperature=0) for i in range(4)}
    errors = []

    def work(i):
        try:
            for _ in range(3):
                assert np.array_equal(minilm.encode(TEXTS), want)
                assert smol.generate(f"Number {i}:", max_tokens=8, temperature=0) == texts[i]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_hub_names_resolve_from_the_hugging_face_cache(tmp_path, monkeypatch):
    # A cache laid out as huggingface_hub lays it out: refs/main names the
    # commit, snapshots/<commit>/<file> links to blobs/<sha256>.
    src = os.path.join(os.environ["LAMINA_MODELS"], MINILM + ".gguf")
    repo = tmp_path / "hub" / "models--test-org--MiniLM-GGUF"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    blob = repo / "blobs" / ("a" * 64)
    os.symlink(src, blob)
    os.symlink(os.path.relpath(blob, snap), snap / "all-MiniLM-L6-v2-Q8_0.gguf")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    by_name = lamina.Embedder("hf://test-org/MiniLM-GGUF:Q8_0", threads=2)
    np.testing.assert_array_equal(by_name.encode(TEXTS), cli_vectors(MINILM, TEXTS))
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        lamina.Embedder("hf://test-org/MiniLM-GGUF:F16")
    with pytest.raises(ValueError, match="ORG/REPO"):
        lamina.Embedder("hf://no-slash")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ConnectionError, match="could not reach"):
        lamina.Generator("hf://test-org/absent")
