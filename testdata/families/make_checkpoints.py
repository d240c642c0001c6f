#!/usr/bin/env python3
"""Builds the family conformance checkpoints (see README.md).

Usage: python make_checkpoints.py [OUT_DIR]   (default /tmp/families)

1. Trains the shared SentencePiece model `tokenizer/tokenizer.model` from
   `tokenizer/train.txt` (one sentence a line: the strings of
   testdata/tokenizer/corpus.json as of this suite, then plain English; one
   thread, fixed options, so the same sentencepiece version gives the same bytes).
2. For each family folder (config.json, tokenizer_config.json): instantiates
   the transformers model from config.json to list its tensors, writes the
   manifest `weights.json` (seed, then each tensor's name, shape, scale, offset in order)
   and fills the tensors from the xorshift64 generator (the Rust twin is
   crates/model/tests/common/checkpoint.rs), recording each tensor's SHA-256.
3. Writes OUT_DIR/FAMILY/ (config.json, tokenizer.model, tokenizer_config.json,
   model.safetensors) and checks that transformers loads it with every weight
   from the file.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = ["llama3", "qwen2", "qwen3", "phi3", "phi3-longrope", "gemma2", "mistral", "granite"]
SEEDS = {f: 0x9E3779B97F4A7C15 ^ (i + 1) * 0x100000001B3 for i, f in enumerate(FAMILIES)}
# The special tokens of every family, as SentencePiece control symbols with
# fixed ids (3..) right after <unk>=0, <s>=1, </s>=2.
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<bos>", "<eos>", "<pad>",
    "<start_of_turn>", "<end_of_turn>", "<|end|>", "<|system|>",
]
VOCAB = 1024
MASK = (1 << 64) - 1


def train_tokenizer() -> None:
    import sentencepiece as spm

    with open(os.path.join(HERE, "tokenizer/train.txt"), "rb") as f:
        text = f.read()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        # Relative paths: the trainer records them in the model file.
        os.chdir(tmp)
        with open("train.txt", "wb") as f:
            f.write(text)
        spm.SentencePieceTrainer.train(
            input="train.txt", model_prefix="m", model_type="bpe", vocab_size=VOCAB,
            byte_fallback=True, character_coverage=1.0, num_threads=1, control_symbols=SPECIALS,
            split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
            normalization_rule_name="identity", shuffle_input_sentence=False, input_sentence_size=0,
            max_sentence_length=16384, minloglevel=2,
        )
        shutil.copy("m.model", os.path.join(HERE, "tokenizer/tokenizer.model"))
        os.chdir(cwd)


def xorshift_values(state: int, n: int) -> tuple[np.ndarray, int]:
    """n raw draws in [-1, 1) (f32, exact) and the generator's next state."""
    out = np.empty(n, dtype=np.uint32)
    x = state
    for i in range(n):
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        out[i] = x >> 40
    u = out.astype(np.float32) * np.float32(2.0**-24) * np.float32(2.0) - np.float32(1.0)
    return u, x


# Embedding scale per family: the input's size against the layers' outputs
# (Gemma multiplies it by sqrt(hidden), Granite by embedding_multiplier).
EMBED = {"gemma2": 0.0625, "granite": 0.0625}
# Gain of the projections that write into the residual stream (o_proj,
# down_proj): large enough that the layers, not the token's own embedding,
# decide the next token (Granite scales them by residual_multiplier); with
# tied embeddings the token's own row otherwise wins and greedy repeats it.
OUT_GAIN = {"granite": 64.0}


def dyadic(x: float) -> float:
    return float(np.ldexp(np.round(np.ldexp(x, 6)), -6))


