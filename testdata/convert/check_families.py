"""Checks `lamina convert --type f32` against llama.cpp's convert_hf_to_gguf.py
--outtype f32 on tiny random-weight checkpoints of every supported causal-LM
family, byte for byte (see README.md, "Differences from the Python converter").

Per family it writes the checkpoint as transformers saves it (full config.json),
a copy with a minimal config.json (transformers' defaults filled in by both
converters), F16/BF16 copies and copies with a tokenizer.json beside
tokenizer.model, converts each with both converters and compares the files.

    /work/pyref/venv/bin/python testdata/convert/check_families.py \
        $LCPP target/debug/lamina /tmp/convert-check

Needs torch, transformers 4.57.6, sentencepiece and safetensors.
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
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

tokdir = f"{WORK}/tok"
os.makedirs(tokdir, exist_ok=True)
with open(f"{tokdir}/corpus.txt", "w") as f:
    for line in open(f"{REPO}/README.md"):
        if line.strip():
            f.write(line)
spm.SentencePieceTrainer.train(
    input=f"{tokdir}/corpus.txt", model_prefix=f"{tokdir}/tokenizer", vocab_size=400,
    model_type="bpe", byte_fallback=True, num_threads=1, bos_id=1, eos_id=2, unk_id=0,
    pad_id=-1, user_defined_symbols=["<|user|>", "<|end|>"], logstream=open(os.devnull, "w"))

V = 400
common = dict(vocab_size=V, bos_token_id=1, eos_token_id=2, torch_dtype="float32")
fams = {
 "llama3": ("LlamaForCausalLM", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
     max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, hidden_act="silu", attention_bias=False, mlp_bias=False,
     rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"})),
 "qwen2": ("Qwen2ForCausalLM", dict(hidden_size=224, intermediate_size=512, num_hidden_layers=2, num_attention_heads=7, num_key_value_heads=1,
     max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, sliding_window=32768, max_window_layers=21)),
 "qwen3": ("Qwen3ForCausalLM", dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
     max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, sliding_window=None, attention_bias=False)),
 "phi3": ("Phi3ForCausalLM", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
     max_position_embeddings=4096, original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, sliding_window=2047, tie_word_embeddings=False, pad_token_id=0)),
 "phi3-longrope": ("Phi3ForCausalLM", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
     max_position_embeddings=131072, original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=262144, tie_word_embeddings=False, pad_token_id=0,
     rope_scaling={"type": "longrope", "long_factor": [1.0 + 0.37*i for i in range(16)], "short_factor": [1.0 + 0.01*i*i for i in range(16)]})),
 "gemma2": ("Gemma2ForCausalLM", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
     max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, query_pre_attn_scalar=32, sliding_window=16, attn_logit_softcapping=50.0,
     final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=0)),
 "mistral": ("MistralForCausalLM", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
     max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=32, tie_word_embeddings=False)),
 "granite": ("GraniteForCausalLM", dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
     max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000000.0, embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
     logits_scaling=8.0, tie_word_embeddings=True, attention_bias=False)),
}

STRIP = ["max_position_embeddings", "rms_norm_eps", "rope_theta", "num_key_value_heads", "head_dim",
         "sliding_window", "use_sliding_window", "query_pre_attn_scalar", "attn_logit_softcapping",
         "final_logit_softcapping", "embedding_multiplier", "residual_multiplier",
         "attention_multiplier", "logits_scaling", "original_max_position_embeddings",
         "partial_rotary_factor", "layer_types", "max_window_layers", "tie_word_embeddings"]
tokenizer_config = {
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
    "add_eos_token": False, "tokenizer_class": "LlamaTokenizer",
    "chat_template": "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}",
    "added_tokens_decoder": {"3": {"content": "<|user|>", "special": True},
                             "4": {"content": "<|end|>", "special": False}}}

dirs = []
for name, (arch, kw) in fams.items():
    cfg = getattr(T, arch.replace("ForCausalLM", "Config"))(**common, **kw)
    cfg.architectures = [arch]
    torch.manual_seed(1234)
    model = getattr(T, arch)(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    d = f"{WORK}/ckpt/{name}"
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    shutil.copy(f"{tokdir}/tokenizer.model", d)
    json.dump(tokenizer_config, open(f"{d}/tokenizer_config.json", "w"), indent=2)
    dirs.append(d)

    m = f"{d}-min"
    shutil.rmtree(m, ignore_errors=True)
    shutil.copytree(d, m)
    c = json.load(open(f"{m}/config.json"))
    for k in STRIP:
        c.pop(k, None)
    if name not in ("llama3", "phi3-longrope"):
        c.pop("rope_scaling", None)
    if name == "gemma2":
        c["query_pre_attn_scalar"] = 256  # Gemma2Config's default head_dim
    json.dump(c, open(f"{m}/config.json", "w"), indent=2)
    dirs.append(m)

for src, dtype in [("gemma2", torch.float16), ("qwen2", torch.bfloat16), ("llama3", torch.float16)]:
    d = f"{WORK}/ckpt/{src}-{str(dtype).split('.')[1]}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(f"{WORK}/ckpt/{src}", d)
    sd = load_file(f"{d}/model.safetensors")
    save_file({k: v.to(dtype).contiguous() for k, v in sd.items()}, f"{d}/model.safetensors",
              metadata={"format": "pt"})
    dirs.append(d)

for src in ["phi3", "mistral", "gemma2"]:
    d = f"{WORK}/ckpt/{src}-tokjson"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(f"{WORK}/ckpt/{src}", d)
    tok = T.LlamaTokenizerFast(vocab_file=f"{d}/tokenizer.model", legacy=False, add_bos_token=True)
    tok.add_special_tokens({"additional_special_tokens": ["<|user|>"]})
    tok.add_tokens(["<|end|>"])
    tok.save_pretrained(f"{d}/tmp")
    shutil.copy(f"{d}/tmp/tokenizer.json", f"{d}/tokenizer.json")
    shutil.rmtree(f"{d}/tmp")
    dirs.append(d)

failed = 0
for d in dirs:
    name = os.path.basename(d)
    ref, ours = f"{WORK}/{name}-python.gguf", f"{WORK}/{name}-lamina.gguf"
    subprocess.run([sys.executable, f"{LCPP}/convert_hf_to_gguf.py", d, "--outtype", "f32",
                    "--outfile", ref], check=True, capture_output=True)
    r = subprocess.run([LAMINA, "convert", d, ours, "--type", "f32"], capture_output=True, text=True)
    same = r.returncode == 0 and open(ref, "rb").read() == open(ours, "rb").read()
    failed += not same
    print(f"{name:20} {'identical' if same else 'DIFFERENT ' + r.stderr.strip()[-200:]}")
sys.exit(1 if failed else 0)
