//! AVX-512 attention over a tile of a prompt's queries: consecutive queries
//! that start at the same key share each key and value row of the blocks
//! they all attend, and each head keeps the bits it gets alone.

use super::attention::{LOADS_F16, LOADS_F32, RowLoads, attend16_blocks, zero_rows};
use super::*;
use crate::x86_64::attention_run::{TILED_HEADS, TileKernel, Tiles, tile_or_rows};

use crate::attention::RowArgs;
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
/// through the tile kernels where [`tile_queries`] of them share their first
/// key, else one at a time through [`super::attend_row`] (see
/// [`tile_or_rows`]). The same bits either way.
pub(crate) fn attend_tile(args: &[RowArgs<'_>], outs: &mut [&mut [f32]]) {
    const TILES: Tiles = Tiles {
        f32: TILE_F32,
        f16: TILE_F16,
        queries: tile_queries,
        lanes: 16,
        row: super::attend_row,
    };
    tile_or_rows(&TILES, args, outs)
}
