"""The Python engines of `cargo xtask bench embed --model all-MiniLM-L6-v2`.

    python embed_engines.py export MODEL_DIR ONNX_DIR
    python embed_engines.py run ENGINE MODEL_DIR ONNX_DIR THREADS BATCH_FILE TEXT RUNS REPS WARMUP

`export` writes ONNX_DIR/model.onnx (the Hugging Face BertModel exported with
torch.onnx.export, inputs input_ids/attention_mask/token_type_ids, output
last_hidden_state: the graph sentence-transformers' backend="onnx" loads
through optimum) and ONNX_DIR/model_qint8.onnx
(onnxruntime.quantization.quantize_dynamic of it, int8 weights, as
sentence-transformers' export_dynamic_quantized_onnx_model writes).

`run` measures one engine in this process and prints one JSON line:
`sentence-transformers` (PyTorch, float32) or `onnxruntime-f32` /
`onnxruntime-int8`, which run the ONNX graph the way sentence-transformers
runs it: texts sorted by length, batches of 32 padded to their longest,
truncation at max_seq_length 256, then mean pooling over the attention mask
and L2 normalisation. `batch_s` is the wall time of embedding every text of
BATCH_FILE (one per line), REPS times after WARMUP untimed runs;
`latency_ms` the wall time of embedding TEXT alone, RUNS times.
"""

import json
import os
import sys
import time

BATCH_SIZE = 32
MAX_SEQ = 256


def export(model_dir, onnx_dir):
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    os.makedirs(onnx_dir, exist_ok=True)
    model = AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor([[101, 7592, 2088, 102]])
    f32 = os.path.join(onnx_dir, "model.onnx")
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            f32,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "last_hidden_state": axes,
            },
            opset_version=17,
            dynamo=False,
        )
    quantize_dynamic(f32, os.path.join(onnx_dir, "model_qint8.onnx"), weight_type=QuantType.QInt8)


def ort_engine(model_dir, path, threads):
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(MAX_SEQ)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def encode(texts):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = [None] * len(texts)
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start:start + BATCH_SIZE]
            enc = tok.encode_batch([texts[i] for i in chunk])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for i, v in zip(chunk, pooled):
                out[i] = v
        return out

    return encode, {"onnxruntime": ort.__version__}


def st_engine(model_dir, threads):
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    st = SentenceTransformer(model_dir, device="cpu", model_kwargs={"dtype": torch.float32})
    assert st.max_seq_length == MAX_SEQ, st.max_seq_length

    def encode(texts):
        with torch.inference_mode():
            return list(st.encode(texts, batch_size=BATCH_SIZE, convert_to_numpy=True))

    return encode, {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
    }


def run(engine, model_dir, onnx_dir, threads, batch_file, text, runs, reps, warmup):
    os.environ["HF_HUB_OFFLINE"] = "1"
    if engine == "sentence-transformers":
        encode, versions = st_engine(model_dir, threads)
    elif engine == "onnxruntime-f32":
        encode, versions = ort_engine(model_dir, os.path.join(onnx_dir, "model.onnx"), threads)
    elif engine == "onnxruntime-int8":
        encode, versions = ort_engine(model_dir, os.path.join(onnx_dir, "model_qint8.onnx"), threads)
    else:
        sys.exit(f"unknown engine {engine}")
    with open(batch_file, encoding="utf-8") as f:
        batch = f.read().split("\n")
    for _ in range(warmup):
        encode(batch)
    batch_s = []
    for _ in range(reps):
        t0 = time.perf_counter()
        vectors = encode(batch)
        batch_s.append(time.perf_counter() - t0)
    assert len(vectors) == len(batch)
    for _ in range(warmup):
        encode([text])
    latency_ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        short = encode([text])[0]
        latency_ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({
        "engine": engine,
        "texts": len(batch),
        "batch_s": batch_s,
        "latency_ms": latency_ms,
        "short_vector": [float(x) for x in short],
        "versions": versions,
    }))


def main():
    if sys.argv[1:2] == ["export"] and len(sys.argv) == 4:
        export(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["run"] and len(sys.argv) == 11:
        a = sys.argv[2:]
        run(a[0], a[1], a[2], int(a[3]), a[4], a[5], int(a[6]), int(a[7]), int(a[8]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
