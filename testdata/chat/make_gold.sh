#!/bin/sh
# Regenerates gold/*.json: each template of templates/ rendered by llama.cpp's
# own chat layer (tools/chat_gold.cpp) on every conversation of cases.json,
# and gold/tools/*.json on those of tool_cases.json (tools, calls, replies).
# Usage: testdata/chat/make_gold.sh   (from the repository root)
# LCPP: the llama.cpp source tree (include/, ggml/include/, common/, vendor/);
# BUILD: its CMake build folder (src/, ggml/src/, common/ static libraries).
set -eu
LCPP=${LCPP:-/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
BUILD=${BUILD:-$LCPP/build}
M=${LAMINA_MODELS:-$HOME/.cache/lamina/models}
D=testdata/chat
TOOL=${TOOL:-/tmp/chat_gold}
c++ -O1 -std=c++17 -I"$LCPP/common" -I"$LCPP/include" -I"$LCPP/ggml/include" -I"$LCPP/vendor" \
    "$D/tools/chat_gold.cpp" -o "$TOOL" \
    "$BUILD/common/libllama-common.a" "$BUILD/common/libllama-common-base.a" \
    "$BUILD/src/libllama.a" "$BUILD/ggml/src/libggml.a" "$BUILD/ggml/src/libggml-cpu.a" \
    "$BUILD/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl
# template -> where its BOS/EOS texts and add_bos come from: a vocabulary
# with the same special tokens as the family's GGUFs, or the texts themselves.
tokens() {
    case $1 in
        Qwen-*) echo --vocab "$M/ggml-vocab-qwen2.gguf" ;;
        meta-llama-*) echo --vocab "$M/ggml-vocab-llama-bpe.gguf" ;;
        microsoft-Phi-*) echo --vocab "$M/ggml-vocab-phi-3.gguf" ;;
        google-gemma-*) echo --vocab "$M/gemma-3-270m-Q4_K_M.gguf" ;;
        mistralai-*) echo --vocab "$M/ggml-vocab-llama-spm.gguf" ;;
        ibm-granite-*) echo --bos "<|end_of_text|>" --eos "<|end_of_text|>" ;;
        *) echo "no token source for $1" >&2; exit 1 ;;
    esac
}
mkdir -p "$D/gold/tools"
for f in "$D"/templates/*.jinja; do
    name=$(basename "$f" .jinja)
    # shellcheck disable=SC2046 # the flags are split on purpose
    TZ=UTC "$TOOL" "$f" "$D/cases.json" $(tokens "$name") > "$D/gold/$name.json"
    # shellcheck disable=SC2046
    TZ=UTC "$TOOL" "$f" "$D/tool_cases.json" $(tokens "$name") > "$D/gold/tools/$name.json"
    echo "$name done"
done
