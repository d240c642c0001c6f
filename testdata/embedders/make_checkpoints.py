#!/usr/bin/env python3
"""Builds the embedder and reranker conformance checkpoints (see README.md).

Usage: LCPP=... PYTHONPATH=$LCPP/gguf-py python make_checkpoints.py [OUT_DIR [NAME...]]
(default /tmp/embedders, every model)

1. Writes the two shared tokenizers: `tokenizer/wpm/` (bert-base-uncased's
   WordPiece vocabulary from $LCPP/models, see wordpiece_vocab) and
   `tokenizer/xlmr/` (a SentencePiece Unigram model trained from
   testdata/families/tokenizer/train.txt with one thread and a fixed seed,
   wrapped by transformers' XLMRobertaTokenizerFast as the real XLM-R folders are).
2. For each model folder: lists the tensors of the transformers class of
   config.json (NomicBertModel by hand: it has no transformers class), writes
   the manifest `weights.json` (seed, the files the checkpoint is made of,
   then each tensor's name, shape, scale, offset and SHA-256 in state-dict
   order) and fills the tensors from the xorshift64 generator of
   testdata/families (the Rust twin is crates/model/tests/common/checkpoint.rs).
3. Writes OUT_DIR/NAME/ (the files of the manifest plus model.safetensors) and
   checks that transformers loads it with every weight from the file.
"""
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = os.path.join(HERE, "..", "families")
# The families' generator, scale rounding and safetensors writer (the Rust twin mirrors them).
_spec = importlib.util.spec_from_file_location("families_checkpoints", os.path.join(FAMILIES, "make_checkpoints.py"))
_fam = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fam)
dyadic, write_safetensors, xorshift_values = _fam.dyadic, _fam.write_safetensors, _fam.xorshift_values

MODELS = ["minilm", "ms-marco", "bge", "nomic", "xlmr", "bge-reranker", "qwen3emb"]
SEEDS = {m: 0xD1B54A32D192ED03 ^ (i + 1) * 0x100000001B3 for i, m in enumerate(MODELS)}
TOKENIZER = {"minilm": "wpm", "ms-marco": "wpm", "bge": "wpm", "nomic": "wpm", "xlmr": "xlmr",
             "bge-reranker": "xlmr", "qwen3emb": "qwen"}
UNIGRAM_VOCAB = 1000  # a ceiling: the small training text yields fewer pieces (hard_vocab_limit off)


def train_text() -> str:
    with open(os.path.join(FAMILIES, "tokenizer/train.txt"), encoding="utf-8") as f:
        return f.read()


def wordpiece_vocab() -> list[str]:
    """bert-base-uncased's vocabulary (all-MiniLM-L6-v2, bge-small-en-v1.5, the
    ms-marco cross-encoders and nomic-embed-text share it), read back from
    llama.cpp's models/ggml-vocab-bert-bge.gguf by undoing the converter's
    phantom-space rewrite. A real vocabulary is needed: the pinned converter
    only accepts WordPiece tokenizers whose ids for its check text it knows."""
    import gguf

    r = gguf.GGUFReader(os.path.join(os.environ["LCPP"], "models/ggml-vocab-bert-bge.gguf"))
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    vocab = []
    for tok, typ in zip(toks, types):
        if tok.startswith("\u2581"):
            vocab.append(tok[1:])
        elif typ == gguf.TokenType.CONTROL or re.fullmatch(r"\[unused\d+\]", tok):
            vocab.append(tok)
        else:
            vocab.append("##" + tok)
    assert len(vocab) == 30522 and vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"], vocab[100:104]
    return vocab


def build_wpm() -> None:
    """tokenizer/wpm/: tokenizer.json (compact, as the real all-MiniLM-L6-v2 folder ships it,
    without its padding/truncation), tokenizer_config.json, special_tokens_map.json."""
    from transformers import BertTokenizerFast

    out = os.path.join(HERE, "tokenizer/wpm")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(p + "\n" for p in wordpiece_vocab()))
        tok = BertTokenizerFast(vocab_file=os.path.join(tmp, "vocab.txt"), do_lower_case=True, model_max_length=512)
        tok.save_pretrained(os.path.join(tmp, "save"))
        with open(os.path.join(tmp, "save/tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(os.path.join(tmp, "save", name), out)


def build_xlmr() -> None:
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizerFast

    out = os.path.join(HERE, "tokenizer/xlmr")
    os.makedirs(out, exist_ok=True)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        # Relative paths: the trainer records them in the model file.
        os.chdir(tmp)
        with open("train.txt", "w", encoding="utf-8") as f:
            f.write(train_text())
        spm.set_random_generator_seed(34)
        # XLM-R's own options: Unigram, nmt_nfkc, dummy prefix, no byte fallback.
        spm.SentencePieceTrainer.train(
            input="train.txt", model_prefix="m", model_type="unigram", vocab_size=UNIGRAM_VOCAB,
            hard_vocab_limit=False, character_coverage=1.0, num_threads=1, shuffle_input_sentence=False,
            input_sentence_size=0, max_sentence_length=16384, minloglevel=2,
        )
        os.chdir(cwd)
        shutil.copy(os.path.join(tmp, "m.model"), os.path.join(out, "sentencepiece.bpe.model"))
        tok = XLMRobertaTokenizerFast(vocab_file=os.path.join(out, "sentencepiece.bpe.model"), model_max_length=8192)
        save = os.path.join(tmp, "save")
        tok.save_pretrained(save)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(os.path.join(save, name), out)


def files_of(model: str) -> list[list[str]]:
    """[checkpoint path, path under testdata/embedders] of every file but the weights."""
    src = os.path.join(HERE, model)
    own = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs
                 if f not in ("weights.json", "gold.json", "convert.gold.json", "files.sha256"))
    files = [[f, f"{model}/{f}"] for f in own]
    tok = TOKENIZER[model]
    if tok == "qwen":
        files.append(["tokenizer.model", "../families/tokenizer/tokenizer.model"])
    else:
        tdir = os.path.join(HERE, "tokenizer", tok)
        files += [[f, f"tokenizer/{tok}/{f}"] for f in sorted(os.listdir(tdir)) if f not in own]
    return sorted(files)


def nomic_tensors(cfg: dict) -> list[tuple[str, list[int]]]:
    """NomicBertModel's state dict (nomic-embed-text-v1.5's safetensors names):
    no position embeddings (rotary), fused Wqkv, SwiGLU fc11 (up) / fc12 (gate), no biases
    but the LayerNorms'."""
    h, v, t, inner = cfg["n_embd"], cfg["vocab_size"], cfg["type_vocab_size"], cfg["n_inner"]
    out = [("embeddings.word_embeddings.weight", [v, h]), ("embeddings.token_type_embeddings.weight", [t, h]),
           ("emb_ln.weight", [h]), ("emb_ln.bias", [h])]
    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}."
        out += [(p + "attn.Wqkv.weight", [3 * h, h]), (p + "attn.out_proj.weight", [h, h]),
                (p + "mlp.fc11.weight", [inner, h]), (p + "mlp.fc12.weight", [inner, h]),
                (p + "mlp.fc2.weight", [h, inner]), (p + "norm1.weight", [h]), (p + "norm1.bias", [h]),
                (p + "norm2.weight", [h]), (p + "norm2.bias", [h])]
    return out


