#!/usr/bin/env python3
"""Regenerates the all-MiniLM-L6-v2 fidelity gold in testdata/embed/minilm/.

    python testdata/embed/minilm/make_gold.py \
        [--llama-bin DIR] [--llama-src DIR] [--models DIR] [--threads N] [--work DIR]

with sentence-transformers 5.1.2, transformers 4.57.6 and torch 2.11.0
installed (PINNED below; the script refuses other versions).

* PyTorch: sentence-transformers on the checkpoint folder
  MODELS/all-MiniLM-L6-v2 (`cargo xtask models` unpacks it), float32, each
  text encoded alone: `pytorch-F32` as sentence-transformers runs it
  (max_seq_length 256: longer texts are cut to their first 255 tokens plus
  [SEP]), and `pytorch-F32-full` with max_seq_length raised to 512, the
  whole text (what llama.cpp and lamina embed).
* llama.cpp: the GGUF files made by the pinned llama.cpp itself
  (`convert_hf_to_gguf.py --outtype f32` of the same folder, then
  `llama-quantize ... Q8_0`), one `llama-embedding` process per text, and
  `llama-tokenize` for its ids.

Writes `<source>.f32` (n_texts x 384 little-endian f32, texts.json order)
and `gold.json` (sources, commands, versions, SHA-256s, token ids).
"""

import argparse
import hashlib
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../../.."))
LLAMA_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
DEFAULT_SRC = os.path.join(ROOT, "target/llama.cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
DEFAULT_BIN = os.path.join(ROOT, "target/llama.cpp/build/bin")
DIM = 384
ST_MAX_SEQ = 256
# A separator that never occurs in a text, so texts with newlines stay whole.
SEP = "<#lamina-no-split#>"
PINNED = {"sentence_transformers": "5.1.2", "transformers": "4.57.6", "torch": "2.11.0"}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def embed_cmd(bin_dir, model, threads):
    # Pooling comes from the file (bert.pooling_type = 1, mean) and
    # --embd-normalize 2 is L2; both are written out anyway.
    return [
        os.path.join(bin_dir, "llama-embedding"),
        "-m", model,
        "--pooling", "mean",
        "--embd-normalize", "2",
        "--embd-output-format", "array",
        "--embd-separator", SEP,
        "--no-escape",
        "-fa", "on",
        "-t", str(threads),
        "-p",  # the text follows as its own argument
    ]


def write_f32(path, vectors):
    with open(path, "wb") as f:
        for v in vectors:
            assert len(v) == DIM, len(v)
            f.write(struct.pack(f"<{DIM}f", *v))


def make_gguf(src, bin_dir, folder, work):
    """The F32 and Q8_0 files as llama.cpp's own tools write them."""
    f32 = os.path.join(work, "all-MiniLM-L6-v2-F32.gguf")
    q8 = os.path.join(work, "all-MiniLM-L6-v2-Q8_0.gguf")
    subprocess.run(
        [sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), folder,
         "--outtype", "f32", "--outfile", f32],
        check=True, capture_output=True,
    )
    subprocess.run(
        [os.path.join(bin_dir, "llama-quantize"), f32, q8, "Q8_0", "2"],
        check=True, capture_output=True,
    )
    return {"F32": f32, "Q8_0": q8}


def embed_one(bin_dir, model, threads, t):
    """One text's llama-embedding output. On a loaded machine its output has
    been seen unparsable once in a few hundred runs (a value that is not a
    number): such a run is shown and repeated, at most twice."""
    for attempt in range(3):
        out = subprocess.run(
            embed_cmd(bin_dir, model, threads) + [t["text"]],
            check=True, capture_output=True,
        ).stdout.decode()
        try:
            return json.loads(out.strip())
        except json.JSONDecodeError as e:
            print(f"{t['id']}: unparsable llama-embedding output ({e}): {out.strip()[:4000]!r}",
                  file=sys.stderr)
    sys.exit(f"{t['id']}: llama-embedding gave unparsable output three times")


