#!/usr/bin/env python3
"""Writes testdata/quant/gold.json: reference (de)quantization results from
gguf-py, llama.cpp's own Python port of ggml's block formats.

  (a) dequantizes a few blocks of named tensors of each type found in the
      real models, plus random (finite-scaled) blocks of every block type;
  (b) quantizes fixed pseudo-random f32 rows to every type gguf-py can encode.

All bytes and f32 bit patterns are stored as little-endian hex strings.
Usage: python3 testdata/quant/make_gold.py [MODELS_DIR]
(MODELS_DIR defaults to $LAMINA_MODELS, else ~/.cache/lamina/models.)
"""

import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

MODELS = [
    (
        "gemma-3-270m-Q4_K_M.gguf",
        [
            "blk.0.attn_output.weight",  # Q4_K
            "blk.5.ffn_up.weight",
            "blk.0.ffn_down.weight",  # Q6_K
            "blk.0.attn_k.weight",  # Q5_0
            "blk.0.attn_v.weight",  # Q8_0
            "output_norm.weight",  # F32
        ],
    ),
    (
        "SmolLM2-135M-Instruct-Q4_1.gguf",
        [
            "blk.0.ffn_down.weight",  # Q4_1
            "blk.7.attn_q.weight",
            "token_embd.weight",  # Q8_0
        ],
    ),
]

# Blocks taken from each tensor: the first few and a few from the middle.
N_HEAD_BLOCKS = 4
N_MID_BLOCKS = 4

BLOCK_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
# Byte offsets of the f16 scale fields of each block type: random bytes
# there are replaced by finite f16 values so no block decodes to inf/NaN.
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def hexs(a: np.ndarray) -> str:
    return np.ascontiguousarray(a).tobytes().hex()


def dequant_case(source, tensor, qtype, raw, block_offset):
    out = dequantize(raw, qtype).astype(np.float32, copy=False)
    return {
        "source": source,
        "tensor": tensor,
        "type": qtype.name,
        "block_offset": block_offset,
        "bytes": hexs(raw),
        "f32": hexs(out.reshape(-1)),
    }


def model_cases(models_dir):
    cases = []
    for fname, names in MODELS:
        path = os.path.join(models_dir, fname)
        reader = gguf.GGUFReader(path)
        by_name = {t.name: t for t in reader.tensors}
        for name in names:
            t = by_name[name]
            qtype = t.tensor_type
            bs, ts = gguf.GGML_QUANT_SIZES[qtype]
            data = np.frombuffer(bytes(t.data.reshape(-1).view(np.uint8)), dtype=np.uint8)
            n_blocks = len(data) // ts
            for start, count in [(0, N_HEAD_BLOCKS), (n_blocks // 2, N_MID_BLOCKS)]:
                raw = data[start * ts : (start + count) * ts].copy()
                cases.append(dequant_case(fname, name, qtype, raw, start))
    return cases


def random_cases(rng):
    cases = []
    for qtype in BLOCK_TYPES:
        bs, ts = gguf.GGML_QUANT_SIZES[qtype]
        n = 6
        raw = rng.integers(0, 256, size=(n, ts), dtype=np.uint8)
        for off in F16_FIELDS[qtype]:
            scale = (rng.standard_normal(n) * 0.01).astype(np.float16)
            raw[:, off : off + 2] = scale.view(np.uint8).reshape(n, 2)
        cases.append(dequant_case("random", "", qtype, raw.reshape(-1), 0))
    for qtype, dt in [(T.F16, np.float16), (T.BF16, np.uint16)]:
        vals = rng.integers(0, 1 << 16, size=512, dtype=np.uint16)
        if qtype == T.F16:
            vals = np.where((vals & 0x7C00) == 0x7C00, vals & 0x3FFF, vals)  # finite only
        cases.append(dequant_case("random", "", qtype, vals.view(np.uint8), 0))
    return cases


def inputs(rng):
    normal = (rng.standard_normal(4096) * 0.02).astype(np.float32)
    parts = []
    for i in range(16):  # sixteen 256-value chunks with different shapes
        kind = i % 8
        if kind == 0:
            p = np.zeros(256)
        elif kind == 1:
            p = np.full(256, 0.37)
        elif kind == 2:
            p = rng.standard_normal(256) * 300.0
        elif kind == 3:
            p = rng.standard_normal(256) * 3e-3
        elif kind == 4:
            p = rng.standard_normal(256) * 0.05
            p[rng.integers(0, 256, 5)] *= 40.0  # outliers
        elif kind == 5:
            p = rng.integers(-16, 17, 256) * 0.25  # exact ties for the roundings
        elif kind == 6:
            p = rng.uniform(0.1, 1.0, 256)  # all positive
        else:
            p = -rng.uniform(0.0, 2.0, 256)  # all negative
        parts.append(p)
    mixed = np.concatenate(parts).astype(np.float32)
    return {"normal": normal, "mixed": mixed}


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "LAMINA_MODELS", os.path.expanduser("~/.cache/lamina/models")
    )
    rng = np.random.default_rng(20240607)
    gold = {
        "generator": "testdata/quant/make_gold.py",
        "gguf_py_version": gguf.__version__ if hasattr(gguf, "__version__") else
        __import__("importlib.metadata").metadata.version("gguf"),
        "numpy_version": np.__version__,
        "dequant": model_cases(models_dir) + random_cases(rng),
        "inputs": {},
        "quant": [],
    }
    for name, x in inputs(rng).items():
        gold["inputs"][name] = hexs(x)
        for qtype in QUANTIZABLE:
            q = quantize(x, qtype)
            gold["quant"].append({"input": name, "type": qtype.name, "bytes": hexs(q.view(np.uint8))})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gold.json")
    with open(out, "w") as f:
        json.dump(gold, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(gold['dequant'])} dequant cases, {len(gold['quant'])} quant cases")


if __name__ == "__main__":
    main()
