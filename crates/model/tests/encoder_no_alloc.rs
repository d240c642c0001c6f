//! Once its workspace is sized, the encoder forward (BERT with absolute
//! positions and token types, nomic-bert with RoPE and SwiGLU) allocates
//! nothing for a batch of the same size or smaller, serial and on rayon: a
//! counting global allocator proves it. Runs on the conformance checkpoints
//! of `testdata/embedders/`, rebuilt and converted here.

use std::ops::Range;

use lamina_kernels::alloc_count::{CountingAlloc, allocations, count_threads};
use lamina_kernels::pool::{Rayon, Serial, ThreadPool};
use lamina_model::convert::{ConvertOptions, OutType, convert};
use lamina_model::{Model, Workspace};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// `n` sequences of the given lengths packed into one batch, each with its
/// second segment from its middle on.
fn batch(lens: &[usize]) -> (Vec<u32>, Vec<Range<usize>>, Vec<usize>) {
    let (mut tokens, mut ranges, mut segs) = (Vec::new(), Vec::new(), Vec::new());
    for (s, &n) in lens.iter().enumerate() {
        let start = tokens.len();
        tokens.push(101);
        tokens.extend((1..n - 1).map(|i| 1000 + (i * 37 + s * 101) as u32 % 20_000));
        tokens.push(102);
        ranges.push(start..tokens.len());
        segs.push(n / 2);
    }
    (tokens, ranges, segs)
}

#[test]
fn encoder_forward_does_not_allocate_once_sized() {
    count_threads();
    let dir = tempfile::tempdir().unwrap();
    for (name, pooler) in [("minilm", false), ("nomic", false), ("ms-marco", true)] {
        let ckpt = lamina_testkit::checkpoint::write_embedder(name, dir.path()).unwrap();
        let out = dir.path().join(format!("{name}.gguf"));
        let opts = ConvertOptions {
            input: ckpt,
            output: out.clone(),
            out_type: OutType::F32,
            dense_modules: false,
            bert_pooler: pooler,
            model_id: None,
        };
        convert(&opts, &mut |_| {}).unwrap();
        let model = Model::open(&out).unwrap();
        assert_eq!(model.has_segment_b(), pooler, "{name}");
        let (big, big_seqs, big_segs) = batch(&[300, 40, 7, 90]);
        let smaller = [batch(&[12]), batch(&[3, 5, 200]), batch(&[437])];
        for pool in [&Serial as &dyn ThreadPool, &Rayon] {
            pool.install(&mut || {
                let mut ws = Workspace::new(&model.hp, 0);
                for _ in 0..2 {
                    model
                        .forward_segments(&mut ws, &big, &big_seqs, &big_segs, pool)
                        .unwrap();
                }
                let all = std::iter::once((&big, &big_seqs, &big_segs))
                    .chain(smaller.iter().map(|(t, s, b)| (t, s, b)));
                for (tokens, seqs, segs) in all {
                    let before = allocations();
                    model
                        .forward_segments(&mut ws, tokens, seqs, segs, pool)
                        .unwrap();
                    let after = allocations();
                    assert_eq!(
                        after,
                        before,
                        "{name}: {} tokens in {} sequences on {} threads",
                        tokens.len(),
                        seqs.len(),
                        pool.threads()
                    );
                    assert!(ws.hidden().iter().all(|x| x.is_finite()));
                }
            });
        }
    }
}
