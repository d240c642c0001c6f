//! AVX-512 attention over a run of a prompt's queries, key chunk by key
//! chunk: consecutive queries that start at the same key walk their keys
//! together, [`KEY_CHUNK`] rows at a time, so each chunk's key and value
//! rows are read from memory once for the whole run and then stay in the
//! core's cache while every query attends to them. Over a long cache a
//! query's rows outgrow L2, and reading them again for every query bounds
//! a prompt by the last-level cache. Each head keeps the bits it gets
//! alone: its blocks start where they do alone, and a chunk boundary is a
//! block boundary, where [`attend16_blocks`] continues from the running
//! maxima and sums.

use super::attention::{LOADS_F16, LOADS_F32, RowLoads, attend16_blocks, zero_rows};
use super::*;
use crate::x86_64::attention_run::query_run;

use crate::attention::{KEY_BLOCK, RowArgs};
use crate::x86_64::avx2::normalize;

/// Most queries one call walks together: their running maxima, sums and
/// query rows stay small beside a chunk of rows.
pub(crate) const CHUNKED_QUERIES: usize = 32;

/// Key rows of a chunk (a whole number of key blocks): with their value
/// rows, 256 KiB of f32 for heads of 128 values, well inside an L2.
const KEY_CHUNK: usize = 8 * KEY_BLOCK;

/// `ends.len()` queries of `R` heads each (`q[i]`, `out[i]`) that start at
/// key `rows.start`, each ending at `ends[i]`: the chunks of keys in order,
/// each for every query that reaches it, then each query's rows normalized.
#[inline(always)]
unsafe fn attend16_chunked<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    ends: &[usize],
    q: &[[*const f32; R]],
    out: &[[*mut f32; R]],
    loads: RowLoads,
) {
    // SAFETY: the wrapper checked `hd` values (a multiple of 16) at every
    // query and output row, and that the key and value rows up to each
    // query's end hold the head; the features are enabled in the entry
    // points.
    unsafe {
        let n = ends.len();
        let mut max = [[f32::NEG_INFINITY; R]; CHUNKED_QUERIES];
        let mut sum = [[0.0f32; R]; CHUNKED_QUERIES];
        for &o in &out[..n] {
            zero_rows(o, rows.hd);
        }
        let last = ends.iter().copied().max().unwrap_or(rows.start);
        let mut c0 = rows.start;
        while c0 < last {
            let c1 = (c0 + KEY_CHUNK).min(last);
            for i in 0..n {
                let end = ends[i].min(c1);
                if end > c0 {
                    let part = KeyRows {
                        start: c0,
                        end,
                        ..rows
                    };
                    attend16_blocks::<R, ESIZE>(
                        part,
                        q[i],
                        out[i],
                        loads,
                        &mut max[i],
                        &mut sum[i],
                    );
                }
            }
            c0 = c1;
        }
        for i in 0..n {
            normalize(&sum[i], out[i], rows.hd);
        }
    }
}

/// A chunked kernel's entry point: the rows (`start` shared, `end`
/// unused), each query's end, and the heads' query and output rows, query
/// after query.
type ChunkedKernel = unsafe fn(KeyRows, &[usize], &[*const f32], &[*mut f32]);

/// Runs are made of queries of one to four heads (a kv head's group as the
/// row kernels take it).
const CHUNKED_HEADS: usize = 4;

macro_rules! chunked_fns {
    ($($table:ident: $esize:literal, $loads:ident => $($name:ident: $r:literal),*;)*) => {$(
        $(
            target_fns! { avx512vl:
                unsafe fn $name(rows: KeyRows, ends: &[usize], q: &[*const f32], out: &[*mut f32]) {
                    const R: usize = $r;
                    let qs: [[*const f32; R]; CHUNKED_QUERIES] =
                        std::array::from_fn(|i| std::array::from_fn(|r| q.get(i * R + r).copied().unwrap_or(std::ptr::null())));
                    let os: [[*mut f32; R]; CHUNKED_QUERIES] =
                        std::array::from_fn(|i| std::array::from_fn(|r| out.get(i * R + r).copied().unwrap_or(std::ptr::null_mut())));
                    let n = ends.len();
                    // SAFETY: forwarded from the wrapper's checks (`n` ends,
                    // at most `CHUNKED_QUERIES`, and `R·n` rows of `hd` values).
                    unsafe { attend16_chunked::<R, $esize>(rows, ends, &qs[..n], &os[..n], $loads) }
                }
            }
        )*
        const $table: [ChunkedKernel; CHUNKED_HEADS] = [$($name),*];
    )*};
}

chunked_fns! {
    CHUNKED_F32: 4, LOADS_F32 =>
        z_chunked1_f32: 1, z_chunked2_f32: 2, z_chunked3_f32: 3, z_chunked4_f32: 4;
    CHUNKED_F16: 2, LOADS_F16 =>
        z_chunked1_f16: 1, z_chunked2_f16: 2, z_chunked3_f16: 3, z_chunked4_f16: 4;
}

/// Consecutive queries' rows of one kv head ([`crate::attention::AttendTileFn`]):
/// key chunk by key chunk where they are at most [`CHUNKED_QUERIES`] with the
/// same heads (one to four), key and value rows and first key; otherwise one
/// query at a time through [`super::attend_row`]. The same bits either way.
pub(crate) fn attend_chunked(args: &[RowArgs<'_>], outs: &mut [&mut [f32]]) {
    let Some(run) = query_run(args, outs, CHUNKED_HEADS, 16).filter(|run| run.n <= CHUNKED_QUERIES)
    else {
        for (a, o) in args.iter().zip(outs.iter_mut()) {
            super::attend_row(a.clone(), o);
        }
        return;
    };
    let kernel = if run.esize == 4 {
        CHUNKED_F32
    } else {
        CHUNKED_F16
    }[run.heads - 1];
    let (n, heads) = (run.n, run.heads);
    // SAFETY: the rows read lie inside the key and value rows (checked by
    // `query_run`), every query and output row holds `hd` values (a multiple
    // of 16) and the outputs are distinct `&mut` slices; at most
    // `CHUNKED_QUERIES` queries of `heads` heads; reachable only after
    // AVX-512 F/VL detection.
    unsafe {
        kernel(
            run.rows,
            &run.ends[..n],
            &run.q[..n * heads],
            &run.out[..n * heads],
        )
    }
}
