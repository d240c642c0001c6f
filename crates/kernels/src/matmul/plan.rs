//! Which strategy a call takes: a pure function of the matrices' kernels,
//! shapes and layouts and of the token count, so every crossover is tested
//! without running a kernel.

use super::{Layout, Weights};
use crate::act_pack;
#[cfg(test)]
use crate::dispatch::F32Tiles;
use crate::dispatch::{F32Tile, TileFns};
use crate::panel::PanelFns;

/// How [`super::matmul_many`] runs a call whose shapes are checked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Strategy {
    /// The matrices differ in weight type, columns or layout: each runs alone.
    OneByOne,
    /// Rows of no values: every output is zero.
    Empty,
    /// One token over ggml's rows: the row kernel (eight rows at once where
    /// the type has an eight-row kernel), tasks tapered per thread.
    SingleRow,
    /// Tokens without tiles: groups of four through the 1×4 kernel where the
    /// type has one, the rest through the row kernels.
    Rows,
    /// Two tokens or more through the tiles over packed activations, a lone
    /// last token through the row kernels.
    Tiles(TileFns),
    /// Two tokens or more of float weights through the type's row × token
    /// tiles.
    F32Tiles(F32Tile),
    /// A large batch: ggml's rows unpacked into panels once per call.
    Panels(PanelFns),
    /// A large batch over stored panels that unpack to the type's panels.
    UnpackedStoredPanels(PanelFns),
    /// Stored panels multiplied where they lie.
    StoredPanels(PanelFns),
    /// One token over stored panels of any weight types: one parallel region.
    StoredSingle,
}

