#!/usr/bin/env python3
"""Writes testdata/quant/gold_ref_c.json: the output of ggml's own C reference
quantizers (quantize_row_*_ref from ggml-quants.c), run through ref_harness.c,
for every block type, including those gguf-py cannot encode (Q8_1, K-quants).

Usage: python3 testdata/quant/make_gold_c.py PATH/TO/ref_harness
(build the harness as README.md describes; gold.json must exist: its inputs are reused).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]


def main():
    harness = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "gold.json")) as f:
        base = json.load(f)
    inputs = {k: np.frombuffer(bytes.fromhex(v), dtype="<f4") for k, v in base["inputs"].items()}
    rng = np.random.default_rng(1234)
    n = 16 * 256
    # Shapes on which FMA-contracted builds of ggml disagree most often.
    inputs["outliers"] = np.where(
        rng.random(n) < 0.01, rng.standard_normal(n) * 2, rng.standard_normal(n) * 0.02
    ).astype("<f4")
    inputs["sparse"] = np.where(rng.random(n) < 0.9, 0, rng.standard_normal(n)).astype("<f4")
    gold = {
        "generator": "testdata/quant/make_gold_c.py + ref_harness.c",
        "ggml_source": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/ggml/src/ggml-quants.c",
        "inputs": {k: v.tobytes().hex() for k, v in inputs.items()},
        "quant": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, x in inputs.items():
            path = os.path.join(tmp, name + ".f32")
            x.tofile(path)
            for t in TYPES:
                out = subprocess.run([harness, t, path], check=True, capture_output=True).stdout
                gold["quant"].append({"input": name, "type": t, "bytes": out.hex()})
    with open(os.path.join(here, "gold_ref_c.json"), "w") as f:
        json.dump(gold, f, indent=1)
        f.write("\n")
    print(f"wrote gold_ref_c.json: {len(gold['quant'])} cases")


if __name__ == "__main__":
    main()
