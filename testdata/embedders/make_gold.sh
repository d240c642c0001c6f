#!/bin/sh
# Regenerates the embedder/reranker conformance gold (see README.md).
# Usage: testdata/embedders/make_gold.sh   (from the repository root)
# ONLY="name ..." regenerates just those models.
set -eu
LCPP=${LCPP:-/opt/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp}   # the pinned llama.cpp source
LBUILD=${LBUILD:-$LCPP/build}                                      # its CMake build (bin/)
PY=${PY:-/opt/pyref/bin/python}                                    # torch, transformers, sentence-transformers
OUT=${OUT:-/tmp/embedders}                                         # checkpoints and GGUFs (not committed)
D=testdata/embedders
ALL="minilm ms-marco bge nomic xlmr bge-reranker qwen3emb"
MODELS=${ONLY:-$ALL}
export LCPP LBUILD
# Tokenizers, checkpoints and the committed weights.json manifests.
PYTHONPATH=$LCPP/gguf-py "$PY" $D/make_checkpoints.py "$OUT" $MODELS
mkdir -p "$OUT/gguf"
for m in $MODELS; do
    G=$OUT/gguf/$m
    # The folder name is the model name the converter writes (general.name etc.).
    PYTHONPATH=$LCPP/gguf-py "$PY" $LCPP/convert_hf_to_gguf.py "$OUT/$m" --outtype f32 --outfile "$G-F32.gguf"
    PYTHONPATH=$LCPP/gguf-py "$PY" testdata/families/make_gold.py summary "$G-F32.gguf" $D/$m/convert.gold.json
    "$LBUILD/bin/llama-quantize" "$G-F32.gguf" "$G-Q8_0.gguf" Q8_0
    "$PY" $D/make_gold.py gold $m "$OUT/$m" "$OUT/gguf" $D/$m/gold.json
    echo "$m done"
done
"$PY" $D/make_gold.py report $D $ALL
