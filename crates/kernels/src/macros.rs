//! The two macros every SIMD kernel's entry points come from.
//!
//! A kernel is an `#[inline(always)]` body, generic where it can be, and a
//! safe wrapper that the dispatch tables hold. The wrapper checks its
//! slices' lengths, then calls an entry point compiled with the ISA's
//! features, which runs the body.
//!
//! * [`target_fns!`] compiles functions with an ISA's features. It is the
//!   one place each ISA's feature set is spelled: the set that
//!   [`crate::isa`] detects before it hands out the ISA's table.
//! * [`kernel_fns!`] writes a wrapper and its entry point for each kernel
//!   shape: row and 1×4, eight rows, tiles, quantizers, panels, panel
//!   unpackers, attention. A shape's length checks are written once, here.
//!
//! A line of [`kernel_fns!`] names the weight type, the wrappers, and the
//! body as `|parameters| call`. The call may use the shape's constants:
//! `N` (activation rows of a dot product), `S` and `H` (sets of four rows,
//! and pairs of sets, of a tile) or `T` (tokens of a panel).

/// Compiles each function given with the features of the ISA named first.
///
/// `avx512vl` is the subset the attention kernels need; every CPU with the
/// full `avx512` set has it.
macro_rules! target_fns {
    (avx2: $($f:item)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        $f
    )*};
    (avx512vl: $($f:item)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
        $f
    )*};
    (avx512: $($f:item)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        $f
    )*};
    (avx512bf16: $($f:item)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16")]
        $f
    )*};
    (neon: $($f:item)*) => {$(
        #[target_feature(enable = "neon")]
        $f
    )*};
    (dotprod: $($f:item)*) => {$(
        #[target_feature(enable = "neon,dotprod")]
        $f
    )*};
}

