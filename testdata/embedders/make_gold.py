#!/usr/bin/env python3
"""Embedder and reranker gold for make_gold.sh (see README.md).

  make_gold.py gold NAME CHECKPOINT GGUF_DIR OUT.json
      PyTorch F32 (sentence-transformers for the embedders, transformers'
      *ForSequenceClassification for the rerankers, our own forward for
      nomic-bert) and llama.cpp's llama-embedding on GGUF_DIR/NAME-{F32,Q8_0}.gguf
      over texts.json: token ids, vectors (or logits), cosines.
  make_gold.py report DIR NAME...
      Prints the per-model figures of each gold.json and writes DIR/summary.json.

Environment: LBUILD (llama.cpp build with bin/llama-embedding).
"""
import hashlib
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RERANKERS = ("ms-marco", "bge-reranker")
# The task each text is embedded for, by model (index i gets TASKS[i % 2]): queries and documents alternate.
TASKS = {"nomic": ["search_query", "search_document"], "qwen3emb": ["query", "document"]}
SEP, CLS_SEP = "<#sep#>", "<#cls#>"


def r7(x: float) -> float:
    """Seven significant digits: F32 precision is all the tests need."""
    return float(f"{x:.7g}")


def cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lcpp(gguf: str, prompts: list[str], rank: bool) -> tuple[list[list[int]], list[list[float]]]:
    """llama-embedding's token ids and outputs (L2-normalised vectors, or raw rank logits) per prompt."""
    exe = os.path.join(os.environ["LBUILD"], "bin/llama-embedding")
    # --no-escape: the texts hold backslashes that must reach the tokenizer as they are.
    args = [exe, "-m", gguf, "-p", SEP.join(prompts), "--embd-separator", SEP, "--embd-output-format", "json",
            "--no-escape", "--verbose-prompt", "-t", "2", "-c", "4096", "-b", "4096", "-ub", "4096"]
    # Rank scores are logits: normalising the one-value output would make them +-1.
    args += ["--pooling", "rank", "--cls-separator", CLS_SEP, "--embd-normalize", "-1"] if rank else ["--embd-normalize", "2"]
    # llama.cpp's logger writes from a thread and may lose the tail of a piped
    # stdout at exit: read complete output, running again when it is cut short.
    for _ in range(20):
        p = subprocess.run(args, capture_output=True, check=True)
        # Byte-fallback pieces are printed as partial UTF-8.
        stdout, stderr = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if stdout.rstrip().endswith("]\n}"):
            break
    else:
        raise RuntimeError(f"llama-embedding's output stayed incomplete: {' '.join(args)}")
    counts = [int(n) for n in re.findall(r"number of tokens in prompt = (\d+)", stderr)]
    flat = [int(i) for i in re.findall(r"(?m)^\s*(\d+) -> '", stdout)]
    assert len(counts) == len(prompts) and sum(counts) == len(flat), (counts, len(flat))
    ids, at = [], 0
    for n in counts:
        ids.append(flat[at:at + n])
        at += n
    # For rank pooling only the first value is the score; the rest of the row is not written by llama.cpp.
    rows = [r.split(",") for r in re.findall(r'"embedding": \[([^\]]*)\]', stdout)]
    out = [[float(r[0])] if rank else [float(v) for v in r] for r in rows]
    assert len(out) == len(prompts), len(out)
    return ids, out


