//! AVX2 kernels over stored Q4_0, Q5_0, Q4_1 and Q5_1 panels
//! ([`crate::panel::StoredPanelFns`]): one token, groups of four tokens, and
//! unpacking to AVX2's legacy and offset panels for large batches.
//!
//! A stored block's run `j` holds each row's nibble bytes `4j..4j + 4`: the
//! low nibbles are the panel's quant dword `j`, the high ones dword `4 + j`.
//! Q5_0 and Q5_1 add each value's fifth bit from a 64-bit mask per dword.
//! The sums and float steps are AVX2's panel kernels' (even and odd blocks
//! in two chains), so a token gets the row kernel's bits.

use super::panel::{G, bcast, float_step};
use super::unpack::store;
use super::*;
use crate::panel::{
    LEGACY_ACT, LEGACY_BLOCK, OFFSET_BLOCK, STORED_Q4_0_BLOCK, STORED_Q4_1_BLOCK,
    STORED_Q5_0_BLOCK, STORED_Q5_1_BLOCK,
};
use crate::prefetch::stream_ahead;
use crate::x86_64::stored_call::*;

/// Bytes of a stored block: with fifth bits (`FIVE`: Q5_0, Q5_1) or not,
/// with each row's `m` (`MIN`: Q4_1, Q5_1) or not.
const fn block_bytes(five: bool, min: bool) -> usize {
    match (five, min) {
        (false, false) => STORED_Q4_0_BLOCK,
        (true, false) => STORED_Q5_0_BLOCK,
        (false, true) => STORED_Q4_1_BLOCK,
        (true, true) => STORED_Q5_1_BLOCK,
    }
}

/// Where a stored block's `d` (f16, one per row) lies; `m` follows them.
const fn d_at(five: bool) -> usize {
    if five { 320 } else { 256 }
}

/// The fifth bits of quant dword `k`, half `h`, of a stored Q5_0 or Q5_1
/// block: 16 in each byte whose bit is set among the half's 32 mask bits
/// (bit `4r + i` for row `r`'s value `4k + i`).
#[inline(always)]
unsafe fn fifth_bits(p: *const u8, k: usize, h: usize) -> __m256i {
    // SAFETY: a whole stored block (the caller's contract); AVX2.
    unsafe {
        let bits = p.add(256 + 8 * k + 4 * h).cast::<i32>().read_unaligned();
        // Byte `b` of the half takes mask byte `b / 8`, then tests bit `b % 8`.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits),
            _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let hit = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_and_si256(hit, _mm256_set1_epi8(16))
    }
}

/// Half `h` of a stored block's run `j`: the panel's quant dwords `j` and
/// `4 + j` (`w + 8`, or `w + 16` and Q5_1's `w` with their fifth bits).
#[inline(always)]
unsafe fn run<const FIVE: bool>(p: *const u8, j: usize, h: usize) -> [__m256i; 2] {
    // SAFETY: a whole stored block (the caller's contract); AVX2.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let q = load256(p.add(64 * j + 32 * h));
        let lo = _mm256_and_si256(q, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
        if FIVE {
            [
                _mm256_or_si256(lo, fifth_bits(p, j, h)),
                _mm256_or_si256(hi, fifth_bits(p, 4 + j, h)),
            ]
        } else {
            [lo, hi]
        }
    }
}

/// The exact `Σ q·a` of halves `hs` of the stored block at `p` against the
/// `N` prepared blocks `ys`, added into `s32[t][h]`. Each i16 sum holds
/// four dwords of quants below 32 against i8 activations: at most
/// 4 · 2 · 31 · 128 < 2^15.
#[inline(always)]
unsafe fn sums<const N: usize, const H: usize, const FIVE: bool>(
    p: *const u8,
    ys: [*const u8; N],
    hs: [usize; H],
    s32: &mut [[__m256i; 2]; N],
) {
    // SAFETY: a whole stored block and prepared blocks (the caller's
    // contract); AVX2 is enabled in every caller.
    unsafe {
        let mut lo = [[_mm256_setzero_si256(); H]; N];
        let mut hi = [[_mm256_setzero_si256(); H]; N];
        for j in 0..4 {
            let a: [[__m256i; 2]; N] =
                std::array::from_fn(|t| [bcast(ys[t].add(4 * j)), bcast(ys[t].add(16 + 4 * j))]);
            for (x, &h) in hs.iter().enumerate() {
                let [wl, wh] = run::<FIVE>(p, j, h);
                for t in 0..N {
                    lo[t][x] = _mm256_add_epi16(lo[t][x], _mm256_maddubs_epi16(wl, a[t][0]));
                    hi[t][x] = _mm256_add_epi16(hi[t][x], _mm256_maddubs_epi16(wh, a[t][1]));
                }
            }
        }
        let ones = _mm256_set1_epi16(1);
        for (x, &h) in hs.iter().enumerate() {
            for t in 0..N {
                let m = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t][x], ones),
                    _mm256_madd_epi16(hi[t][x], ones),
                );
                s32[t][h] = _mm256_add_epi32(s32[t][h], m);
            }
        }
    }
}

