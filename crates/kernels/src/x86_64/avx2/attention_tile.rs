//! AVX2 attention over a tile of a prompt's queries: consecutive queries
//! that start at the same key share each key and value row of the blocks
//! they all attend, and each head keeps the bits it gets alone.

use super::*;

use crate::attention::RowArgs;
use crate::x86_64::attention_run::{TILED_HEADS, TileKernel, Tiles, tile_or_rows};

/// Queries a tile of `heads` heads each takes: four heads in all, so each
/// key and value row loaded feeds four heads' FMAs (as many as the score
/// and value loops keep in sixteen registers); one (no tile) for groups of
/// three or four, which share each key row among their own heads already.
pub(crate) const fn tile_queries(heads: usize) -> usize {
    match heads {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

/// `Q` queries of `R` heads each (`RQ = R·Q` heads, query after query at
/// `q` and `out`) that start at key `rows.start`: the key blocks up to
/// `rows.end` (whole blocks inside every query's range) for all `RQ` heads
/// at once, then each query's own blocks up to `ends[i]` for its `R` heads
/// alone, continued from the running maxima and sums, and each query's rows
/// normalized. Every head's blocks start where they do alone, so it gets
/// the bits of the single-query kernel.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn attend_tile_with<const R: usize, const Q: usize, const RQ: usize, const ESIZE: usize>(
    rows: KeyRows,
    ends: &[usize],
    q: &[*const f32],
    out: &[*mut f32],
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: the wrapper checked `hd` values (a multiple of 8) at every
    // `q[r]` and `out[r]` and that the key and value rows up to each query's
    // end hold the head; the features are enabled in the entry points.
    unsafe {
        let (mut qt, mut ot) = ([std::ptr::null(); RQ], [std::ptr::null_mut(); RQ]);
        for r in 0..RQ {
            (qt[r], ot[r]) = (q[r], out[r]);
        }
        zero_rows(ot, rows.hd);
        let (mut max, mut sum) = ([f32::NEG_INFINITY; RQ], [0.0f32; RQ]);
        attend_blocks::<RQ, ESIZE, false>(rows, qt, ot, load8, &mut max, &mut sum);
        for i in 0..Q {
            let (mut qi, mut oi) = ([std::ptr::null(); R], [std::ptr::null_mut(); R]);
            let (mut m, mut s) = ([0.0f32; R], [0.0f32; R]);
            for r in 0..R {
                (qi[r], oi[r]) = (qt[i * R + r], ot[i * R + r]);
                (m[r], s[r]) = (max[i * R + r], sum[i * R + r]);
            }
            if ends[i] > rows.end {
                let rest = KeyRows {
                    start: rows.end,
                    end: ends[i],
                    ..rows
                };
                attend_blocks::<R, ESIZE, false>(rest, qi, oi, load8, &mut m, &mut s);
            }
            normalize(&s, oi, rows.hd);
        }
    }
}

macro_rules! tile_fns {
    ($($table:ident: $esize:literal, $load:ident =>
        $($name:ident: $r:literal x $q:literal = $rq:literal),*;)*) => {$(
        $(
            target_fns! { avx2:
                unsafe fn $name(rows: KeyRows, ends: &[usize], q: &[*const f32], out: &[*mut f32]) {
                    // SAFETY: forwarded from the wrapper's checks (`Q` ends and
                    // `R·Q` rows of `hd` values).
                    unsafe { attend_tile_with::<$r, $q, $rq, $esize>(rows, ends, q, out, $load) }
                }
            }
        )*
        const $table: [TileKernel; TILED_HEADS] = [$($name),*];
    )*};
}

tile_fns! {
    TILE_F32: 4, load8_f32 => k_tile1_f32: 1 x 4 = 4, k_tile2_f32: 2 x 2 = 4;
    TILE_F16: 2, load8_f16 => k_tile1_f16: 1 x 4 = 4, k_tile2_f16: 2 x 2 = 4;
}

/// Consecutive queries' rows of one kv head ([`crate::attention::AttendTileFn`]):
/// through the tile kernels where [`tile_queries`] of them share their first
/// key, else one at a time through [`attend_row`] (see
/// [`tile_or_rows`]). The same bits either way.
pub(crate) fn attend_tile(args: &[RowArgs<'_>], outs: &mut [&mut [f32]]) {
    const TILES: Tiles = Tiles {
        f32: TILE_F32,
        f16: TILE_F16,
        queries: tile_queries,
        lanes: 8,
        row: attend_row,
    };
    tile_or_rows(&TILES, args, outs)
}
