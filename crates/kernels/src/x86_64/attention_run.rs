//! A run of a prompt's consecutive queries of one kv head, checked and laid
//! out for the kernels that take several queries at once (AVX2's and
//! AVX-512's tiles, AVX-512's chunks).

use super::avx2::KeyRows;
use crate::attention::{AttendFn, KEY_BLOCK};

use crate::attention::{KvRows, MAX_HEAD_DIM, RowArgs};

/// Most queries a run holds.
pub(in crate::x86_64) const MAX_RUN_QUERIES: usize = 32;
/// Most heads a query of a run has.
pub(in crate::x86_64) const MAX_RUN_HEADS: usize = 4;

/// A run's rows and pointers: `n` queries of `heads` heads each, query
/// after query in `q` and `out`, the key rows from `rows.start` (shared)
/// up to `rows.end` (the last query's end), each query's end in `ends`.
pub(in crate::x86_64) struct QueryRun {
    pub n: usize,
    pub heads: usize,
    pub rows: KeyRows,
    /// Bytes of a key or value element: 4 (f32 rows) or 2 (f16 rows).
    pub esize: usize,
    pub ends: [usize; MAX_RUN_QUERIES],
    pub q: [*const f32; MAX_RUN_QUERIES * MAX_RUN_HEADS],
    pub out: [*mut f32; MAX_RUN_QUERIES * MAX_RUN_HEADS],
}

