#!/usr/bin/env python3
"""Embed a Parquet corpus with Ray Data, one `lamina.Embedder` per worker.

    python examples/ray_embed.py --model all-MiniLM-L6-v2-Q8_0 \\
        --input corpus.parquet --output vectors/ --workers 2 --threads 1

Reads the `text` column (--column) of the Parquet file or folder at --input
and writes each row back with an `embedding` column, a fixed-size list of
float32, as Parquet files under --output. Each worker is a Ray actor that
loads the model once and embeds batch after batch with --threads threads.

Alone, it starts a local Ray instance on loopback. On a cluster, pass
--address auto (or ray://HEAD:10001): every node needs the lamina wheel and
the model (a path, a name in $LAMINA_MODELS, or hf://ORG/REPO:QUANT, which
each node pulls into its own Hugging Face cache).

The last line printed is a JSON summary: rows, workers, seconds, rows/s.
"""

import argparse
import json
import os
import time

import numpy as np
import pyarrow as pa
import ray

import lamina


class EmbedBatch:
    """A Ray Data actor: the model is loaded once per worker."""

    def __init__(self, model, threads, column, task=None, dim=None, batch_size=64):
        self.embedder = lamina.Embedder(model, threads=threads)
        self.column = column
        self.task = task
        self.dim = dim
        self.batch_size = batch_size

    def __call__(self, table: pa.Table) -> pa.Table:
        texts = table.column(self.column).to_pylist()
        vectors = self.embedder.encode(
            texts, task=self.task, dim=self.dim, batch_size=self.batch_size
        )
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        column = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
        return table.append_column("embedding", column)


def embed_corpus(
    input_path,
    output_path,
    model,
    workers=1,
    threads=1,
    column="text",
    task=None,
    dim=None,
    rows_per_batch=512,
):
    """Embeds `input_path` into `output_path` on the running Ray instance;
    returns the number of rows written."""
    # A Parquet file is read as one block, and a block goes to one actor:
    # split it so that every worker gets batches.
    ds = ray.data.read_parquet(input_path).repartition(
        target_num_rows_per_block=rows_per_batch
    )
    ds = ds.map_batches(
        EmbedBatch,
        fn_constructor_kwargs=dict(
            model=model, threads=threads, column=column, task=task, dim=dim
        ),
        batch_size=rows_per_batch,
        batch_format="pyarrow",
        concurrency=workers,
        num_cpus=threads,
    )
    ds.write_parquet(output_path)
    return ray.data.read_parquet(output_path).count()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a GGUF path, a name, or hf://ORG/REPO:QUANT")
    p.add_argument("--input", required=True, help="a Parquet file or folder")
    p.add_argument("--output", required=True, help="the folder to write Parquet files to")
    p.add_argument("--column", default="text", help="the column holding the texts")
    p.add_argument("--workers", type=int, default=1, help="embedding actors")
    p.add_argument("--threads", type=int, default=1, help="compute threads per actor")
    p.add_argument("--task", default=None, help="the model's task prompt (e.g. query, document)")
    p.add_argument("--dim", type=int, default=None, help="Matryoshka truncation")
    p.add_argument("--rows-per-batch", type=int, default=512)
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: start one here)")
    args = p.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:
        # Logical CPUs: the actors' cores, plus room for Ray Data's read and
        # write tasks, which otherwise wait for a free CPU behind the actors.
        cpus = max(os.cpu_count() or 1, args.workers * args.threads) + 2
        ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1")
    start = time.perf_counter()
    rows = embed_corpus(
        args.input,
        args.output,
        args.model,
        workers=args.workers,
        threads=args.threads,
        column=args.column,
        task=args.task,
        dim=args.dim,
        rows_per_batch=args.rows_per_batch,
    )
    seconds = time.perf_counter() - start
    print(json.dumps({
        "rows": rows,
        "workers": args.workers,
        "threads": args.threads,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1),
    }))


if __name__ == "__main__":
    main()
