#!/usr/bin/env python3
"""The quality cost of a quantized KV cache: teacher-forced top-1 agreement
with an f16 cache, beside f16's own agreement with an f32 cache.

    python3 xtask/src/bench/kv_quality.py target/release/lamina MODEL [MODEL...]

For each model and each prompt of testdata/generate/prompts/, runs
`lamina logits --top 1 --step-from 1` (every token after the first decoded
one at a time, so attention reads the cache as generation does) with
caches of f32, f16, q8_0, and q8_0 keys with f16 values, and prints, for
f16 against f32 and each q8_0 cache against f16, the share of positions
whose top token agrees and the largest gap between the two runs' top logits.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = os.path.join(HERE, "../../../testdata/generate/prompts")


# Each cache: its `lamina logits` flags.
CACHES = {
    "f32": ["--kv-type", "f32"],
    "f16": ["--kv-type", "f16"],
    "q8_0": ["--kv-type", "q8_0"],
    "q8_0 keys": ["--cache-type-k", "q8_0", "--cache-type-v", "f16"],
}
PAIRS = (("f16", "f32"), ("q8_0", "f16"), ("q8_0 keys", "f16"))


def top(lamina, model, text, flags):
    out = subprocess.run(
        [lamina, "logits", "-m", model, "--prompt", text, "--top", "1", "--step-from", "1",
         *flags, "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [row[0] for row in json.loads(out)["top"]]


def compare(a, b):
    same = sum(x[0] == y[0] for x, y in zip(a, b))
    gap = max(abs(x[1] - y[1]) for x, y in zip(a, b))
    return same, gap


def main():
    lamina, models = sys.argv[1], sys.argv[2:]
    for model in models:
        name = os.path.basename(model)
        sums = {f"{a} vs {b}": [0, 0, 0.0] for a, b in PAIRS}
        for prompt in sorted(os.listdir(PROMPTS)):
            text = open(os.path.join(PROMPTS, prompt), encoding="utf-8").read()
            runs = {kv: top(lamina, model, text, flags) for kv, flags in CACHES.items()}
            for a, b in PAIRS:
                pair = f"{a} vs {b}"
                same, gap = compare(runs[a], runs[b])
                s = sums[pair]
                s[0] += same
                s[1] += len(runs[a])
                s[2] = max(s[2], gap)
                print(f"{name} {prompt} {pair}: {same}/{len(runs[a])} top-1 agree")
        for pair, (same, total, gap) in sums.items():
            print(f"{name} {pair}: top-1 agreement {same}/{total} = {100 * same / total:.2f} %, "
                  f"largest top-logit gap {gap:.3f}")


if __name__ == "__main__":
    main()