/// `args` as one run where they can be: at most [`MAX_RUN_QUERIES`]
/// queries, each of the same one to `max_heads` heads (a multiple of
/// `lanes` values, at most [`MAX_HEAD_DIM`]), key and value rows (both f32 or both
/// f16), scaling and first key; `None` otherwise. Checks that every key
/// row up to the last query's end holds the head.
pub(in crate::x86_64) fn query_run(
    args: &[RowArgs<'_>],
    outs: &mut [&mut [f32]],
    max_heads: usize,
    lanes: usize,
) -> Option<QueryRun> {
    assert_eq!(args.len(), outs.len(), "one output per query");
    let a0 = args.first()?;
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
    let fit = (1..=max_heads.min(MAX_RUN_HEADS)).contains(&heads)
        && hd.is_multiple_of(lanes)
        && hd <= MAX_HEAD_DIM
        && args.len() <= MAX_RUN_QUERIES
        && args.iter().zip(outs.iter()).all(|(a, o)| {
            same_rows(a)
                && a.head_dim == hd
                && a.q.len() == heads * hd
                && o.len() == a.q.len()
                && (a.off, a.kv_row, a.scale, a.softcap)
                    == (a0.off, a0.kv_row, a0.scale, a0.softcap)
                && a.keys.start == a0.keys.start
        });
    if !fit {
        return None;
    }
    let start = a0.keys.start;
    let last = args.iter().map(|a| a.keys.end).max().unwrap_or(start);
    // Every key row up to the last query's end must hold the head.
    let fits = |len: usize| last == start || (last - 1) * a0.kv_row + a0.off + hd <= len;
    let (kp, vp, esize): (*const u8, *const u8, usize) = match (a0.k, a0.v) {
        (KvRows::F32(k), KvRows::F32(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                k.as_ptr().wrapping_add(a0.off).cast(),
                v.as_ptr().wrapping_add(a0.off).cast(),
                4,
            )
        }
        (KvRows::F16(k), KvRows::F16(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows ..{last}");
            (
                k.as_ptr().wrapping_add(a0.off).cast(),
                v.as_ptr().wrapping_add(a0.off).cast(),
                2,
            )
        }
        _ => unreachable!("`same_rows` checked the row types"),
    };
    let mut run = QueryRun {
        n: args.len(),
        heads,
        rows: KeyRows {
            hd,
            k: kp,
            v: vp,
            row: a0.kv_row * esize,
            start,
            end: last,
            scale: a0.scale,
            softcap: a0.softcap,
        },
        esize,
        ends: [0; MAX_RUN_QUERIES],
        q: [std::ptr::null(); MAX_RUN_QUERIES * MAX_RUN_HEADS],
        out: [std::ptr::null_mut(); MAX_RUN_QUERIES * MAX_RUN_HEADS],
    };
    for (i, (a, o)) in args.iter().zip(outs.iter_mut()).enumerate() {
        run.ends[i] = a.keys.end;
        // Each head's rows from one pointer per query (a reborrow per head
        // would invalidate the pointers taken before it).
        let (qp, op) = (a.q.as_ptr(), o.as_mut_ptr());
        for r in 0..heads {
            run.q[i * heads + r] = qp.wrapping_add(r * hd);
            run.out[i * heads + r] = op.wrapping_add(r * hd);
        }
    }
    Some(run)
}

/// A tile kernel's entry point: the shared rows (`end`: the end of the
/// shared blocks), each query's end, and the heads' query and output rows,
/// query after query.
pub(in crate::x86_64) type TileKernel = unsafe fn(KeyRows, &[usize], &[*const f32], &[*mut f32]);

/// Tiles are made of queries of one or two heads.
pub(in crate::x86_64) const TILED_HEADS: usize = 2;

/// An ISA's tile kernels: for f32 and for f16 rows, by heads per query.
pub(in crate::x86_64) struct Tiles {
    pub f32: [TileKernel; TILED_HEADS],
    pub f16: [TileKernel; TILED_HEADS],
    /// Queries a tile of so many heads takes.
    pub queries: fn(usize) -> usize,
    /// The head dimension's multiple the kernels need.
    pub lanes: usize,
    /// The ISA's row kernel, for what no tile takes.
    pub row: AttendFn,
}

/// Consecutive queries' rows of one kv head ([`crate::attention::AttendTileFn`]):
/// through `tiles` where there are `tiles.queries` of them with the same
/// heads, key and value rows and first key, and at least one key block they
/// all attend (or the same keys, however few); otherwise one query at a
/// time through `tiles.row`. The same bits either way.
pub(in crate::x86_64) fn tile_or_rows(
    tiles: &Tiles,
    args: &[RowArgs<'_>],
    outs: &mut [&mut [f32]],
) {
    let run = query_run(args, outs, TILED_HEADS, tiles.lanes).filter(|run| {
        run.n == (tiles.queries)(run.heads) && args.iter().all(|a| !a.keys.is_empty())
    });
    // The key blocks every query attends: all its keys where every query
    // ends where the first does (a sequence attending to itself, however
    // short), else the whole blocks the shortest one attends, since a
    // longer query's blocks run on past its end.
    let shared = |start: usize| {
        let shared = args.iter().map(|a| a.keys.end).min().unwrap_or(start);
        if args.iter().all(|a| a.keys.end == args[0].keys.end) {
            shared
        } else {
            start + shared.saturating_sub(start) / KEY_BLOCK * KEY_BLOCK
        }
    };
    let Some(run) = run.filter(|run| shared(run.rows.start) > run.rows.start) else {
        for (a, o) in args.iter().zip(outs.iter_mut()) {
            (tiles.row)(a.clone(), o);
        }
        return;
    };
    let kernel = if run.esize == 4 { tiles.f32 } else { tiles.f16 }[run.heads - 1];
    let rows = KeyRows {
        end: shared(run.rows.start),
        ..run.rows
    };
    let (n, heads) = (run.n, run.heads);
    // SAFETY: the rows read lie inside the key and value rows (checked by
    // `query_run`), every query and output row holds `hd` values (a multiple
    // of the kernels' lanes) and the outputs are distinct `&mut` slices; `n`
    // queries of `heads` heads is the kernel's shape (`tiles.queries`);
    // `tiles` is reachable only after its ISA's detection.
    unsafe {
        kernel(
            rows,
            &run.ends[..n],
            &run.q[..n * heads],
            &run.out[..n * heads],
        )
    }
}