def nomic_forward(ckpt: str, ids: list[int]):
    """NomicBertModel (nomic-embed-text-v1.5, post-norm) written by us from the
    published modeling_hf_nomic_bert.py and llama.cpp's nomic-bert graph: word +
    token-type-0 embeddings, LayerNorm; per layer fused Wqkv, rotary (non-interleaved,
    base rotary_emb_base) on q and k, softmax(qk^T / sqrt(d)), out_proj, residual,
    norm1; fc2(fc11(x) * silu(fc12(x))), residual, norm2. Returns the token states."""
    import torch
    from safetensors.torch import load_file

    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    w = load_file(os.path.join(ckpt, "model.safetensors"))
    h, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    d = h // nh
    t = torch.tensor(ids)
    x = w["embeddings.word_embeddings.weight"][t] + w["embeddings.token_type_embeddings.weight"][0]
    x = torch.nn.functional.layer_norm(x, (h,), w["emb_ln.weight"], w["emb_ln.bias"], eps)
    n = len(ids)
    inv = 1.0 / (cfg["rotary_emb_base"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    c, s = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rope(v):  # v: [nh, n, d]; rotate_half pairs i with i + d/2
        v1, v2 = v[..., : d // 2], v[..., d // 2:]
        return v * c + torch.cat([-v2, v1], -1) * s

    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}."
        q, k, v = (x @ w[p + "attn.Wqkv.weight"].T).split(h, -1)
        q, k, v = (z.view(n, nh, d).transpose(0, 1) for z in (q, k, v))
        q, k = rope(q), rope(k)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        a = a.transpose(0, 1).reshape(n, h) @ w[p + "attn.out_proj.weight"].T
        x = torch.nn.functional.layer_norm(a + x, (h,), w[p + "norm1.weight"], w[p + "norm1.bias"], eps)
        up, gate = x @ w[p + "mlp.fc11.weight"].T, x @ w[p + "mlp.fc12.weight"].T
        m = (up * torch.nn.functional.silu(gate)) @ w[p + "mlp.fc2.weight"].T
        x = torch.nn.functional.layer_norm(m + x, (h,), w[p + "norm2.weight"], w[p + "norm2.bias"], eps)
    return x


def torch_embed(name: str, ckpt: str, inputs: list[str]) -> tuple[list[list[int]], list[list[float]], str]:
    import torch

    if name == "nomic":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(ckpt)
        ids, vecs = [], []
        for s in inputs:
            i = tok(s)["input_ids"]
            with torch.no_grad():
                v = nomic_forward(ckpt, i).mean(0)
            ids.append(i)
            vecs.append(torch.nn.functional.normalize(v, dim=0).tolist())
        return ids, vecs, "our NomicBertModel reference (make_gold.py nomic_forward), mean pooling, L2 normalisation"
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(ckpt, device="cpu")
    ids = [st.tokenize([s])["input_ids"][0].tolist() for s in inputs]
    # One text per batch: no padding, so nothing but the text enters the pooling.
    vecs = [st.encode([s], batch_size=1, convert_to_numpy=True)[0].astype("float32").tolist() for s in inputs]
    import sentence_transformers

    return ids, vecs, f"sentence-transformers {sentence_transformers.__version__} F32 (modules.json pipeline)"


def torch_rerank(name: str, ckpt: str, pairs: list[tuple[str, str]]) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(ckpt, dtype=torch.float32).eval()
    out = {"ids": [], "types": [], "logits": [], "types0": [], "lcpp_head": [], "no_pooler": []}
    for q, d in pairs:
        enc = tok(q, d, return_tensors="pt")
        with torch.no_grad():
            out["ids"].append(enc["input_ids"][0].tolist())
            tt = enc.get("token_type_ids")
            out["types"].append(tt[0].tolist() if tt is not None else [0] * enc["input_ids"].shape[1])
            out["logits"].append(float(model(**enc).logits[0, 0]))
            zero = {k: (torch.zeros_like(v) if k == "token_type_ids" else v) for k, v in enc.items()}
            out["types0"].append(float(model(**zero).logits[0, 0]))
            if name == "ms-marco":
                # What the GGUF holds and llama.cpp computes: the converter drops BERT's
                # pooler, so the classifier reads the [CLS] state directly; token types 0.
                hs = model.bert(**zero).last_hidden_state[0, 0]
                out["lcpp_head"].append(float(model.classifier(hs)[0]))
                # The GGUF's head with HF's token types (segment B on row 1).
                hs = model.bert(**enc).last_hidden_state[0, 0]
                out["no_pooler"].append(float(model.classifier(hs)[0]))
            else:
                out["lcpp_head"].append(out["types0"][-1])
                out["no_pooler"].append(out["logits"][-1])
    return out


def gold(name: str, ckpt: str, gguf_dir: str, dst: str) -> None:
    texts = json.load(open(os.path.join(HERE, "texts.json")))
    ggufs = {q: os.path.join(gguf_dir, f"{name}-{q}.gguf") for q in ("F32", "Q8_0")}
    g = {"model": name, "gguf_sha256": {q: sha256(p) for q, p in ggufs.items()}}
    if name in RERANKERS:
        pairs = [(q, d) for q in texts["queries"] for d in texts["documents"]]
        th = torch_rerank(name, ckpt, pairs)
        lc = {q: lcpp(p, [a + CLS_SEP + b for a, b in pairs], True) for q, p in ggufs.items()}
        g["kind"] = "rerank"
        g["torch_source"] = ("transformers AutoModelForSequenceClassification F32: logits[0] with the tokenizer's "
                             "token_type_ids (torch), all-zero types (torch_types0), and what llama.cpp computes "
                             "(torch_lcpp_head: types 0; for BERT no pooler, see README.md), and the GGUF's head with the "
                             "tokenizer's types (torch_no_pooler: BERT without its pooler; XLM-R = torch)")
        items = []
        for i, (q, d) in enumerate(pairs):
            items.append({"query": q, "document": d, "hf_ids": th["ids"][i], "hf_token_type_ids": th["types"][i],
                          "lcpp_ids": lc["F32"][0][i], "torch": r7(th["logits"][i]),
                          "torch_types0": r7(th["types0"][i]), "torch_lcpp_head": r7(th["lcpp_head"][i]),
                          "torch_no_pooler": r7(th["no_pooler"][i]),
                          "lcpp_f32": lc["F32"][1][i][0], "lcpp_q8_0": lc["Q8_0"][1][i][0]})
        g["items"] = items
        g["max_abs"] = {
            "lcpp_f32_vs_torch_lcpp_head": r7(max(abs(it["lcpp_f32"] - it["torch_lcpp_head"]) for it in items)),
            "lcpp_q8_0_vs_torch_lcpp_head": r7(max(abs(it["lcpp_q8_0"] - it["torch_lcpp_head"]) for it in items)),
            "lcpp_f32_vs_torch": r7(max(abs(it["lcpp_f32"] - it["torch"]) for it in items)),
            "torch_spread": r7(max(it["torch"] for it in items) - min(it["torch"] for it in items)),
        }
        g["ids_equal_hf"] = all(it["hf_ids"] == it["lcpp_ids"] for it in items)
    else:
        tasks = TASKS.get(name)
        prompts = {}
        if tasks:
            cst = json.load(open(os.path.join(ckpt, "config_sentence_transformers.json")))
            prompts = cst["prompts"]
        items, inputs = [], []
        for i, t in enumerate(texts["texts"]):
            task = tasks[i % 2] if tasks else None
            inputs.append((prompts[task] if task else "") + t)
            items.append({"text": t, "task": task, "input": inputs[-1]})
        ids, vecs, src = torch_embed(name, ckpt, inputs)
        lc = {q: lcpp(p, inputs, False) for q, p in ggufs.items()}
        g["kind"] = "embed"
        g["torch_source"] = src
        for i, it in enumerate(items):
            it.update({"hf_ids": ids[i], "lcpp_ids": lc["F32"][0][i], "torch": [r7(v) for v in vecs[i]],
                       "lcpp_f32": lc["F32"][1][i], "lcpp_q8_0": lc["Q8_0"][1][i]})
            it["cos_lcpp_f32_torch"] = round(cos(it["lcpp_f32"], vecs[i]), 8)
            it["cos_lcpp_q8_0_torch"] = round(cos(it["lcpp_q8_0"], vecs[i]), 8)
            it["cos_lcpp_q8_0_lcpp_f32"] = round(cos(it["lcpp_q8_0"], it["lcpp_f32"]), 8)
        g["items"] = items
        same = [it for it in items if it["hf_ids"] == it["lcpp_ids"]]
        g["ids_equal_hf"] = [it["hf_ids"] == it["lcpp_ids"] for it in items]
        g["cosine"] = {
            "min_lcpp_f32_torch": min(it["cos_lcpp_f32_torch"] for it in same),
            "min_lcpp_q8_0_torch": min(it["cos_lcpp_q8_0_torch"] for it in same),
            "mean_lcpp_q8_0_torch": round(sum(it["cos_lcpp_q8_0_torch"] for it in same) / len(same), 8),
            "min_lcpp_q8_0_lcpp_f32": min(it["cos_lcpp_q8_0_lcpp_f32"] for it in items),
            "over": "texts whose llama.cpp ids equal HF's",
        }
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(g, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


def report(root: str, names: list[str]) -> None:
    res = {}
    for n in names:
        g = json.load(open(os.path.join(root, n, "gold.json"), encoding="utf-8"))
        if g["kind"] == "rerank":
            res[n] = {"ids_equal_hf": g["ids_equal_hf"], **g["max_abs"]}
        else:
            res[n] = {"ids_equal_hf": f"{sum(g['ids_equal_hf'])}/{len(g['ids_equal_hf'])}", **g["cosine"]}
        print(n, res[n])
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gold":
        gold(*sys.argv[2:6])
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown command {cmd}")
