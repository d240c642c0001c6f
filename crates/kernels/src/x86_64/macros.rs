//! The macros that write the `#[target_feature]` entry points and the checked
//! wrappers of the tiles and the attention kernels, shared by AVX2 and AVX-512.

/// The 1×16, 1×12, 1×8 and 1×4 tile functions of the legacy
/// (Q8_0-activation) types for one ISA: `#[target_feature]` entry points over
/// [`avx2::legacy_tile`] with a weight decoder (signed, or unsigned with its
/// offset's shift, which must be the table's [`TileFns::sum_shift`]) and the
/// ISA's block sums (generic over sets), and the checked wrappers the tables
/// hold.
macro_rules! legacy_tile_fns {
    ($feat:literal;
     $($ty:ident, $size:expr, $quants:ident, $shift:expr, $sets:ident,
       $k16:ident => $f16:ident, $k12:ident => $f12:ident, $k8:ident => $f8:ident,
       $k4:ident => $f4:ident;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $k16(nb: usize, w: *const u8, packed: *const u8) -> [f32; 16] {
            let tile = legacy_tile::<4, 2, $shift>;
            // SAFETY: forwarded from the wrapper's checks.
            let ([a, b], _) = unsafe { tile(nb, w, $size, packed, $quants, $sets::<4>) };
            std::array::from_fn(|c| if c < 8 { a[c] } else { b[c - 8] })
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k12(nb: usize, w: *const u8, packed: *const u8) -> [f32; 12] {
            let tile = legacy_tile::<3, 1, $shift>;
            // SAFETY: forwarded from the wrapper's checks.
            let ([a], b) = unsafe { tile(nb, w, $size, packed, $quants, $sets::<3>) };
            std::array::from_fn(|c| if c < 8 { a[c] } else { b[c - 8] })
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k8(nb: usize, w: *const u8, packed: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { legacy_tile::<2, 1, $shift>(nb, w, $size, packed, $quants, $sets::<2>).0[0] }
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k4(nb: usize, w: *const u8, packed: *const u8) -> [f32; 4] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { legacy_tile::<1, 0, $shift>(nb, w, $size, packed, $quants, $sets::<1>).1 }
        }
        tile_wrappers!(Q8_0, $ty: $k16 => $f16, 16; $k12 => $f12, 12; $k8 => $f8, 8; $k4 => $f4, 4);
    )*};
}

/// The checked wrappers the tables hold, one per tile width: whole weight
/// blocks, a packed group of `act` activations of the width's rows.
macro_rules! tile_wrappers {
    ($act:ident, $ty:ident: $($k:ident => $f:ident, $width:literal);*) => {$(
        pub(crate) fn $f(n: usize, w: &[u8], packed: &[u8]) -> [f32; $width] {
            let nb = row_blocks(GgmlType::$ty, n, w);
            assert_eq!(
                packed.len(),
                crate::act_pack::group_bytes(GgmlType::$act, n, $width),
                "packed group size"
            );
            // SAFETY: `nb` weight blocks and `nb` packed block groups of the width's rows
            // (checked above); reachable only through a table handed out after the ISA's
            // detection.
            unsafe { $k(nb, w.as_ptr(), packed.as_ptr()) }
        }
    )*};
}

/// The 1×16, 1×12, 1×8 and 1×4 tile functions of a K-quant type for one
/// ISA: a tile body generic over its sets of four rows (with the ISA's unit,
/// where the body takes one), its `#[target_feature]` entry points and the
/// checked wrappers the tables hold.
macro_rules! k_tiles {
    ($feat:literal;
     $($ty:ident: $body:ident $(($unit:ident))?, $k16:ident => $f16:ident, $k12:ident => $f12:ident,
       $k8:ident => $f8:ident, $k4:ident => $f4:ident;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $k16(nb: usize, w: *const u8, packed: *const u8) -> [f32; 16] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<4>(nb, w, packed $(, $unit::<4>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k12(nb: usize, w: *const u8, packed: *const u8) -> [f32; 12] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<3>(nb, w, packed $(, $unit::<3>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k8(nb: usize, w: *const u8, packed: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<2>(nb, w, packed $(, $unit::<2>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k4(nb: usize, w: *const u8, packed: *const u8) -> [f32; 4] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<1>(nb, w, packed $(, $unit::<1>)?)[0] }
        }
        tile_wrappers!(Q8_K, $ty: $k16 => $f16, 16; $k12 => $f12, 12; $k8 => $f8, 8; $k4 => $f4, 4);
    )*};
}

/// The attention kernels' entry points over a generic kernel (AVX2's
/// `attend`, AVX-512's `attend16`): `R` heads of f32 or f16 rows, as a table
/// of `AttendKernel`s indexed by `R - 1`, for one feature set.
macro_rules! attend_fns {
    ($feat:literal, $kernel:ident;
     $($table:ident: $esize:literal, $load:ident => $($name:ident: $r:literal),*;)*) => {$(
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(rows: KeyRows, q: *const f32, out: *mut f32) {
                // SAFETY: forwarded from the wrapper's checks: `R·hd` values at `q` and `out`.
                unsafe {
                    let q = std::array::from_fn(|r| q.add(r * rows.hd));
                    let out = std::array::from_fn(|r| out.add(r * rows.hd));
                    $kernel::<$r, $esize>(rows, q, out, $load)
                }
            }
        )*
        const $table: [AttendKernel; crate::attention::MAX_HEADS] = [$($name),*];
    )*};
}