/// Writes the safe wrappers of one kernel shape and their entry points,
/// compiled with the features of `$isa` (see [`target_fns!`]). Each arm is
/// one shape; see the module docs for the line syntax.
macro_rules! kernel_fns {
    // A weight row against one activation row (`$one`) and against four
    // (`$x4`), from one body generic over `N` rows: the same per-row
    // arithmetic, so a row's bits do not depend on the batch.
    (dot $isa:ident;
     $($ty:ident, $act:ident => $one:ident, $x4:ident
       = |$nb:ident, $w:ident, $a:ident| $call:expr;)*) => {$(
        pub(crate) fn $one(n: usize, w: &[u8], a: &[u8]) -> f32 {
            const N: usize = 1;
            target_fns! { $isa:
                unsafe fn entry($nb: usize, $w: *const u8, $a: [*const u8; N]) -> [f32; N] {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let nb = crate::scalar::row_blocks(crate::GgmlType::$ty, n, w);
            crate::scalar::row_blocks(crate::GgmlType::$act, n, a);
            // SAFETY: both rows hold `nb` blocks (checked above); reachable only
            // through a table handed out after the ISA's features were detected.
            unsafe { entry(nb, w.as_ptr(), [a.as_ptr()])[0] }
        }
        pub(crate) fn $x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            const N: usize = 4;
            target_fns! { $isa:
                unsafe fn entry($nb: usize, $w: *const u8, $a: [*const u8; N]) -> [f32; N] {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let nb = crate::scalar::row_blocks(crate::GgmlType::$ty, n, w);
            for c in a {
                crate::scalar::row_blocks(crate::GgmlType::$act, n, c);
            }
            // SAFETY: as for the row kernel; all five rows hold `nb` blocks.
            unsafe { entry(nb, w.as_ptr(), a.map(<[u8]>::as_ptr)) }
        }
    )*};

    // Eight weight rows, `stride` bytes apart, against one activation row.
    (rows8 $isa:ident;
     $($ty:ident, $act:ident => $f:ident
       = |$nb:ident, $w:ident, $stride:ident, $a:ident| $call:expr;)*) => {$(
        pub(crate) fn $f(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
            target_fns! { $isa:
                unsafe fn entry(
                    $nb: usize,
                    $w: *const u8,
                    $stride: usize,
                    $a: *const u8,
                ) -> [f32; 8] {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let (nb, stride) = crate::scalar::rows8_blocks(
                crate::GgmlType::$ty,
                crate::GgmlType::$act,
                n,
                w,
                a,
            );
            // SAFETY: eight rows of `nb` blocks, `stride` bytes apart, and an
            // activation row of `nb` blocks (checked above); reachable only through
            // a table handed out after the ISA's features were detected.
            unsafe { entry(nb, w.as_ptr(), stride, a.as_ptr()) }
        }
    )*};

    // A weight row against a packed group of `4·S` activation rows of type
    // `$act` (see `crate::act_pack`), one wrapper per width `$s` sets: the
    // body returns each set's four sums.
    (tiles $isa:ident, $act:ident;
     $($ty:ident => $($f:ident: $s:literal),+
       = |$nb:ident, $w:ident, $packed:ident| $call:expr;)*) => {$($(
        pub(crate) fn $f(n: usize, w: &[u8], packed: &[u8]) -> [f32; 4 * $s] {
            const S: usize = $s;
            #[allow(dead_code)]
            const H: usize = S / 2;
            target_fns! { $isa:
                unsafe fn entry($nb: usize, $w: *const u8, $packed: *const u8) -> [[f32; 4]; S] {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let nb = crate::scalar::row_blocks(crate::GgmlType::$ty, n, w);
            assert_eq!(
                packed.len(),
                crate::act_pack::group_bytes(crate::GgmlType::$act, n, 4 * S),
                "packed group size"
            );
            // SAFETY: `nb` weight blocks and `nb` packed block groups of `4·S` rows
            // (checked above); reachable only through a table handed out after the
            // ISA's features were detected.
            let sets = unsafe { entry(nb, w.as_ptr(), packed.as_ptr()) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
    )+)*};

    // Float rows into activation blocks of type `$ty`.
    (quantize $isa:ident;
     $($ty:ident => $f:ident = |$nb:ident, $x:ident, $y:ident| $call:expr;)*) => {$(
        pub(crate) fn $f(src: &[f32], dst: &mut [u8]) {
            target_fns! { $isa:
                unsafe fn entry($nb: usize, $x: *const f32, $y: *mut u8) {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let ty = crate::GgmlType::$ty;
            assert!(
                src.len().is_multiple_of(ty.block_size()),
                "{} values is not a whole number of blocks",
                src.len()
            );
            let nb = src.len() / ty.block_size();
            assert_eq!(dst.len(), nb * ty.type_size(), "activation buffer size");
            // SAFETY: `nb` whole blocks of input and output (checked above);
            // reachable only through a table handed out after the ISA's features
            // were detected.
            unsafe { entry(nb, src.as_ptr(), dst.as_mut_ptr()) }
        }
    )*};

    // Sixteen weight rows into their panel (see `crate::panel`), one panel
    // block at a time: `$meta` writes the rows' scales of block `i`, then the
    // body its quants. Partial panels take the reference unpacker.
    (unpack $isa:ident;
     $($ty:ident, $size:literal, $block:ident => $f:ident
       = |$rows:ident, $rb:ident, $i:ident, $dst:ident| $call:expr, meta: $meta:expr;)*) => {$(
        pub(crate) fn $f(cols: usize, rows: &[u8], out: &mut [u8]) {
            use crate::panel::{$block, PANEL_ROWS};
            target_fns! { $isa:
                unsafe fn entry($rows: *const u8, $rb: usize, $i: usize, $dst: *mut u8) {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let (nb, given) =
                crate::panel::panel_shape(crate::GgmlType::$ty, cols, rows, out, $block);
            if given < PANEL_ROWS {
                return crate::panel::$f(cols, rows, out);
            }
            let rb = nb * $size;
            let meta: fn(&[u8], usize, usize, &mut [u8; $block]) = $meta;
            for (i, dst) in out.chunks_exact_mut($block).enumerate() {
                let dst: &mut [u8; $block] = dst.try_into().unwrap();
                meta(rows, rb, i, dst);
                // SAFETY: sixteen whole rows of `nb > i` blocks and a whole panel
                // block (checked above); reachable only through a table handed out
                // after the ISA's features were detected.
                unsafe { entry(rows.as_ptr(), rb, i, dst.as_mut_ptr()) };
            }
        }
    )*};

    // Sixteen rows of a 32-value type into their panel in one call (the body
    // pairs blocks), then each block's scales by `meta` (row, ggml block,
    // panel block): the legacy panel's `d`, or Q4_1's and Q5_1's `d` and `m`.
    (unpack_legacy $isa:ident;
     $($ty:ident, $size:literal, $block:ident => $f:ident
       = |$rows:ident, $rb:ident, $nb:ident, $out:ident| $call:expr, meta: $meta:expr;)*) => {$(
        pub(crate) fn $f(cols: usize, rows: &[u8], out: &mut [u8]) {
            use crate::panel::{$block, PANEL_ROWS};
            target_fns! { $isa:
                unsafe fn entry($rows: *const u8, $rb: usize, $nb: usize, $out: *mut u8) {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let (nb, given) =
                crate::panel::panel_shape(crate::GgmlType::$ty, cols, rows, out, $block);
            if given < PANEL_ROWS {
                return crate::panel::$f(cols, rows, out);
            }
            let rb = nb * $size;
            // SAFETY: sixteen whole rows of `nb` blocks and `nb` panel blocks
            // (checked above); reachable only through a table handed out after the
            // ISA's features were detected.
            unsafe { entry(rows.as_ptr(), rb, nb, out.as_mut_ptr()) };
            let meta: fn(usize, &[u8], &mut [u8]) = $meta;
            for (i, dst) in out.chunks_exact_mut($block).enumerate() {
                for r in 0..PANEL_ROWS {
                    meta(r, &rows[r * rb + i * $size..][..$size], dst);
                }
            }
        }
    )*};

    // A panel against the prepared rows of `T` tokens, sixteen outputs a
    // token: `$wide` takes `PANEL_TOKENS` tokens, `$narrow` half as many.
    (panels $isa:ident;
     $($name:literal, $values:literal, $block:expr, $act:expr => $wide:ident, $narrow:ident
       = |$nb:ident, $panel:ident, $acts:ident, $arow:ident, $out:ident| $call:expr;)*) => {$(
        kernel_fns!(@panel $isa; $name, $values, $block, $act,
            crate::panel::PANEL_TOKENS => $wide = |$nb, $panel, $acts, $arow, $out| $call);
        kernel_fns!(@panel $isa; $name, $values, $block, $act,
            crate::panel::PANEL_TOKENS / 2 => $narrow = |$nb, $panel, $acts, $arow, $out| $call);
    )*};
    // Two panels back to back against `PANEL_TOKENS` tokens, each
    // activation load feeding both (`PanelFns::pair`).
    (pairs $isa:ident;
     $($name:literal, $values:literal, $block:expr, $act:expr => $f:ident
       = |$nb:ident, $panels:ident, $acts:ident, $arow:ident, $out:ident| $call:expr;)*) => {$(
        pub(crate) fn $f(cols: usize, panels: &[u8], acts: &[u8], out: &mut [f32]) {
            const T: usize = crate::panel::PANEL_TOKENS;
            target_fns! { $isa:
                unsafe fn entry(
                    $nb: usize,
                    $panels: *const u8,
                    $acts: *const u8,
                    $arow: usize,
                    $out: *mut f32,
                ) {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let half = panels.len() / 2;
            assert_eq!(panels.len(), 2 * half, concat!($name, " panel pair size"));
            assert_eq!(out.len(), 32 * T, concat!($name, " panel pair output size"));
            let (nb, arow) = crate::x86_64::common::panel_call(
                $name, $values, cols, &panels[..half], $block, acts, $act, &out[..16 * T], T,
            );
            // SAFETY: two panels of `nb` blocks, the tokens' prepared rows and
            // both panels' outputs (checked above); reachable only through a
            // table handed out after the ISA's features were detected.
            unsafe { entry(nb, panels.as_ptr(), acts.as_ptr(), arow, out.as_mut_ptr()) }
        }
    )*};
    (@panel $isa:ident; $name:literal, $values:literal, $block:expr, $act:expr,
     $tokens:expr => $f:ident
     = |$nb:ident, $panel:ident, $acts:ident, $arow:ident, $out:ident| $call:expr) => {
        pub(crate) fn $f(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]) {
            const T: usize = $tokens;
            target_fns! { $isa:
                unsafe fn entry(
                    $nb: usize,
                    $panel: *const u8,
                    $acts: *const u8,
                    $arow: usize,
                    $out: *mut f32,
                ) {
                    // SAFETY: forwarded from the wrapper's checks.
                    unsafe { $call }
                }
            }
            let (nb, arow) = crate::x86_64::common::panel_call(
                $name, $values, cols, panel, $block, acts, $act, out, T,
            );
            // SAFETY: `nb` panel blocks, the tokens' prepared rows and their
            // outputs (checked above); reachable only through a table handed out
            // after the ISA's features were detected.
            unsafe { entry(nb, panel.as_ptr(), acts.as_ptr(), arow, out.as_mut_ptr()) }
        }
    };

    // The attention kernel's entry points for `R` = 1..=MAX_HEADS heads of
    // f32 or f16 rows, as a table indexed by `R - 1`; the wrapper that checks
    // the rows is the attention module's own.
    (attend $isa:ident, $kernel:ident;
     $($table:ident: $esize:literal, $load:ident => $($name:ident: $r:literal),*;)*) => {$(
        $(
            target_fns! { $isa:
                unsafe fn $name(rows: KeyRows, q: *const f32, out: *mut f32) {
                    // SAFETY: forwarded from the wrapper's checks: `R·hd` values at
                    // `q` and `out`.
                    unsafe {
                        let q = std::array::from_fn(|r| q.add(r * rows.hd));
                        let out = std::array::from_fn(|r| out.add(r * rows.hd));
                        $kernel::<$r, $esize>(rows, q, out, $load)
                    }
                }
            }
        )*
        const $table: [AttendKernel; crate::attention::MAX_HEADS] = [$($name),*];
    )*};
}
