#!/usr/bin/env python3
"""Regenerates the EmbeddingGemma fidelity gold in testdata/embed/.

    /opt/pyref/bin/python testdata/embed/make_gold.py \
        [--llama-bin DIR] [--models DIR] [--only llama|llama-fa-off|llama-avx512|torch]
        [--threads N]

* llama.cpp: for every model file in FILES and every text in texts.json, one
  `llama-embedding` process on that text alone (command line below), and one
  `llama-tokenize` for its token ids; the quantized files once more with
  flash attention off (`<source>-fa-off`), llama.cpp's own spread.
* `--only llama-avx512`: the quantized files again with flash attention on,
  from a llama.cpp built with GGML_NATIVE on an AVX-512 machine
  (`<source>-avx512`): the same commit and command, another build, to measure
  how far llama.cpp's output moves between its own x86 builds.
* PyTorch: sentence-transformers on the original checkpoint
  (MODELS/embeddinggemma-300m), float32, each text encoded alone.

Writes `<source>.f32` (n_texts x 768 little-endian f32, in texts.json order)
and `gold.json` (the index: sources, commands, versions, token ids). The
texts are embedded as `prefix + text`, exactly as `lamina embed --task` does.
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
LLAMA_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
DEFAULT_BIN = "/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"
FILES = ["F32", "Q8_0", "Q6_K", "Q4_K_M"]
DIM = 768
# A separator that never occurs in a text, so texts with newlines stay whole.
SEP = "<#lamina-no-split#>"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def embed_cmd(bin_dir, model, threads, fa="on"):
    # llama-embedding defaults for this GGUF: pooling from the file (mean),
    # the dense_2/dense_3 head (applied inside the graph whenever embeddings are
    # on), L2 normalisation (--embd-normalize 2). They are passed explicitly.
    return [
        os.path.join(bin_dir, "llama-embedding"),
        "-m", model,
        "--pooling", "mean",
        "--embd-normalize", "2",
        "--embd-output-format", "array",
        "--embd-separator", SEP,
        "--no-escape",
        "-fa", fa,
        "-t", str(threads),
        "-p",  # the text follows as its own argument
    ]


def tokenize_cmd(bin_dir, model, prompt_file):
    return [
        os.path.join(bin_dir, "llama-tokenize"),
        "-m", model, "-f", prompt_file,
        "--no-escape", "--ids", "--log-disable",
    ]


def write_f32(path, vectors):
    with open(path, "wb") as f:
        for v in vectors:
            assert len(v) == DIM, len(v)
            f.write(struct.pack(f"<{DIM}f", *v))


def run_llama(texts, bin_dir, models, threads, gold, fa="on", suffix=""):
    # The reference runs with flash attention on (what `auto` picks on a CPU);
    # the quantized files are also run with it off, to measure llama.cpp's own
    # spread between its two attention paths.
    if suffix == "-avx512":
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        assert "avx512f" in flags and "avx512_vnni" in flags, "needs an AVX-512 VNNI machine"
    ids_done = fa != "on" or suffix != ""
    for name in FILES if fa == "on" and suffix == "" else FILES[1:]:
        model = os.path.join(models, f"embeddinggemma-300m-{name}.gguf")
        vectors = []
        for t in texts:
            full = t["prefix"] + t["text"]
            out = subprocess.run(
                embed_cmd(bin_dir, model, threads, fa) + [full],
                check=True, capture_output=True,
            ).stdout.decode()
            arr = json.loads(out.strip())
            assert len(arr) == 1, f"{t['id']}: {len(arr)} vectors"
            vectors.append(arr[0])
            if not ids_done:
                with tempfile.NamedTemporaryFile("wb", delete=False) as f:
                    f.write(full.encode())
                tok = subprocess.run(
                    tokenize_cmd(bin_dir, model, f.name), check=True, capture_output=True
                ).stdout.decode()
                os.unlink(f.name)
                t["llama_ids"] = json.loads(tok)
            print(f"llama.cpp {name} fa {fa} {t['id']}", file=sys.stderr)
        ids_done = True
        src = f"llamacpp-{name}" + ("" if fa == "on" else "-fa-off") + suffix
        write_f32(os.path.join(HERE, f"{src}.f32"), vectors)
        gold["sources"][src] = {
            "file": f"embeddinggemma-300m-{name}.gguf",
            "sha256": sha256(model),
            "command": " ".join(["llama-embedding"] + embed_cmd(bin_dir, "MODEL", threads, fa)[1:])
            + " TEXT",
        }
        if suffix == "-avx512":
            cpu = next(
                (l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model name")),
                platform.machine(),
            )
            gold["sources"][src]["build"] = (
                "the same commit and CMake flags, built on an AVX-512 VNNI machine "
                f"({cpu}); the other llamacpp-* sources came from an AVX2 build"
            )
    if fa == "on" and suffix == "":
        gold["llama_ids"] = [t.pop("llama_ids") for t in texts]


def run_torch(texts, models, gold):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(os.cpu_count() or 1)
    path = os.path.join(models, "embeddinggemma-300m")
    st = SentenceTransformer(path, device="cpu", model_kwargs={"dtype": torch.float32})
    vectors, ids = [], []
    for t in texts:
        full = t["prefix"] + t["text"]
        with torch.no_grad():
            v = st.encode([full], convert_to_numpy=True, normalize_embeddings=False)[0]
        vectors.append([float(x) for x in v])
        ids.append([int(i) for i in st.tokenize([full])["input_ids"][0]])
        print(f"pytorch {t['id']}", file=sys.stderr)
    write_f32(os.path.join(HERE, "pytorch-F32.f32"), vectors)
    gold["sources"]["pytorch-F32"] = {
        "file": "embeddinggemma-300m (Hugging Face checkpoint, model.safetensors F32)",
        "sha256": sha256(os.path.join(path, "model.safetensors")),
        "command": "SentenceTransformer(path, device='cpu', model_kwargs={'dtype': torch.float32})"
        ".encode([prefix + text], normalize_embeddings=False)  # pipeline ends in Normalize()",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
        "modules": [type(m).__name__ for m in st],
    }
    gold["hf_ids"] = ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", default=DEFAULT_BIN)
    ap.add_argument(
        "--models",
        default=os.environ.get("LAMINA_MODELS", os.path.expanduser("~/.cache/lamina/models")),
    )
    ap.add_argument("--only", choices=["llama", "llama-fa-off", "llama-avx512", "torch"])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    with open(os.path.join(HERE, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    gold_path = os.path.join(HERE, "gold.json")
    gold = {}
    if os.path.exists(gold_path):
        with open(gold_path, encoding="utf-8") as f:
            gold = json.load(f)
    gold.update({
        "generator": "testdata/embed/make_gold.py",
        "llama_cpp_commit": LLAMA_COMMIT,
        "dim": DIM,
        "ids": [t["id"] for t in texts],
    })
    gold.setdefault("sources", {})
    if a.only in (None, "llama"):
        run_llama(texts, a.llama_bin, a.models, a.threads, gold)
    if a.only in (None, "llama-fa-off"):
        run_llama(texts, a.llama_bin, a.models, a.threads, gold, fa="off")
    if a.only == "llama-avx512":
        run_llama(texts, a.llama_bin, a.models, a.threads, gold, suffix="-avx512")
    if a.only in (None, "torch"):
        run_torch(texts, a.models, gold)
    with open(gold_path, "w", encoding="utf-8") as f:
        json.dump(gold, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
