"""examples/ray_embed.py on a local Ray instance (loopback only): 10,000
texts over two worker actors give the vectors one process gives. Run by
`cargo xtask wheel --test` in a venv holding the wheel and Ray, with
LAMINA_MODELS set; it prints the example's throughput. LAMINA_RAY_WORKERS
(e.g. "1,2") runs other worker counts, as docs/BENCHMARKS.md measures.
"""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina

MODEL = "all-MiniLM-L6-v2-Q8_0"
N = 10_000
HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = (
    "the of and to in is was for on that with as by at from it an were are which this be or "
    "had not but what all when can there been one who they if would will more some out so up "
    "said about into than them could only other then time these two may first any like now "
    "over such our even most made after also did many before must through back years where "
    "much way well down should because each just those people how little state good very make "
    "world still see own work long get here between both life being under never day same "
    "another know while last might great old year off come since against go came right used "
    "take three café naïve Straße déjà-vu 日本語 中文 Ελληνικά русский 🦀 42 3.14 e-mail C++"
).split()


def corpus(n):
    rng = random.Random(7)
    return [f"{i} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 24))) for i in range(n)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray")
    texts = corpus(N)
    table = pa.table({"id": pa.array(range(N), pa.int64()), "text": texts})
    pq.write_table(table, d / "corpus.parquet", row_group_size=1_000)
    reference = lamina.Embedder(MODEL, threads=2).encode(texts)
    return d, texts, reference


WORKERS = [int(w) for w in os.environ.get("LAMINA_RAY_WORKERS", "2").split(",")]


@pytest.mark.parametrize("workers", WORKERS)
def test_workers_give_one_process_vectors(data, workers):
    d, texts, reference = data
    out = d / f"vectors-{workers}"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    run = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "ray_embed.py"),
            "--model", MODEL,
            "--input", str(d / "corpus.parquet"),
            "--output", str(out),
            "--workers", str(workers),
            "--threads", "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"\nray_embed.py, {workers} worker(s) x 1 thread: {summary}")
    assert summary["rows"] == N

    table = pq.read_table(out)
    order = np.argsort(table.column("id").to_numpy())
    assert np.array_equal(table.column("id").to_numpy()[order], np.arange(N))
    got_texts = table.column("text").to_pylist()
    assert [got_texts[i] for i in order] == texts
    emb = table.column("embedding").combine_chunks()
    assert pa.types.is_fixed_size_list(emb.type) and emb.type.value_type == pa.float32()
    vectors = emb.flatten().to_numpy().reshape(len(emb), -1)[order]
    np.testing.assert_array_equal(vectors, reference)
