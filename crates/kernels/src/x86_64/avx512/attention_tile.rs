//! AVX-512 attention over a tile of a prompt's queries: consecutive queries
//! that start at the same key share each key and value row of the blocks
//! they all attend, and each head keeps the bits it gets alone.

use super::attention::{LOADS_F16, LOADS_F32, RowLoads, attend16_blocks, zero_rows};
use super::*;

use crate::attention::{KEY_BLOCK, RowArgs};
use crate::x86_64::avx2::normalize;

/// Queries a tile of `heads` heads each takes: eight heads in all, so
/// each key and value row loaded feeds eight heads' FMAs (the score loop
/// takes them four at a time, which keeps its sums in registers); one (no
/// tile) for groups of three or four, which share each key row among their
/// own heads already.
pub(crate) const fn tile_queries(heads: usize) -> usize {
    match heads {
        1 => 8,
        2 => 4,
        _ => 1,
    }
}

/// `Q` queries of `R` heads each (`RQ = R·Q` heads, query after query at
/// `q` and `out`) that start at key `rows.start`: the key blocks up to
/// `rows.end` (whole blocks inside every query's range) for all `RQ` heads
/// at once, then each query's own blocks up to `ends[i]` for its `R` heads
/// alone, continued from the running maxima and sums, and each query's rows
/// normalized. Every head's blocks start where they do alone, so it gets
/// the bits of [`super::attention`]'s single-query kernel.
#[inline(always)]
unsafe fn attend16_tile<const R: usize, const Q: usize, const RQ: usize, const ESIZE: usize>(
    rows: KeyRows,
    ends: [usize; Q],
    q: [*const f32; RQ],
    out: [*mut f32; RQ],
    loads: RowLoads,
) {
    // SAFETY: the wrapper checked `hd` values (a multiple of 16) at every
    // `q[r]` and `out[r]` and that the key and value rows up to each query's
    // end hold the head; the features are enabled in the entry points.
    unsafe {
        zero_rows(out, rows.hd);
        let (mut max, mut sum) = ([f32::NEG_INFINITY; RQ], [0.0f32; RQ]);
        attend16_blocks::<RQ, ESIZE>(rows, q, out, loads, &mut max, &mut sum);
        for (i, &end) in ends.iter().enumerate() {
            let (qi, oi): ([*const f32; R], [*mut f32; R]) = (
                std::array::from_fn(|r| q[i * R + r]),
                std::array::from_fn(|r| out[i * R + r]),
            );
            let mut m: [f32; R] = std::array::from_fn(|r| max[i * R + r]);
            let mut s: [f32; R] = std::array::from_fn(|r| sum[i * R + r]);
            if end > rows.end {
                let rest = KeyRows {
                    start: rows.end,
                    end,
                    ..rows
                };
                attend16_blocks::<R, ESIZE>(rest, qi, oi, loads, &mut m, &mut s);
            }
            normalize(&s, oi, rows.hd);
        }
    }
}

/// A tile kernel's entry point: the shared rows (`end`: the end of the
/// shared blocks), each query's end, and the heads' query and output rows,
/// query after query.
type TileKernel = unsafe fn(KeyRows, &[usize], &[*const f32], &[*mut f32]);

/// Tiles are made of queries of one or two heads.
const TILED_HEADS: usize = 2;

macro_rules! tile_fns {
    ($($table:ident: $esize:literal, $loads:ident =>
        $($name:ident: $r:literal x $q:literal = $rq:literal),*;)*) => {$(
        $(
            target_fns! { avx512vl:
                unsafe fn $name(rows: KeyRows, ends: &[usize], q: &[*const f32], out: &[*mut f32]) {
                    // SAFETY: forwarded from the wrapper's checks (`Q` ends and
                    // `R·Q` rows of `hd` values).
                    unsafe {
                        attend16_tile::<$r, $q, $rq, $esize>(
                            rows,
                            std::array::from_fn(|i| ends[i]),
                            std::array::from_fn(|i| q[i]),
                            std::array::from_fn(|i| out[i]),
                            $loads,
                        )
                    }
                }
            }
        )*
        const $table: [TileKernel; TILED_HEADS] = [$($name),*];
    )*};
}