def scale_of(family: str, name: str, shape: list[int], cfg: dict) -> tuple[float, float]:
    """(scale, offset) of a tensor: value = u * scale + offset, in f32.

    Linear weights get a gain of about 2 (q/k 3, so attention is not uniform;
    o/down more, see OUT_GAIN); norms are 1 + noise (Gemma stores w - 1), the
    final norm's weight sized so the logits have a spread of about 8 and the
    greedy token is clear. All scales are dyadic so the JSON decimal is exact.
    """
    tied = cfg.get("tie_word_embeddings", True)
    emb = EMBED.get(family, 0.5)
    base = 0.0 if family == "gemma2" else 1.0
    if name == "model.norm.weight":
        # logit spread ~ w * sqrt(hidden) * 0.577 * (lm_head scale) / logits_scaling
        lm = emb if tied else 1.0
        w = 8.0 * cfg.get("logits_scaling", 1.0) / (cfg["hidden_size"] ** 0.5 * 0.577 * lm)
        return 0.125, dyadic(w) - (1.0 - base)
    if name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")) and family == "gemma2":
        # Gemma normalises each sublayer's output: its weight is the layer's gain.
        return 0.125, 3.0
    if name.endswith("norm.weight"):
        return 0.125, base
    if name.endswith(".bias"):
        return 0.5, 0.0
    if "embed_tokens" in name:
        return emb, 0.0
    if name == "lm_head.weight":
        return 1.0, 0.0
    fan_in = shape[1]
    if any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
        gain = 3.0
    elif any(k in name for k in ("o_proj", "down_proj")):
        gain = OUT_GAIN.get(family, 6.0)
    else:
        gain = 2.0
    return dyadic(gain / fan_in**0.5), 0.0


def manifest(family: str, cfg_dir: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(cfg_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    raw = json.load(open(os.path.join(cfg_dir, "config.json")))
    tensors = []
    for name, p in model.named_parameters():  # tied lm_head is listed once, as embed_tokens
        shape = list(p.shape)
        scale, offset = scale_of(family, name, shape, raw)
        tensors.append({"name": name, "shape": shape, "scale": scale, "offset": offset})
    return {"seed": SEEDS[family], "value": "u * scale + offset in f32, u = ((x >> 40) as f32 * 2^-24) * 2 - 1, "
            "x = xorshift64 (x ^= x << 13; x ^= x >> 7; x ^= x << 17) advanced once per value before use, "
            "one stream over the tensors in order, row-major", "tensors": tensors}


def write_safetensors(path: str, arrays: list[tuple[str, np.ndarray]]) -> None:
    # Tensors in manifest order, F32, no padding; the same layout as the Rust twin writes.
    header, off = {}, 0
    for name, a in arrays:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for _, a in arrays:
            f.write(a.astype("<f4").tobytes())


def build(family: str, out_root: str) -> None:
    src = os.path.join(HERE, family)
    m = manifest(family, src)
    x = m["seed"]
    arrays = []
    for t in m["tensors"]:
        n = int(np.prod(t["shape"]))
        u, x = xorshift_values(x, n)
        v = u * np.float32(t["scale"]) + np.float32(t["offset"])
        assert v.dtype == np.float32
        t["sha256"] = hashlib.sha256(v.astype("<f4").tobytes()).hexdigest()
        arrays.append((t["name"], v.reshape(t["shape"])))
    with open(os.path.join(src, "weights.json"), "w") as f:
        json.dump(m, f, indent=1)
        f.write("\n")
    out = os.path.join(out_root, family)
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), out)
    shutil.copy(os.path.join(HERE, "tokenizer/tokenizer.model"), out)
    write_safetensors(os.path.join(out, "model.safetensors"), arrays)

    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    sd = model.state_dict()
    for name, a in arrays:
        assert np.array_equal(sd[name].numpy(), a), name
    print(f"{family}: {len(arrays)} tensors, {sum(a.size for _, a in arrays)} values -> {out}")


def main() -> None:
    out_root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "/tmp/families")
    train_tokenizer()
    for family in FAMILIES:
        build(family, out_root)


if __name__ == "__main__":
    main()
