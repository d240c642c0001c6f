//! Once its scratch is sized, a matmul call allocates nothing (the
//! per-token path must not touch the allocator): a counting global
//! allocator proves it, for T = 1 and a tiled batch, serial and on rayon
//! (from inside its pool, as the engine calls it).

use lamina_kernels::matmul::{Layout, Scratch, Weights, matmul};
use lamina_kernels::pool::{Rayon, Serial, ThreadPool};
use lamina_kernels::{GgmlType, kernels};
// The crate's own counting allocator, which dependents get through the
// `test-support` feature.
#[path = "../src/alloc_count.rs"]
mod alloc_count;

use alloc_count::{CountingAlloc, allocations, count_threads};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

#[test]
fn matmul_does_not_allocate_once_scratch_is_sized() {
    count_threads();
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
        let k = kernels(ty).unwrap();
        // Seven tokens: a padded last group for every tile width.
        let (rows, cols, tokens) = (96, 512, 7);
        let w = vec![0x11u8; rows * k.weight_row_bytes(cols)];
        let x: Vec<f32> = (0..tokens * cols).map(|i| (i % 17) as f32 - 8.0).collect();
        let mut y = vec![0f32; tokens * rows];
        let mut scratch = Scratch::with_capacity(k, cols, tokens);
        // The file's rows, and (where the ISA has them) stored panels: the
        // same bytes read another way suffice to exercise the path.
        let layouts = [Some(Layout::Rows), k.stored.map(|_| Layout::Panels)];
        for (wm, pool) in layouts
            .into_iter()
            .flatten()
            .map(|layout| Weights {
                kernels: k,
                data: &w,
                rows,
                cols,
                layout,
            })
            .flat_map(|wm| [(wm, &Serial as &dyn ThreadPool), (wm, &Rayon)])
        {
            // From inside the pool, as the engine calls it: from outside, rayon
            // injects every call's job into its global queue, which allocates
            // a block every 63 jobs.
            pool.install(&mut || {
                for t in [1, tokens] {
                    let mut call = || {
                        let y = &mut y[..t * rows];
                        matmul(&wm, &x[..t * cols], t, y, &mut scratch, pool).unwrap()
                    };
                    // Warm-up: rayon starts its threads and their queues on first use.
                    (0..8).for_each(|_| call());
                    let before = allocations();
                    (0..3).for_each(|_| call());
                    let after = allocations();
                    assert_eq!(
                        after,
                        before,
                        "{ty} {:?} T={t} on {}: {} allocations",
                        wm.layout,
                        pool.threads(),
                        after - before
                    );
                }
            });
        }
    }
}