tile_fns! {
    TILE_F32: 4, LOADS_F32 => z_tile1_f32: 1 x 8 = 8, z_tile2_f32: 2 x 4 = 8;
    TILE_F16: 2, LOADS_F16 => z_tile1_f16: 1 x 8 = 8, z_tile2_f16: 2 x 4 = 8;
}

/// Consecutive queries' rows of one kv head ([`crate::attention::AttendTileFn`]):
/// through the tile kernel where there are [`tile_queries`] of them with the
/// same heads, key and value rows and first key, and at least one key block
/// they all attend (or the same keys, however few); otherwise, or for what
/// is left, one query at a time through [`super::attend_row`]. The same
/// bits either way.
pub(crate) fn attend_tile(args: &[RowArgs<'_>], outs: &mut [&mut [f32]]) {
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
    let tiled = (1..=TILED_HEADS).contains(&heads)
        && hd.is_multiple_of(16)
        && hd <= crate::attention::MAX_HEAD_DIM
        && args.len() == tile_queries(heads)
        && args.iter().zip(outs.iter()).all(|(a, o)| {
            same_rows(a)
                && a.head_dim == hd
                && a.q.len() == heads * hd
                && o.len() == a.q.len()
                && (a.off, a.kv_row, a.scale, a.softcap)
                    == (a0.off, a0.kv_row, a0.scale, a0.softcap)
                && a.keys.start == a0.keys.start
                && !a.keys.is_empty()
        });
    let start = a0.keys.start;
    // The key blocks every query attends: all its keys where every query
    // ends where the first does (a sequence attending to itself, however
    // short), else the whole blocks the shortest one attends, since a
    // longer query's blocks run on past its end.
    let first_end = a0.keys.end;
    let shared = args.iter().map(|a| a.keys.end).min().unwrap_or(start);
    let shared = if args.iter().all(|a| a.keys.end == first_end) {
        shared
    } else {
        start + shared.saturating_sub(start) / KEY_BLOCK * KEY_BLOCK
    };
    if !tiled || shared == start {
        for (a, o) in args.iter().zip(outs.iter_mut()) {
            super::attend_row(a.clone(), o);
        }
        return;
    }
    let last = args.iter().map(|a| a.keys.end).max().unwrap_or(start);
    // Every key row up to the last query's end must hold the head.
    let fits = |len: usize| (last - 1) * a0.kv_row + a0.off + hd <= len;
    let (kernel, kp, vp, esize): (TileKernel, *const u8, *const u8, usize) = match (a0.k, a0.v) {
        (KvRows::F32(k), KvRows::F32(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                TILE_F32[heads - 1],
                k[a0.off..].as_ptr().cast(),
                v[a0.off..].as_ptr().cast(),
                4,
            )
        }
        (KvRows::F16(k), KvRows::F16(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                TILE_F16[heads - 1],
                k[a0.off..].as_ptr().cast(),
                v[a0.off..].as_ptr().cast(),
                2,
            )
        }
        _ => unreachable!("`tiled` checked the row types"),
    };
    let mut ends = [0usize; 8];
    let mut q = [std::ptr::null::<f32>(); 8];
    let mut out = [std::ptr::null_mut::<f32>(); 8];
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
        end: shared,
        scale: a0.scale,
        softcap: a0.softcap,
    };
    let n = args.len();
    // SAFETY: the rows read lie inside `k` and `v` (checked above), every
    // query and output row holds `hd` values (a multiple of 16) and the
    // outputs are distinct `&mut` slices; `n` queries of `heads` heads is the
    // kernel's shape (`tile_queries`); reachable only after AVX-512 F/VL
    // detection.
    unsafe { kernel(rows, &ends[..n], &q[..n * heads], &out[..n * heads]) }
}
