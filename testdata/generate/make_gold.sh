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
[ -n "${ONLY:-}" ] || (cd "$M" && sha256sum $(for m in $ALL; do echo $m.gguf; done)) > "$D/models.sha256"
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