def hf_tensors(ckpt_cfg_dir: str) -> list[tuple[str, list[int]]]:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    cfg = AutoConfig.from_pretrained(ckpt_cfg_dir)
    cls = AutoModelForSequenceClassification if "SequenceClassification" in cfg.architectures[0] else AutoModel
    with torch.device("meta"):
        m = cls.from_config(cfg)
    return [(n, list(p.shape)) for n, p in m.named_parameters()]


def scale_of(name: str, shape: list[int]) -> tuple[float, float]:
    """(scale, offset): LayerNorm/RMSNorm weights 1 + noise, biases small,
    embeddings of unit size (positions and token types half that), projections
    with a gain over sqrt(fan_in) (q/k 3 so attention is not uniform, 2 elsewhere).
    All dyadic so the JSON decimals are exact."""
    last = name.rsplit(".", 2)[-2] if name.count(".") else name
    if name.endswith("bias"):
        return 0.125, 0.0
    if len(shape) == 1:  # norm weights
        return 0.125, 1.0
    if "word_embeddings" in name or "embed_tokens" in name:
        return 1.0, 0.0
    if "position_embeddings" in name or "token_type_embeddings" in name:
        return 0.5, 0.0
    gain = 3.0 if last in ("query", "key", "q_proj", "k_proj", "Wqkv") else 2.0
    return dyadic(gain / shape[1] ** 0.5), 0.0


def manifest(model: str) -> dict:
    src = os.path.join(HERE, model)
    cfg = json.load(open(os.path.join(src, "config.json")))
    listed = nomic_tensors(cfg) if model == "nomic" else hf_tensors(src)
    tensors = []
    for name, shape in listed:
        scale, offset = scale_of(name, shape)
        tensors.append({"name": name, "shape": shape, "scale": scale, "offset": offset})
    return {"seed": SEEDS[model],
            "value": "u * scale + offset in f32, u = ((x >> 40) as f32 * 2^-24) * 2 - 1, "
            "x = xorshift64 (x ^= x << 13; x ^= x >> 7; x ^= x << 17) advanced once per value before use, "
            "one stream over the tensors in order, row-major",
            "files": files_of(model), "tensors": tensors}


def build(model: str, out_root: str) -> None:
    m = manifest(model)
    x = m["seed"]
    arrays = []
    for t in m["tensors"]:
        n = int(np.prod(t["shape"]))
        u, x = xorshift_values(x, n)
        v = u * np.float32(t["scale"]) + np.float32(t["offset"])
        assert v.dtype == np.float32
        t["sha256"] = hashlib.sha256(v.astype("<f4").tobytes()).hexdigest()
        arrays.append((t["name"], v.reshape(t["shape"])))
    with open(os.path.join(HERE, model, "weights.json"), "w") as f:
        json.dump(m, f, indent=1)
        f.write("\n")
    out = os.path.join(out_root, model)
    shutil.rmtree(out, ignore_errors=True)
    for dst, src in m["files"]:
        os.makedirs(os.path.dirname(os.path.join(out, dst)), exist_ok=True)
        shutil.copy(os.path.join(HERE, src), os.path.join(out, dst))
    write_safetensors(os.path.join(out, "model.safetensors"), arrays)
    if model != "nomic":
        check_load(out, arrays)
    print(f"{model}: {len(arrays)} tensors, {sum(a.size for _, a in arrays)} values -> {out}")


def check_load(out: str, arrays: list) -> None:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    cfg = AutoConfig.from_pretrained(out)
    cls = AutoModelForSequenceClassification if "SequenceClassification" in cfg.architectures[0] else AutoModel
    model, info = cls.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    sd = model.state_dict()
    for name, a in arrays:
        assert np.array_equal(sd[name].numpy(), a), name


def main() -> None:
    out_root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "/tmp/embedders")
    only = sys.argv[2:] or MODELS
    build_wpm()
    build_xlmr()
    for model in only:
        build(model, out_root)


if __name__ == "__main__":
    main()
