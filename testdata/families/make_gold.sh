#!/bin/sh
# Regenerates the family conformance gold (see README.md).
# Usage: testdata/families/make_gold.sh   (from the repository root)
# ONLY="family ..." regenerates just those families.
set -eu
LCPP=${LCPP:-/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp}   # the pinned llama.cpp source
LBUILD=${LBUILD:-$LCPP/build}                                      # its CMake build (static libs, bin/)
PY=${PY:-/opt/pyref/bin/python}                                    # torch, transformers, sentencepiece
OUT=${OUT:-/tmp/families}                                          # checkpoints and GGUFs (not committed)
D=testdata/families
TOOL=${TOOL:-/tmp/lcpp_gold}
FAMILIES=${ONLY:-"llama3 qwen2 qwen3 phi3 phi3-longrope gemma2 mistral granite"}
PROMPTS="short long list"
c++ -O2 -std=c++17 -I"$LCPP/include" -I"$LCPP/ggml/include" testdata/generate/tools/lcpp_gold.cpp -o "$TOOL" \
    "$LBUILD/src/libllama.a" "$LBUILD/ggml/src/libggml.a" \
    "$LBUILD/ggml/src/libggml-cpu.a" "$LBUILD/ggml/src/libggml-base.a" \
    -fopenmp -lpthread -ldl
# Checkpoints (and the committed tokenizer.model and weights.json manifests).
"$PY" $D/make_checkpoints.py "$OUT"
mkdir -p "$OUT/gguf"
for f in $FAMILIES; do
    G=$OUT/gguf/$f
    # The folder name is the model name the converter writes (general.name etc.).
    PYTHONPATH=$LCPP/gguf-py "$PY" $LCPP/convert_hf_to_gguf.py "$OUT/$f" --outtype f32 --outfile "$G-F32.gguf"
    PYTHONPATH=$LCPP/gguf-py "$PY" $D/make_gold.py summary "$G-F32.gguf" $D/$f/convert.gold.json
    "$LBUILD/bin/llama-quantize" "$G-F32.gguf" "$G-Q8_0.gguf" Q8_0
    "$LBUILD/bin/llama-quantize" "$G-F32.gguf" "$G-Q4_K_M.gguf" Q4_K_M
    (cd "$OUT/gguf" && sha256sum $f-F32.gguf $f-Q8_0.gguf $f-Q4_K_M.gguf) > $D/$f/files.sha256
    for q in F32 Q8_0 Q4_K_M; do
        mkdir -p $D/$f/gold/$q
        for p in $PROMPTS; do
            # Random weights reach end-of-generation tokens early; the teacher-forced
            # tests judge every position, so generation runs the full 64 tokens.
            "$TOOL" -m "$G-$q.gguf" -f $D/prompts/$p.txt -n 64 --top 5 -t 2 --ignore-eog > $D/$f/gold/$q/$p.json
            # llama.cpp's flash-attention-off setup, teacher-forced over the default setup's greedy ids.
            "$TOOL" -m "$G-$q.gguf" --ids-file $D/$f/gold/$q/$p.json --top 5 -t 2 --fa off > $D/$f/gold/$q/$p.fa-off.json
        done
    done
    # PyTorch F32, eager attention, teacher-forced over llama.cpp's F32 prompt + greedy ids.
    for p in $PROMPTS; do
        "$PY" $D/make_gold.py torch "$OUT/$f" $D/$f/gold/F32/$p.json $D/$f/gold/torch-$p.json
        case $f in
            # llama.cpp runs these without their sliding window (README.md): the
            # test compares with PyTorch computing the same.
            phi3|mistral) "$PY" $D/make_gold.py torch "$OUT/$f" $D/$f/gold/F32/$p.json \
                $D/$f/gold/torch-nowindow-$p.json --no-window ;;
        esac
    done
    echo "$f done"
done
"$PY" $D/make_gold.py report $D $FAMILIES