/// The strategy for `wms` against `tokens` tokens (shapes already checked:
/// stored panels come with their kernels).
pub(crate) fn plan(wms: &[&Weights<'_>], tokens: usize) -> Strategy {
    let k = wms[0].kernels;
    let cols = wms[0].cols;
    let layout = wms[0].layout;
    if tokens == 1
        && cols > 0
        && wms
            .iter()
            .all(|w| w.layout == Layout::Panels && w.cols == cols)
    {
        // Whatever their types: one region for all of them.
        return Strategy::StoredSingle;
    }
    if wms
        .iter()
        .any(|w| w.kernels.weight != k.weight || w.cols != cols || w.layout != layout)
    {
        return Strategy::OneByOne;
    }
    if cols == 0 {
        return Strategy::Empty;
    }
    if layout == Layout::Panels {
        let (Some(stored), Some(panel)) = (k.stored, k.panel) else {
            unreachable!("stored panels without their kernels")
        };
        return match stored.unpack.filter(|_| tokens >= stored.unpack_tokens) {
            // Unpacked per call like the file's rows, from the stored bytes.
            Some(unpack) => Strategy::UnpackedStoredPanels(PanelFns { unpack, ..panel }),
            // Nothing to unpack: stored panels take every batch.
            None => Strategy::StoredPanels(stored.panel_fns(panel)),
        };
    }
    if let Some(tiles) = k.f32_tiles.filter(|_| tokens >= 2) {
        return Strategy::F32Tiles(tiles.for_tokens(tokens));
    }
    if let Some(panel) = k.panel.filter(|p| tokens >= p.min_tokens) {
        return Strategy::Panels(panel);
    }
    match k
        .tiles
        .filter(|_| tokens >= 2 && act_pack::needs_packing(k.activation))
    {
        Some(tiles) => Strategy::Tiles(tiles),
        None if tokens == 1 => Strategy::SingleRow,
        None => Strategy::Rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::TypeKernels;
    use crate::panel::{PANEL_ROWS, STORED_UNPACK_TOKENS, StoredPanelFns};
    use crate::{GgmlType, Isa, kernels_for};

    /// Every weight type with kernels.
    const TYPES: [GgmlType; 13] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    // Kernels `plan` only looks at, never calls.
    fn no_tile8(_: usize, _: &[u8], _: &[u8]) -> [f32; 8] {
        unreachable!("plan calls no kernel")
    }
    fn no_tile4(_: usize, _: &[u8], _: &[u8]) -> [f32; 4] {
        unreachable!("plan calls no kernel")
    }
    fn no_bytes(_: usize, _: &[u8], _: &mut [u8]) {
        unreachable!("plan calls no kernel")
    }
    fn no_panel(_: usize, _: &[u8], _: &[u8], _: &mut [f32]) {
        unreachable!("plan calls no kernel")
    }
    fn no_row(_: usize, _: &[u8], _: usize, _: &mut [u8]) {
        unreachable!("plan calls no kernel")
    }
    fn no_dequantize(_: usize, _: &[u8], _: usize, _: &mut [f32]) {
        unreachable!("plan calls no kernel")
    }
    fn other_unpack(_: usize, _: &[u8], _: &mut [u8]) {
        unreachable!("plan calls no kernel")
    }

    const MIN_TOKENS: usize = 32;

    fn scalar(ty: GgmlType) -> TypeKernels {
        *kernels_for(ty, Isa::Scalar).unwrap()
    }
    fn tiles() -> TileFns {
        TileFns {
            x16: None,
            x12: None,
            x8: no_tile8,
            x4: no_tile4,
            sum_shift: 7,
        }
    }
    fn panel() -> PanelFns {
        PanelFns {
            unpack: no_bytes,
            prepare: no_bytes,
            quantize_prepared: None,
            wide: no_panel,
            narrow: no_panel,
            pair: None,
            many: None,
            block_bytes: 576,
            act_block_bytes: 40,
            block_values: 32,
            min_tokens: MIN_TOKENS,
        }
    }
    fn stored(unpack: bool) -> StoredPanelFns {
        StoredPanelFns {
            store: no_bytes,
            row: no_row,
            dequantize_row: no_dequantize,
            single: no_panel,
            single_reads_quantized: false,
            wide: no_panel,
            narrow: no_panel,
            pair: None,
            many: None,
            block_bytes: 352,
            unpack: unpack.then_some(other_unpack as crate::panel::UnpackFn),
            unpack_tokens: STORED_UNPACK_TOKENS,
        }
    }
    /// A type's entry on an ISA with tiles, panels and (maybe) stored panels.
    fn with(ty: GgmlType, stored_fns: Option<StoredPanelFns>) -> TypeKernels {
        TypeKernels {
            tiles: Some(tiles()),
            panel: Some(panel()),
            stored: stored_fns,
            ..scalar(ty)
        }
    }
    fn weights(k: &TypeKernels, layout: Layout) -> Weights<'_> {
        Weights {
            kernels: k,
            data: &[],
            rows: 2 * PANEL_ROWS,
            cols: 256,
            layout,
        }
    }
    fn name(s: Strategy) -> &'static str {
        match s {
            Strategy::OneByOne => "one by one",
            Strategy::Empty => "empty",
            Strategy::SingleRow => "single row",
            Strategy::Rows => "rows",
            Strategy::Tiles(_) => "tiles",
            Strategy::F32Tiles(_) => "f32 tiles",
            Strategy::Panels(_) => "panels",
            Strategy::UnpackedStoredPanels(_) => "unpacked stored panels",
            Strategy::StoredPanels(_) => "stored panels",
            Strategy::StoredSingle => "stored single",
        }
    }
    fn plan_one(k: &TypeKernels, layout: Layout, tokens: usize) -> &'static str {
        name(plan(&[&weights(k, layout)], tokens))
    }

    /// Float weights with a row × token tile take it from two tokens on, for
    /// every batch; one token streams rows.
    #[test]
    fn f32_rows_cross_to_f32_tiles_at_two() {
        fn no_f32_tile(_: usize, _: &[u8], _: &[u8], _: &mut [f32], _: crate::dispatch::TileHint) {
            unreachable!("plan calls no kernel")
        }
        let k = TypeKernels {
            f32_tiles: Some(F32Tiles {
                narrow: F32Tile {
                    tile: no_f32_tile,
                    rows: 4,
                    tokens: 3,
                },
                wide: None,
                widen: None,
            }),
            ..scalar(GgmlType::F32)
        };
        let at = |t| plan_one(&k, Layout::Rows, t);
        assert_eq!(at(0), "rows");
        assert_eq!(at(1), "single row");
        for t in [2, 3, 4, 512] {
            assert_eq!(at(t), "f32 tiles", "{t} tokens");
        }
        // Without the tile: rows for every batch.
        assert_eq!(plan_one(&scalar(GgmlType::F32), Layout::Rows, 512), "rows");
    }

    /// A wide F32 tile takes batches of its width and more; narrower ones
    /// keep the narrow tile rather than pad the wide one.
    #[test]
    fn f32_batches_take_the_wide_tile_from_its_width() {
        fn no_f32_tile(_: usize, _: &[u8], _: &[u8], _: &mut [f32], _: crate::dispatch::TileHint) {
            unreachable!("plan calls no kernel")
        }
        let tile = |tokens| F32Tile {
            tile: no_f32_tile,
            rows: 4,
            tokens,
        };
        let tiles = F32Tiles {
            narrow: tile(3),
            wide: Some(tile(12)),
            widen: None,
        };
        let width = |t| tiles.for_tokens(t).tokens;
        assert_eq!([2, 3, 11, 12, 13, 512].map(width), [3, 3, 3, 12, 12, 12]);
        let narrow = F32Tiles {
            wide: None,
            ..tiles
        };
        assert_eq!(narrow.for_tokens(512).tokens, 3);
    }

    /// ggml's rows with tiles and panels: one token streams rows, then tiles
    /// from two tokens, then panels from `min_tokens`.
    #[test]
    fn rows_cross_to_tiles_at_two_and_to_panels_at_min_tokens() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            let k = with(ty, None);
            let at = |t| plan_one(&k, Layout::Rows, t);
            assert_eq!(at(0), "rows", "{ty}");
            assert_eq!(at(1), "single row", "{ty}");
            assert_eq!(at(2), "tiles", "{ty}");
            assert_eq!(at(3), "tiles", "{ty}");
            assert_eq!(at(MIN_TOKENS - 1), "tiles", "{ty}");
            assert_eq!(at(MIN_TOKENS), "panels", "{ty}");
            assert_eq!(at(MIN_TOKENS + 1), "panels", "{ty}");
            assert_eq!(at(512), "panels", "{ty}");
        }
    }

    /// Without tiles or panels (the scalar table, or activations the tiles
    /// cannot pack) every batch takes the row kernels.
    #[test]
    fn without_tiles_or_panels_batches_take_rows() {
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q6_K,
            GgmlType::F16,
        ] {
            let k = scalar(ty);
            for (tokens, want) in [(0, "rows"), (1, "single row"), (2, "rows"), (512, "rows")] {
                assert_eq!(plan_one(&k, Layout::Rows, tokens), want, "{ty} T={tokens}");
            }
        }
        // F16 activations are not packed, so its tiles are never taken.
        let k = TypeKernels {
            tiles: Some(tiles()),
            ..scalar(GgmlType::F16)
        };
        assert!(!act_pack::needs_packing(k.activation));
        assert_eq!(plan_one(&k, Layout::Rows, 2), "rows");
        assert_eq!(plan_one(&k, Layout::Rows, 16), "rows");
        // Tiles without panels take every batch from two tokens.
        let k = TypeKernels {
            panel: None,
            ..with(GgmlType::Q8_0, None)
        };
        assert_eq!(plan_one(&k, Layout::Rows, 1), "single row");
        assert_eq!(plan_one(&k, Layout::Rows, 2), "tiles");
        assert_eq!(plan_one(&k, Layout::Rows, 4096), "tiles");
    }

    /// Stored panels: one token takes the one-token kernel; a batch
    /// multiplies them in place, unless the type unpacks them, which it
    /// does from `STORED_UNPACK_TOKENS`.
    #[test]
    fn stored_panels_unpack_from_stored_unpack_tokens() {
        let kept = with(GgmlType::Q8_0, Some(stored(false)));
        let unpacks = with(GgmlType::Q5_0, Some(stored(true)));
        for tokens in [1, 2, MIN_TOKENS, STORED_UNPACK_TOKENS, 4096] {
            let want = if tokens == 1 {
                "stored single"
            } else {
                "stored panels"
            };
            assert_eq!(plan_one(&kept, Layout::Panels, tokens), want, "T={tokens}");
        }
        let at = |t| plan_one(&unpacks, Layout::Panels, t);
        assert_eq!(at(0), "stored panels");
        assert_eq!(at(1), "stored single");
        assert_eq!(at(2), "stored panels");
        assert_eq!(at(STORED_UNPACK_TOKENS - 1), "stored panels");
        assert_eq!(at(STORED_UNPACK_TOKENS), "unpacked stored panels");
        assert_eq!(at(STORED_UNPACK_TOKENS + 1), "unpacked stored panels");
        // The stored functions replace the panel's kernels; the unpacker
        // keeps them and replaces its unpacking.
        let Strategy::StoredPanels(p) = plan(&[&weights(&kept, Layout::Panels)], 8) else {
            unreachable!()
        };
        assert_eq!(p.block_bytes, 352);
        let Strategy::UnpackedStoredPanels(p) = plan(&[&weights(&unpacks, Layout::Panels)], 64)
        else {
            unreachable!()
        };
        assert_eq!(p.block_bytes, 576);
        assert!(std::ptr::fn_addr_eq(
            p.unpack,
            other_unpack as crate::panel::UnpackFn
        ));
        // The same types kept as ggml's rows take the row strategies.
        assert_eq!(plan_one(&unpacks, Layout::Rows, 1), "single row");
        assert_eq!(plan_one(&unpacks, Layout::Rows, MIN_TOKENS), "panels");
    }

    /// Several matrices: one token over stored panels shares a region
    /// whatever the types; otherwise differing types, columns or layouts run
    /// one by one, and matching ones are planned as one.
    #[test]
    fn several_matrices_share_a_strategy_only_when_alike() {
        let q5 = with(GgmlType::Q5_0, Some(stored(true)));
        let q8 = with(GgmlType::Q8_0, Some(stored(false)));
        let (a, b) = (weights(&q5, Layout::Panels), weights(&q8, Layout::Panels));
        assert_eq!(name(plan(&[&a, &b], 1)), "stored single");
        assert_eq!(name(plan(&[&a, &b], 2)), "one by one");
        assert_eq!(name(plan(&[&a, &a], 2)), "stored panels");
        assert_eq!(name(plan(&[&a, &a], 64)), "unpacked stored panels");
        // One of them kept as rows: no shared region, even for one token.
        let rows = weights(&q5, Layout::Rows);
        assert_eq!(name(plan(&[&a, &rows], 1)), "one by one");
        assert_eq!(name(plan(&[&rows, &rows], 1)), "single row");
        // Different columns.
        let wide = Weights { cols: 512, ..a };
        assert_eq!(name(plan(&[&a, &wide], 1)), "one by one");
        assert_eq!(
            name(plan(&[&rows, &Weights { cols: 512, ..rows }], 40)),
            "one by one"
        );
        // No columns: zeros, after the one-by-one check.
        let empty = Weights { cols: 0, ..rows };
        assert_eq!(name(plan(&[&empty, &empty], 1)), "empty");
        assert_eq!(name(plan(&[&Weights { cols: 0, ..a }], 1)), "empty");
        assert_eq!(name(plan(&[&Weights { cols: 0, ..a }], 100)), "empty");
    }

    /// Every table of this CPU: each type takes the strategies its kernels
    /// allow, crossing over where their thresholds say.
    #[test]
    fn every_available_table_crosses_over_at_its_thresholds() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for k in TYPES.map(|ty| kernels_for(ty, isa).unwrap()) {
                let at = |t| plan_one(k, Layout::Rows, t);
                assert_eq!(at(1), "single row", "{isa} {}", k.weight);
                let packs = k.tiles.is_some() && act_pack::needs_packing(k.activation);
                let small = match (packs, k.f32_tiles) {
                    (_, Some(_)) => "f32 tiles",
                    (true, None) => "tiles",
                    (false, None) => "rows",
                };
                let min = k.panel.map_or(usize::MAX, |p| p.min_tokens);
                assert!(min > 2, "{isa} {}: panels from {min}", k.weight);
                assert_eq!(at(2), small, "{isa} {}", k.weight);
                if let Some(p) = k.panel {
                    assert_eq!(at(p.min_tokens - 1), small, "{isa} {}", k.weight);
                    assert_eq!(at(p.min_tokens), "panels", "{isa} {}", k.weight);
                }
                if let Some(s) = k.stored {
                    let at = |t| plan_one(k, Layout::Panels, t);
                    assert_eq!(at(1), "stored single", "{isa} {}", k.weight);
                    let u = s.unpack_tokens;
                    assert!(u > 2, "{isa} {}: unpacking from {u}", k.weight);
                    assert_eq!(at(2), "stored panels", "{isa} {}", k.weight);
                    assert_eq!(at(u - 1), "stored panels", "{isa} {}", k.weight);
                    let big = if s.unpack.is_some() {
                        "unpacked stored panels"
                    } else {
                        "stored panels"
                    };
                    assert_eq!(at(u), big, "{isa} {}", k.weight);
                }
            }
        }
    }
}