/// One stored block at `p` against `N` prepared blocks `ys`: per row and
/// token `acc = fma(d_w·d_a, Σ, acc)`, with Σ started at the prepared
/// `−o·Σa` for Q4_0 and Q5_0 (the quants' offset taken back), and for Q4_1
/// and Q5_1 `mins = fma(m_w, s_a, mins)` beside it. One token reads both
/// halves per run (each broadcast meets both); more read one half at a
/// time, which keeps their sums in registers.
#[inline(always)]
unsafe fn block<const N: usize, const FIVE: bool, const MIN: bool>(
    p: *const u8,
    ys: [*const u8; N],
    acc: &mut [[__m256; 2]; N],
    mins: &mut [[__m256; 2]; N],
) {
    // SAFETY: a whole stored block and prepared blocks (the caller's
    // contract); AVX2/FMA/F16C are enabled in every caller.
    unsafe {
        let mut s32 = [[_mm256_setzero_si256(); 2]; N];
        if !MIN {
            for (s, y) in s32.iter_mut().zip(ys) {
                *s = [bcast(y.add(36)); 2];
            }
        }
        if N == 1 {
            sums::<N, 2, FIVE>(p, ys, [0, 1], &mut s32);
        } else {
            for h in 0..2 {
                sums::<N, 1, FIVE>(p, ys, [h], &mut s32);
            }
        }
        for h in 0..2 {
            let d = load8_f16(p.add(d_at(FIVE) + 16 * h));
            for t in 0..N {
                acc[t][h] = float_step(acc[t][h], d, ys[t].add(32), s32[t][h]);
            }
            if MIN {
                let m = load8_f16(p.add(block_bytes(FIVE, false) + 16 * h));
                for t in 0..N {
                    let sa = _mm256_set1_ps(f32_at(ys[t].add(36)));
                    mins[t][h] = _mm256_fmadd_ps(m, sa, mins[t][h]);
                }
            }
        }
    }
}

/// A stored panel of `nb` blocks against `N` prepared rows from `acts`
/// (`arow` bytes apart) into `out[16·t + r]`: even and odd blocks in two
/// chains, added at the end (and the minimum terms' chains after them),
/// each block's bytes prefetched `ahead` further on.
#[inline(always)]
unsafe fn stored_panel<const N: usize, const FIVE: bool, const MIN: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: `nb` stored blocks, `N` prepared rows and `16·N` outputs (the
    // wrappers' checks); AVX2/FMA/F16C are enabled in every caller.
    unsafe {
        let bytes = block_bytes(FIVE, MIN);
        let mut acc = [[[_mm256_setzero_ps(); 2]; N]; 2];
        let mut mins = [[[_mm256_setzero_ps(); 2]; N]; 2];
        for i in 0..nb {
            let p = panel.add(i * bytes);
            stream_ahead(p, ahead, bytes);
            let ys = std::array::from_fn(|t| acts.add(t * arow + i * LEGACY_ACT));
            block::<N, FIVE, MIN>(p, ys, &mut acc[i % 2], &mut mins[i % 2]);
        }
        for t in 0..N {
            for h in 0..2 {
                let mut r = _mm256_add_ps(acc[0][t][h], acc[1][t][h]);
                if MIN {
                    r = _mm256_add_ps(r, _mm256_add_ps(mins[0][t][h], mins[1][t][h]));
                }
                _mm256_storeu_ps(out.add(16 * t + 8 * h), r);
            }
        }
    }
}

/// `n` stored panels of `nb` blocks against one prepared row.
#[inline(always)]
unsafe fn single<const FIVE: bool, const MIN: bool>(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: `n` panels of `nb` stored blocks, a prepared row and `16·n`
    // outputs (the wrapper's checks).
    unsafe {
        let bytes = nb * block_bytes(FIVE, MIN);
        for p in 0..n {
            let panel = panels.add(p * bytes);
            stored_panel::<1, FIVE, MIN>(nb, panel, act, 0, out.add(16 * p), ahead);
        }
    }
}

/// A stored panel against `T` prepared rows, [`G`] at a time.
#[inline(always)]
unsafe fn tokens<const T: usize, const FIVE: bool, const MIN: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe {
        let ahead = crate::prefetch::batch_ahead();
        for t0 in (0..T).step_by(G) {
            let (a, o) = (acts.add(t0 * arow), out.add(16 * t0));
            stored_panel::<G, FIVE, MIN>(nb, panel, a, arow, o, ahead);
        }
    }
}

