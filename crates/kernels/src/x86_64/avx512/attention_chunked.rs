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
    use crate::attention::KvRows;
    assert_eq!(args.len(), outs.len(), "one output per query");
    let Some(a0) = args.first() else {
        return;
    };
    let hd = a0.head_dim;
    let heads = a0.q.len() / hd.max(1);
    let same_rows = |a: &RowArgs<'_>| match ((a.k, a.v), (a0.k, a0.v)) {
        ((KvRows::F32(k), KvRows::F32(v)), (KvRows::F32(k0), KvRows::F32(v0))) => {
            std::ptr::eq(k, k0) && std::ptr::eq(v, v0)
        }
        ((KvRows::F16(k), KvRows::F16(v)), (KvRows::F16(k0), KvRows::F16(v0))) => {
            std::ptr::eq(k, k0) && std::ptr::eq(v, v0)
        }
        _ => false,
    };
    let chunked = (1..=CHUNKED_HEADS).contains(&heads)
        && hd.is_multiple_of(16)
        && hd <= crate::attention::MAX_HEAD_DIM
        && args.len() <= CHUNKED_QUERIES
        && args.iter().zip(outs.iter()).all(|(a, o)| {
            same_rows(a)
                && a.head_dim == hd
                && a.q.len() == heads * hd
                && o.len() == a.q.len()
                && (a.off, a.kv_row, a.scale, a.softcap)
                    == (a0.off, a0.kv_row, a0.scale, a0.softcap)
                && a.keys.start == a0.keys.start
        });
    if !chunked {
        for (a, o) in args.iter().zip(outs.iter_mut()) {
            super::attend_row(a.clone(), o);
        }
        return;
    }
    let start = a0.keys.start;
    let last = args.iter().map(|a| a.keys.end).max().unwrap_or(start);
    // Every key row up to the last query's end must hold the head.
    let fits = |len: usize| last == start || (last - 1) * a0.kv_row + a0.off + hd <= len;
    let (kernel, kp, vp, esize): (ChunkedKernel, *const u8, *const u8, usize) = match (a0.k, a0.v) {
        (KvRows::F32(k), KvRows::F32(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                CHUNKED_F32[heads - 1],
                k.as_ptr().wrapping_add(a0.off).cast(),
                v.as_ptr().wrapping_add(a0.off).cast(),
                4,
            )
        }
        (KvRows::F16(k), KvRows::F16(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                CHUNKED_F16[heads - 1],
                k.as_ptr().wrapping_add(a0.off).cast(),
                v.as_ptr().wrapping_add(a0.off).cast(),
                2,
            )
        }
        _ => unreachable!("`chunked` checked the row types"),
    };
    let mut ends = [0usize; CHUNKED_QUERIES];
    let mut q = [std::ptr::null::<f32>(); CHUNKED_QUERIES * CHUNKED_HEADS];
    let mut out = [std::ptr::null_mut::<f32>(); CHUNKED_QUERIES * CHUNKED_HEADS];
    for (i, (a, o)) in args.iter().zip(outs.iter_mut()).enumerate() {
        ends[i] = a.keys.end;
        // Each head's rows from one pointer per query (a reborrow per head
        // would invalidate the pointers taken before it).
        let (qp, op) = (a.q.as_ptr(), o.as_mut_ptr());
        for r in 0..heads {
            q[i * heads + r] = qp.wrapping_add(r * hd);
            out[i * heads + r] = op.wrapping_add(r * hd);
        }
    }
    let rows = KeyRows {
        hd,
        k: kp,
        v: vp,
        row: a0.kv_row * esize,
        start,
        end: last,
        scale: a0.scale,
        softcap: a0.softcap,
    };
    let n = args.len();
    // SAFETY: the rows read lie inside `k` and `v` (checked above), every
    // query and output row holds `hd` values (a multiple of 16) and the
    // outputs are distinct `&mut` slices; at most `CHUNKED_QUERIES` queries
    // of `heads` heads; reachable only after AVX-512 F/VL detection.
    unsafe { kernel(rows, &ends[..n], &q[..n * heads], &out[..n * heads]) }
}
