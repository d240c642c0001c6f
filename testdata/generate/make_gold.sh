#!/bin/sh
# Regenerates the llama.cpp gold in this folder (see README.md).
# Usage: testdata/generate/make_gold.sh   (from the repository root)
set -eu
# ONLY="model ..." regenerates just those models.
LCPP=${LCPP:-/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
M=${LAMINA_MODELS:-$HOME/.cache/lamina/models}
D=testdata/generate
TOOL=${TOOL:-/tmp/lcpp_gold}
c++ -O2 -std=c++17 -I"$LCPP/include" -I"$LCPP/ggml/include" "$D/tools/lcpp_gold.cpp" -o "$TOOL" \
    "$LCPP/build/src/libllama.a" "$LCPP/build/ggml/src/libggml.a" \
    "$LCPP/build/ggml/src/libggml-cpu.a" "$LCPP/build/ggml/src/libggml-base.a" \
    -fopenmp -lpthread -ldl
prompts() { # model stem -> prompt names
    case $1 in
        gemma*) chat=chat-gemma3 ;;
        *) chat=chat-smollm2 ;;
    esac
    echo factual code list multilingual $chat long window
}
# Greedy continuations with llama.cpp's default setup (flash attention on).
ALL="gemma-3-270m-F32 SmolLM2-135M-Instruct-F32 gemma-3-270m-Q4_K_M SmolLM2-135M-Instruct-Q8_0 SmolLM2-135M-Instruct-Q4_1"
# The derived files, made here with llama.cpp's own quantizer as README.md
# says (into a folder of their own, so whatever the models folder holds is
# never what the gold is made from); the published Q4_1 and Q4_K_M are
# `cargo xtask models`'s verified downloads.
LQ=${LQ:-$LCPP/build/bin/llama-quantize}
G=${GOLD_MODELS:-/tmp/lamina-gold-models}
mkdir -p "$G"
cp "$M/gemma-3-270m-Q4_K_M.gguf" "$M/SmolLM2-135M-Instruct-Q4_1.gguf" "$G/"
"$LQ" --allow-requantize "$G/gemma-3-270m-Q4_K_M.gguf" "$G/gemma-3-270m-F32.gguf" F32
"$LQ" --allow-requantize "$G/SmolLM2-135M-Instruct-Q4_1.gguf" "$G/SmolLM2-135M-Instruct-F32.gguf" F32
"$LQ" --allow-requantize "$G/SmolLM2-135M-Instruct-F32.gguf" "$G/SmolLM2-135M-Instruct-Q8_0.gguf" Q8_0
if [ -z "${ONLY:-}" ]; then
    (cd "$G" && sha256sum $(for m in $ALL; do echo $m.gguf; done)) > "$D/models.sha256"
else
    # Regenerating some models keeps the others' gold: their files must be
    # the ones the committed sums name.
    SUMS="$(pwd)/$D/models.sha256"
    (cd "$G" && sha256sum -c "$SUMS")
fi
M=$G
for model in ${ONLY:-$ALL}; do
    mkdir -p "$D/$model"
    for p in $(prompts $model); do
        "$TOOL" -m "$M/$model.gguf" -f "$D/prompts/$p.txt" -n 64 --top 5 -t 2 > "$D/$model/$p.json"
        # llama.cpp's flash-attention-off setup, teacher-forced over the
        # default setup's greedy sequence.
        "$TOOL" -m "$M/$model.gguf" --ids-file "$D/$model/$p.json" --top 5 -t 2 --fa off \
            > "$D/$model/$p.fa-off.json"
        echo "$model $p done"
    done
done
