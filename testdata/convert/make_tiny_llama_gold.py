#!/usr/bin/env python3
"""Gold for crates/model/tests/convert.rs `tiny_llama_permutes_q_and_k`.

Rebuilds the test's tiny Llama checkpoint values (the same xorshift generator,
the same tensors in the same order) and applies llama.cpp's own Q/K
permutation to them: `LlamaModel.permute` is read out of the converter
(`convert_hf_to_gguf.py`'s `conversion/llama.py`) and executed as written,
with the arguments its `LlamaModel.modify_tensors` passes (`n_head, n_head`
for q_proj, `n_head, n_kv_head` for k_proj). The converter module itself is
not imported: it needs torch, and `permute` only reshapes and swaps axes,
which numpy does the same way.

Writes, per permuted tensor, the SHA-256 of the source (so a changed
checkpoint is told apart from a changed permutation) and of the permuted
little-endian f32 bytes.

Usage (numpy in the interpreter; LLAMA_CPP is llama.cpp's source folder,
`vendor/llama.cpp` of the llama-cpp-python 0.3.36 source package):
    python3 testdata/convert/make_tiny_llama_gold.py \
        LLAMA_CPP testdata/convert/tiny-llama-qk.gold.json
"""

import ast
import hashlib
import json
import os
import sys

import numpy as np

HIDDEN, FF, LAYERS, HEADS, KV, VOCAB = 16, 24, 2, 4, 2, 10
HEAD_DIM = HIDDEN // HEADS
MASK = (1 << 64) - 1


def tensors():
    """The test's tensors, in the order it draws their values."""
    out = [("model.embed_tokens.weight", (VOCAB, HIDDEN)), ("model.norm.weight", (HIDDEN,))]
    for layer in range(LAYERS):
        for name, shape in [
            ("input_layernorm.weight", (HIDDEN,)),
            ("post_attention_layernorm.weight", (HIDDEN,)),
            ("self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN)),
            ("self_attn.k_proj.weight", (KV * HEAD_DIM, HIDDEN)),
            ("self_attn.v_proj.weight", (KV * HEAD_DIM, HIDDEN)),
            ("self_attn.o_proj.weight", (HIDDEN, HIDDEN)),
            ("mlp.gate_proj.weight", (FF, HIDDEN)),
            ("mlp.up_proj.weight", (FF, HIDDEN)),
            ("mlp.down_proj.weight", (HIDDEN, FF)),
        ]:
            out.append((f"model.layers.{layer}.{name}", shape))
    return out


def values():
    """The test's `Rng` (xorshift64, seed 0x9e3779b97f4a7c15), f32 values."""
    state = 0x9E3779B97F4A7C15
    result = {}
    for name, shape in tensors():
        n = int(np.prod(shape))
        vals = np.empty(n, dtype=np.float32)
        for i in range(n):
            state ^= (state << 13) & MASK
            state ^= state >> 7
            state ^= (state << 17) & MASK
            vals[i] = np.float32(state >> 40) / np.float32(1 << 24) - np.float32(0.5)
        result[name] = vals.reshape(shape)
    return result


def converter_source(llama_cpp):
    """The file defining the converter's `LlamaModel`."""
    for rel in ["conversion/llama.py", "convert_hf_to_gguf.py"]:
        path = os.path.join(llama_cpp, rel)
        if os.path.isfile(path) and "class LlamaModel" in open(path, encoding="utf-8").read():
            return path, rel
    sys.exit(f"{llama_cpp}: no LlamaModel in conversion/llama.py or convert_hf_to_gguf.py")


def converter_permute(path):
    """`LlamaModel.permute` from the converter, compiled as written."""
    source = open(path, encoding="utf-8").read()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "LlamaModel":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "permute":
                    fn.decorator_list = []
                    module = ast.Module(body=[fn], type_ignores=[])
                    scope = {"Tensor": np.ndarray}
                    exec(compile(module, path, "exec"), scope)
                    return scope["permute"], ast.get_source_segment(source, fn)
    sys.exit(f"{path}: no LlamaModel.permute")


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def main():
    converter, rel = converter_source(sys.argv[1])
    out_path = sys.argv[2]
    permute, permute_src = converter_permute(converter)
    vals = values()
    gold = {
        "generator": "testdata/convert/make_tiny_llama_gold.py",
        "converter": f"llama.cpp {rel} (llama-cpp-python 0.3.36, commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f)",
        "converter_sha256": hashlib.sha256(open(converter, "rb").read()).hexdigest(),
        "permute": permute_src,
        "numpy": np.__version__,
        "tensors": [],
    }
    for layer in range(LAYERS):
        for short, hf, n_head_kv in [("attn_q", "q_proj", HEADS), ("attn_k", "k_proj", KV)]:
            src = vals[f"model.layers.{layer}.self_attn.{hf}.weight"]
            # As LlamaModel.modify_tensors calls it.
            out = permute(src, HEADS, n_head_kv)
            gold["tensors"].append(
                {
                    "gguf": f"blk.{layer}.{short}.weight",
                    "hf": f"model.layers.{layer}.self_attn.{hf}.weight",
                    "shape": list(src.shape),
                    "source_sha256": sha(src),
                    "sha256": sha(out),
                }
            )
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(gold, f, indent=1)
        f.write("\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