/// `nb` stored blocks → `nb` legacy panel blocks ([`LEGACY_BLOCK`]: quants,
/// `d` as f32) or, with `MIN`, offset panel blocks ([`OFFSET_BLOCK`]: `m`
/// as f32 after them).
#[inline(always)]
unsafe fn unpack<const FIVE: bool, const MIN: bool>(nb: usize, panel: *const u8, out: *mut u8) {
    // SAFETY: `nb` blocks each way (the wrapper's checks); AVX2/F16C enabled.
    unsafe {
        let (bytes, to) = (
            block_bytes(FIVE, MIN),
            if MIN { OFFSET_BLOCK } else { LEGACY_BLOCK },
        );
        for i in 0..nb {
            let (p, dst) = (panel.add(i * bytes), out.add(i * to));
            for j in 0..4 {
                for h in 0..2 {
                    let [lo, hi] = run::<FIVE>(p, j, h);
                    store(dst.add(64 * j + 32 * h), lo);
                    store(dst.add(64 * (4 + j) + 32 * h), hi);
                }
            }
            for h in 0..2 {
                let d = load8_f16(p.add(d_at(FIVE) + 16 * h));
                _mm256_storeu_ps(dst.add(512 + 32 * h).cast(), d);
                if MIN {
                    let m = load8_f16(p.add(block_bytes(FIVE, false) + 16 * h));
                    _mm256_storeu_ps(dst.add(576 + 32 * h).cast(), m);
                }
            }
        }
    }
}

/// The one-token kernels and unpackers: each name, and whether its type
/// has fifth bits and `m`.
macro_rules! legacy_fns {
    ($($single:ident, $unpack:ident => $five:literal, $min:literal;)*) => {$(
        target_fns! { avx2:
            unsafe fn $single(
                nb: usize,
                panels: *const u8,
                n: usize,
                act: *const u8,
                out: *mut f32,
                ahead: usize,
            ) {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { single::<$five, $min>(nb, panels, n, act, out, ahead) }
            }

            unsafe fn $unpack(nb: usize, panel: *const u8, out: *mut u8) {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { unpack::<$five, $min>(nb, panel, out) }
            }
        }
    )*};
}

legacy_fns! {
    k_stored_single_q4_0, k_unpack_stored_q4_0 => false, false;
    k_stored_single_q5_0, k_unpack_stored_q5_0 => true, false;
    k_stored_single_q4_1, k_unpack_stored_q4_1 => false, true;
    k_stored_single_q5_1, k_unpack_stored_q5_1 => true, true;
}

kernel_fns! { panels avx2;
    "stored Q4_0", 32, STORED_Q4_0_BLOCK, LEGACY_ACT => panel8_stored_q4_0, panel4_stored_q4_0
        = |nb, panel, acts, arow, out| tokens::<T, false, false>(nb, panel, acts, arow, out);
    "stored Q5_0", 32, STORED_Q5_0_BLOCK, LEGACY_ACT => panel8_stored_q5_0, panel4_stored_q5_0
        = |nb, panel, acts, arow, out| tokens::<T, true, false>(nb, panel, acts, arow, out);
    "stored Q4_1", 32, STORED_Q4_1_BLOCK, LEGACY_ACT => panel8_stored_q4_1, panel4_stored_q4_1
        = |nb, panel, acts, arow, out| tokens::<T, false, true>(nb, panel, acts, arow, out);
    "stored Q5_1", 32, STORED_Q5_1_BLOCK, LEGACY_ACT => panel8_stored_q5_1, panel4_stored_q5_1
        = |nb, panel, acts, arow, out| tokens::<T, true, true>(nb, panel, acts, arow, out);
}

// The safe wrappers the tables hold, each checking its call.
stored_entry_points! {
    single {
        stored_single_q4_0 => SHAPE_Q4_0, k_stored_single_q4_0;
        stored_single_q5_0 => SHAPE_Q5_0, k_stored_single_q5_0;
        stored_single_q4_1 => SHAPE_Q4_1, k_stored_single_q4_1;
        stored_single_q5_1 => SHAPE_Q5_1, k_stored_single_q5_1;
    }
    unpack {
        unpack_stored_q4_0 => SHAPE_Q4_0, k_unpack_stored_q4_0;
        unpack_stored_q5_0 => SHAPE_Q5_0, k_unpack_stored_q5_0;
        unpack_stored_q4_1 => SHAPE_Q4_1, k_unpack_stored_q4_1;
        unpack_stored_q5_1 => SHAPE_Q5_1, k_unpack_stored_q5_1;
    }
}
