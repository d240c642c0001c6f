#!/usr/bin/env python3
"""Regenerate gold-*.json: llama.cpp's own llama-tokenize on every string of
corpus.json, for each model and each of the four settings
(BOS on/off x parse_special on/off).

Each string is written verbatim to a file and passed with `-f FILE
--no-escape`: llama-tokenize reads -f files byte for byte (it does not strip
the trailing newline the shared -f handler strips) and --no-escape keeps
backslashes literal, so tabs, CRLF, leading/trailing spaces and trailing
newlines survive exactly. See README.md for the llama.cpp commit.

usage: make_gold.py [LLAMA_TOKENIZE] [MODELS_DIR]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_TOKENIZE = sys.argv[1] if len(sys.argv) > 1 else \
    "/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-tokenize"
MODELS = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
    "LAMINA_MODELS", os.path.expanduser("~/.cache/lamina/models"))
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

MODELS_OUT = [
    ("gemma-3-270m-Q4_K_M.gguf", "gold-gemma3.json"),
    ("SmolLM2-135M-Instruct-Q4_1.gguf", "gold-smollm2.json"),
    # llama.cpp's own vocab-only files (models/ in its source tree), which
    # `cargo xtask models` extracts from the same llama-cpp-python sdist.
    ("ggml-vocab-llama-bpe.gguf", "gold-llama-bpe.json"),
    ("ggml-vocab-qwen2.gguf", "gold-qwen2.json"),
    ("ggml-vocab-phi-3.gguf", "gold-phi-3.json"),
    ("ggml-vocab-llama-spm.gguf", "gold-llama-spm.json"),
]
# name -> extra flags; "bos" means llama-tokenize's default, which passes
# add_special = the model's add_bos_token.
SETTINGS = {
    "bos+special": [],
    "bos+nospecial": ["--no-parse-special"],
    "nobos+special": ["--no-bos"],
    "nobos+nospecial": ["--no-bos", "--no-parse-special"],
}


def tokenize(model, path, flags):
    cmd = [LLAMA_TOKENIZE, "-m", model, "-f", path, "--no-escape", "--ids", "--log-disable"] + flags
    out = subprocess.run(cmd, check=True, capture_output=True).stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("[")]
    assert len(lines) == 1, out
    return json.loads(lines[-1])


def main():
    only = os.environ.get("ONLY")
    corpus = json.load(open(os.path.join(HERE, "corpus.json"), encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prompt.txt")
        for model_file, out_name in MODELS_OUT:
            if only and only not in out_name:
                continue
            model = os.path.join(MODELS, model_file)
            cases = []
            for text in corpus:
                with open(path, "wb") as f:
                    f.write(text.encode("utf-8"))
                ids = {name: tokenize(model, path, flags) for name, flags in SETTINGS.items()}
                cases.append({"text": text, "ids": ids})
            gold = {
                "generator": "testdata/tokenizer/make_gold.py",
                "llama_cpp_commit": COMMIT,
                "model": model_file,
                "command": " ".join([os.path.basename(LLAMA_TOKENIZE), "-m", model_file,
                                     "-f", "PROMPT_FILE", "--no-escape", "--ids",
                                     "--log-disable", "[--no-bos]", "[--no-parse-special]"]),
                "cases": cases,
            }
            with open(os.path.join(HERE, out_name), "w", encoding="utf-8") as f:
                json.dump(gold, f, ensure_ascii=False, indent=1)
                f.write("\n")
            print(f"{out_name}: {len(cases)} strings x {len(SETTINGS)} settings")


if __name__ == "__main__":
    main()