def run_llama(texts, bin_dir, files, threads, gold):
    for quant, model in files.items():
        vectors = []
        for t in texts:
            arr = embed_one(bin_dir, model, threads, t)
            assert len(arr) == 1, f"{t['id']}: {len(arr)} vectors"
            vectors.append(arr[0])
            if quant == "F32":
                with tempfile.NamedTemporaryFile("wb", delete=False) as f:
                    f.write(t["text"].encode())
                tok = subprocess.run(
                    [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", f.name,
                     "--no-escape", "--ids", "--log-disable"],
                    check=True, capture_output=True,
                ).stdout.decode()
                os.unlink(f.name)
                t["llama_ids"] = json.loads(tok)
            print(f"llama.cpp {quant} {t['id']}", file=sys.stderr)
        write_f32(os.path.join(HERE, f"llamacpp-{quant}.f32"), vectors)
        gold["sources"][f"llamacpp-{quant}"] = {
            "file": f"all-MiniLM-L6-v2-{quant}.gguf",
            "sha256": sha256(model),
            "made_by": "convert_hf_to_gguf.py MODELS/all-MiniLM-L6-v2 --outtype f32"
            + ("" if quant == "F32" else "; llama-quantize F32 Q8_0 Q8_0 2"),
            "command": " ".join(["llama-embedding"] + embed_cmd(bin_dir, "MODEL", threads)[1:])
            + " TEXT",
        }
    gold["llama_ids"] = [t.pop("llama_ids") for t in texts]


def run_torch(texts, folder, gold):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    versions = {
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    assert versions == PINNED, f"pinned {PINNED}, found {versions}"
    torch.set_num_threads(os.cpu_count() or 1)
    st = SentenceTransformer(folder, device="cpu", model_kwargs={"dtype": torch.float32})
    assert st.max_seq_length == ST_MAX_SEQ, st.max_seq_length
    for name, max_seq in [("pytorch-F32", ST_MAX_SEQ), ("pytorch-F32-full", 512)]:
        st.max_seq_length = max_seq
        vectors = []
        for t in texts:
            with torch.no_grad():
                v = st.encode([t["text"]], convert_to_numpy=True, normalize_embeddings=False)[0]
            vectors.append([float(x) for x in v])
            print(f"{name} {t['id']}", file=sys.stderr)
        write_f32(os.path.join(HERE, f"{name}.f32"), vectors)
        gold["sources"][name] = {
            "file": "all-MiniLM-L6-v2 (the checkpoint folder, model.safetensors F32)",
            "sha256": sha256(os.path.join(folder, "model.safetensors")),
            "command": "SentenceTransformer(path, device='cpu', model_kwargs={'dtype': torch.float32})"
            + ("" if max_seq == ST_MAX_SEQ else "; st.max_seq_length = 512")
            + ".encode([text], normalize_embeddings=False)  # the pipeline ends in Normalize()",
            "max_seq_length": max_seq,
            "versions": dict(versions, python=platform.python_version()),
            "modules": [type(m).__name__ for m in st],
        }
    st.max_seq_length = 512
    gold["hf_ids"] = [[int(i) for i in st.tokenize([t["text"]])["input_ids"][0]] for t in texts]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", default=DEFAULT_BIN)
    ap.add_argument("--llama-src", default=DEFAULT_SRC)
    ap.add_argument(
        "--models",
        default=os.environ.get("LAMINA_MODELS", os.path.expanduser("~/.cache/lamina/models")),
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", help="folder for llama.cpp's GGUF files (default: a temporary one)")
    a = ap.parse_args()

    folder = os.path.join(a.models, "all-MiniLM-L6-v2")
    with open(os.path.join(HERE, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    gold = {
        "generator": "testdata/embed/minilm/make_gold.py",
        "llama_cpp_commit": LLAMA_COMMIT,
        "dim": DIM,
        "st_max_seq_length": ST_MAX_SEQ,
        "ids": [t["id"] for t in texts],
        "sources": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        files = make_gguf(a.llama_src, a.llama_bin, folder, work)
        run_llama(texts, a.llama_bin, files, a.threads, gold)
    run_torch(texts, folder, gold)
    gold["llama_tokenizes_like_hf"] = [l == h for l, h in zip(gold["llama_ids"], gold["hf_ids"])]
    with open(os.path.join(HERE, "gold.json"), "w", encoding="utf-8") as f:
        json.dump(gold, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
