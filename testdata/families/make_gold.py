#!/usr/bin/env python3
"""Family gold helpers for make_gold.sh (see README.md).

  make_gold.py summary IN.gguf OUT.json
      testdata/convert/make_gold.py's per-key/tensor summary of the Python
      converter's GGUF, plus the SHA-256 of the whole file ("file_sha256").
  make_gold.py torch CHECKPOINT LCPP_GOLD.json OUT.json
      PyTorch F32 (eager attention) teacher-forced over llama.cpp's prompt_ids
      + greedy ids: per position (the predictions of ids[0], ids[1], ...) the
      logits of llama.cpp's top-5 ids ("top", same [id, logit] layout),
      torch's argmax and torch's top1 - top2 logit gap. With --no-window,
      the config's sliding_window is dropped first (llama.cpp's semantics for
      Mistral and Phi-3 files, see README.md).
  make_gold.py report FAMILIES_DIR FAMILY...
      Prints and writes FAMILIES_DIR/summary.json: per family and prompt,
      max |llama.cpp F32 - torch| over those logits, whether llama.cpp's greedy
      ids equal torch's argmax, and the smallest top1 - top2 gap.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(src: str, dst: str) -> None:
    sys.path.insert(0, os.path.join(HERE, "..", "convert"))
    import make_gold as convert_gold  # testdata/convert/make_gold.py

    sys.argv = ["make_gold.py", src, dst]
    convert_gold.main()
    with open(dst, encoding="utf-8") as f:
        g = json.load(f)
    h = hashlib.sha256()
    with open(src, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    g = {"file_sha256": h.hexdigest(), "file_len": os.path.getsize(src), **g}
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(g, f, indent=1, ensure_ascii=False)
        f.write("\n")


def torch_gold(ckpt: str, lcpp: str, dst: str, no_window: bool) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(lcpp) as f:
        g = json.load(f)
    cfg = AutoConfig.from_pretrained(ckpt)
    if no_window:
        # What llama.cpp computes for these files: it ignores their sliding window.
        cfg.sliding_window = None
    model = AutoModelForCausalLM.from_pretrained(ckpt, config=cfg, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    seq = g["prompt_ids"] + g["ids"]
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0]
    n0 = len(g["prompt_ids"]) - 1
    top, argmax, gap = [], [], []
    for step, lt in enumerate(g["top"]):
        row = logits[n0 + step]
        top.append([[i, round(float(row[i]), 6)] for i, _ in lt])
        v, ix = torch.topk(row, 2)
        argmax.append(int(ix[0]))
        gap.append(round(float(v[0] - v[1]), 6))
    src = "transformers eager F32" + (", config.sliding_window = None" if no_window else "")
    out = {"source": src, "prompt_ids": g["prompt_ids"], "ids": g["ids"],
           "top": top, "argmax": argmax, "gap": gap}
    with open(dst, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


def report(root: str, families: list[str]) -> None:
    res = {}
    for fam in families:
        res[fam] = {}
        prompts = sorted(f[:-5] for f in os.listdir(os.path.join(root, fam, "gold/F32"))
                         if f.endswith(".json") and not f.endswith(".fa-off.json"))
        for p in prompts:
            lc = json.load(open(os.path.join(root, fam, "gold/F32", f"{p}.json")))
            th = json.load(open(os.path.join(root, fam, f"gold/torch-{p}.json")))
            d = max(abs(a[1] - b[1]) for la, lb in zip(lc["top"], th["top"]) for a, b in zip(la, lb))
            same = [i == j for i, j in zip(lc["ids"], th["argmax"])]
            first = same.index(False) if False in same else None
            res[fam][p] = {"prompt_tokens": len(lc["prompt_ids"]), "steps": len(lc["ids"]),
                           "max_abs_lcpp_f32_vs_torch": round(d, 6), "greedy_equals_torch_argmax": all(same),
                           "first_disagreement": first, "min_torch_top_gap": min(th["gap"])}
            nw = os.path.join(root, fam, f"gold/torch-nowindow-{p}.json")
            if os.path.exists(nw):
                th = json.load(open(nw))
                d = max(abs(a[1] - b[1]) for la, lb in zip(lc["top"], th["top"]) for a, b in zip(la, lb))
                same = [i == j for i, j in zip(lc["ids"], th["argmax"])]
                res[fam][p]["without_window"] = {
                    "max_abs_lcpp_f32_vs_torch": round(d, 6), "greedy_equals_torch_argmax": all(same),
                    "first_disagreement": same.index(False) if False in same else None,
                    "min_torch_top_gap": min(th["gap"])}
            print(fam, p, res[fam][p])
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "summary":
        summary(sys.argv[2], sys.argv[3])
    elif cmd == "torch":
        torch_gold(sys.argv[2], sys.argv[3], sys.argv[4], "--no-window" in sys.argv[5:])
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown command {cmd}")
