//! AVX2 + FMA + F16C kernels.
//!
//! Each public function is a safe wrapper that checks the row lengths, then
//! calls one `#[target_feature]` kernel; the wrappers are only reachable
//! through [`super::AVX2`] / [`super::AVX512`], which
//! [`crate::kernels_for`] hands out after detecting the features.
//! Helpers are `#[inline(always)]` so they compile inside the kernel with its
//! features. The dot-product bodies are generic over the number of
//! activation columns `N`: `N = 1` is the row kernel, `N = 4` the 1×4 tile that
//! unpacks each weight block once.
//!
//! Integer sums are exact (`maddubs` only ever sees an unsigned operand
//! ≤ 63, or |w| ≤ 128 against an activation in `[-127, 127]`: no saturation,
//! and i16 partial sums are bounded where they are kept); each block's (or
//! super-block's) exact sum is scaled with one FMA, so results differ from
//! the scalar reference by reassociation only.

use crate::GgmlType;
use crate::scalar::{k4_scales_mins, row_blocks, rows8_blocks};
use core::arch::x86_64::*;
use half::f16;

// ------------------------------------------------------------------ helpers

#[inline(always)]
unsafe fn rd_u16(p: *const u8) -> u16 {
    // SAFETY: the caller passes a pointer with two readable bytes.
    unsafe { p.cast::<u16>().read_unaligned() }
}

/// f16 bits → f32 with F16C (exact). Miri does not implement F16C, so under
/// Miri (which runs these kernels only from the AVX-512 tests) the same exact
/// conversion is done in software.
#[inline(always)]
pub(super) unsafe fn fp16(p: *const u8) -> f32 {
    if cfg!(miri) {
        // SAFETY: `p` has two readable bytes.
        return f16::from_bits(unsafe { rd_u16(p) }).to_f32_const();
    }
    // SAFETY: F16C is enabled in every kernel calling this; `p` has two readable bytes.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(rd_u16(p) as i32))) }
}

/// The f16 at `p` in all 8 lanes (a broadcast load, then one conversion).
#[inline(always)]
unsafe fn fp16_x8(p: *const u8) -> __m256 {
    if cfg!(miri) {
        // SAFETY: as for `fp16`.
        return unsafe { _mm256_set1_ps(fp16(p)) };
    }
    // SAFETY: `p` has two readable bytes; F16C is enabled in every kernel calling this.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi16(rd_u16(p) as i16)) }
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

#[inline(always)]
pub(super) unsafe fn hsum_f32(v: __m256) -> f32 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
pub(super) unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// Σ of adjacent pairs of `u8 · i8` products, widened to 8 × i32.
#[inline(always)]
unsafe fn maddubs_i32(u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
}

/// `|x|` as unsigned bytes (-128 → 128): the weight half of the sign trick.
#[inline(always)]
unsafe fn abs_u8(x: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_sign_epi8(x, x) }
}

/// `y · sign(x)` for the activation half of the sign trick (`y` ∈ [-127, 127]).
#[inline(always)]
unsafe fn signed_like(y: __m256i, x: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_sign_epi8(y, x) }
}

/// 16 bytes of nibbles → 32 bytes: low nibbles first, then high nibbles.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: `p` has 16 readable bytes; AVX2 is enabled in every caller.
    unsafe {
        let t = _mm_loadu_si128(p.cast());
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// 32 bits (little-endian at `p`) → 32 bytes, 0xFF where the bit is set.
#[inline(always)]
unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
    // SAFETY: `p` has 4 readable bytes; AVX2 is enabled in every caller.
    unsafe {
        let bits = p.cast::<u32>().read_unaligned() as i32;
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits), shuf);
        let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }
}

/// How far ahead of the block being multiplied the weight stream is
/// prefetched. The hardware prefetchers alone left single-token matmul at
/// about 12 GB/s on 2 threads of a server part whose plain streaming read
/// reaches 20; a software prefetch a few rows ahead brought it to 16-18
/// (measured on SmolLM2's 576- and 1536-column Q8_0 rows).
pub(super) const PREFETCH_AHEAD: usize = 3072;

/// How far ahead of the eight rows being multiplied the eight-row kernels
/// prefetch the weights that follow them (at least the next eight rows). One
/// group of eight rows ahead (3.4 KiB of 768-column Q4_0) left a Zen 5 part's
/// single-token Q4_0/Q4_K matmuls from memory at 36-42 GB/s on 2 threads;
/// 8 KiB ahead brought them to 53-55 (12 KiB and more measured no better).
const ROWS8_PREFETCH_AHEAD: usize = 8192;

/// The eight-row kernels' prefetch at block `i` of eight rows `stride` bytes
/// apart (blocks of `wsize` bytes): the weights after these rows (contiguous)
/// stream in linearly, [`ROWS8_PREFETCH_AHEAD`] bytes ahead or at least the
/// next eight rows, a block's share per block, since eight interleaved row
/// streams defeat the hardware's stream prefetch.
#[inline(always)]
pub(super) fn prefetch_rows8(w: *const u8, stride: usize, i: usize, wsize: usize) {
    let ahead = (8 * stride).max(ROWS8_PREFETCH_AHEAD);
    prefetch_range(w.wrapping_add(ahead + 8 * i * wsize), 8 * wsize);
}

/// Prefetches the cache lines of the weight block of `size` bytes that lies
/// [`PREFETCH_AHEAD`] bytes after `p` (blocks are contiguous, so one
/// prefetch per 64 bytes of each block reaches every line). A prefetch
/// never faults, so running past the end of the matrix is harmless.
#[inline(always)]
pub(super) unsafe fn prefetch_block(p: *const u8, size: usize) {
    prefetch_range(p.wrapping_add(PREFETCH_AHEAD), size);
}

/// Prefetches one address in every 64 bytes of `p..p + len` (a hint: any
/// address is harmless).
#[inline(always)]
pub(super) fn prefetch_range(p: *const u8, len: usize) {
    if cfg!(miri) {
        return;
    }
    let mut o = 0;
    while o < len {
        // SAFETY: `_mm_prefetch` is a hint: it never faults and reads no value,
        // whatever the address; `wrapping_add` forms the address without UB.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o).cast()) };
        o += 64;
    }
}

// ------------------------------------------------------- legacy dot products

/// The signed 32 quants of one legacy weight block.
#[inline(always)]
pub(super) unsafe fn q8_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q8_0 block has its 32 quants at offset 2.
    unsafe { load(x.add(2)) }
}
#[inline(always)]
pub(super) unsafe fn q4_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q4_0 block has its 16 nibble bytes at offset 2.
    unsafe { _mm256_sub_epi8(nibbles(x.add(2)), _mm256_set1_epi8(8)) }
}
#[inline(always)]
pub(super) unsafe fn q5_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q5_0 block has qh at offset 2 and 16 nibble bytes at 6.
    unsafe {
        // 0xF0 (i.e. -16 on top of the nibble) where the fifth bit is clear.
        let hi = _mm256_andnot_si256(bytes_from_bits(x.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(nibbles(x.add(6)), hi)
    }
}

/// Σ_blocks d_w·d_a·Σ(w·a) for weight blocks of `wsize` bytes decoded by
/// `quants`, against `N` Q8_0 activation rows.
///
/// Each block's integer sum is exact and is accumulated as
/// `acc[i % 2] = fma(d_w·d_a, Σ, acc[i % 2])` in block order, then
/// `acc[0] + acc[1]` (two chains, so a lone row is not bound by the FMA's
/// latency): bit for bit what the tiles ([`legacy_tile`]) compute, so a
/// token's result does not depend on where it sits in a batch (quantized
/// activations turn any rounding difference into visibly different
/// embeddings).
#[inline(always)]
unsafe fn legacy_q8_0<const N: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    a: [*const u8; N],
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; N] {
    // SAFETY: the wrappers checked `nb` whole blocks in every row; AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [[0.0f32; 2]; N];
        let mut i = 0;
        // Eight blocks at a time share one horizontal reduction per row.
        while i + 8 <= nb {
            let mut p = [[_mm256_setzero_si256(); 8]; N];
            let mut dx = [0.0f32; 8];
            for b in 0..8 {
                let x = w.add((i + b) * wsize);
                prefetch_block(x, wsize);
                let qx = quants(x);
                let ax = abs_u8(qx);
                dx[b] = fp16(x);
                for c in 0..N {
                    let y = a[c].add((i + b) * 34);
                    p[c][b] = maddubs_i32(ax, signed_like(load(y.add(2)), qx));
                }
            }
            for c in 0..N {
                let mut sums = [0.0f32; 8];
                _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_cvtepi32_ps(hsum8_i32(&p[c])));
                for b in 0..8 {
                    // `i` is even: block `i + b` goes to chain `b % 2`.
                    let d = dx[b] * fp16(a[c].add((i + b) * 34));
                    acc[c][b % 2] = d.mul_add(sums[b], acc[c][b % 2]);
                }
            }
            i += 8;
        }
        for i in i..nb {
            let x = w.add(i * wsize);
            prefetch_block(x, wsize);
            let qx = quants(x);
            let ax = abs_u8(qx);
            let dx = fp16(x);
            for c in 0..N {
                let y = a[c].add(i * 34);
                let sum = hsum_i32(maddubs_i32(ax, signed_like(load(y.add(2)), qx))) as f32;
                acc[c][i % 2] = (dx * fp16(y)).mul_add(sum, acc[c][i % 2]);
            }
        }
        acc.map(|[even, odd]| even + odd)
    }
}

/// [`legacy_q8_0`] for eight consecutive weight rows `stride` bytes apart
/// against one activation row, the rows side by side in the lanes: per block
/// the rows' exact integer sums (one horizontal reduction for all eight),
/// then `acc[i % 2] = fma(d_w·d_a, Σ, acc[i % 2])` per lane and `acc[0] +
/// acc[1]`: each row's bits from the row kernel, with the activation block
/// loaded and its scale converted once for the eight rows.
#[inline(always)]
unsafe fn legacy_rows8(
    nb: usize,
    w: *const u8,
    stride: usize,
    wsize: usize,
    a: *const u8,
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; 8] {
    // SAFETY: the wrappers checked eight rows of `nb` whole blocks `stride` bytes
    // apart and an activation row of `nb` blocks; AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let y = a.add(i * 34);
            let ay = load(y.add(2));
            let mut p = [_mm256_setzero_si256(); 8];
            let mut dx = [0.0f32; 8];
            prefetch_rows8(w, stride, i, wsize);
            for (r, (p, dx)) in p.iter_mut().zip(&mut dx).enumerate() {
                let x = w.add(r * stride + i * wsize);
                let qx = quants(x);
                *p = maddubs_i32(abs_u8(qx), signed_like(ay, qx));
                *dx = fp16(x);
            }
            let d = _mm256_mul_ps(_mm256_loadu_ps(dx.as_ptr()), _mm256_set1_ps(fp16(y)));
            let s = _mm256_cvtepi32_ps(hsum8_i32(&p));
            acc[i % 2] = _mm256_fmadd_ps(d, s, acc[i % 2]);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc[0], acc[1]));
        out
    }
}

/// The row and 1×4 kernels of a type over `$core` (the same per-row
/// arithmetic for both, so a row's bits do not depend on the batch), with
/// `$act` activations, and the checked wrappers the tables hold.
macro_rules! row_x4_fns {
    ($core:ident, $act:ident;
     $ty:ident, $size:expr, $quants:ident, $one:ident, $x4:ident, $k1:ident, $k4:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $k1(nb: usize, w: *const u8, a: *const u8) -> f32 {
            // SAFETY: forwarded from the caller's contract.
            unsafe { $core::<1>(nb, w, $size, [a], $quants)[0] }
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $k4(nb: usize, w: *const u8, a: [*const u8; 4]) -> [f32; 4] {
            // SAFETY: forwarded from the caller's contract.
            unsafe { $core::<4>(nb, w, $size, a, $quants) }
        }
        pub(crate) fn $one(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = row_blocks(GgmlType::$ty, n, w);
            row_blocks(GgmlType::$act, n, a);
            // SAFETY: both rows hold `nb` blocks (checked above); this function is only
            // reachable through a table handed out after AVX2+FMA+F16C were detected.
            unsafe { $k1(nb, w.as_ptr(), a.as_ptr()) }
        }
        pub(crate) fn $x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            let nb = row_blocks(GgmlType::$ty, n, w);
            for c in a {
                row_blocks(GgmlType::$act, n, c);
            }
            // SAFETY: as for the row kernel; all five rows hold `nb` blocks.
            unsafe { $k4(nb, w.as_ptr(), a.map(<[u8]>::as_ptr)) }
        }
    };
}

macro_rules! legacy_kernels {
    ($($ty:ident, $size:expr, $quants:ident, $one:ident, $x4:ident, $rows8:ident, $k1:ident, $k4:ident,
       $k8:ident;)*) => {$(
        row_x4_fns!(legacy_q8_0, Q8_0; $ty, $size, $quants, $one, $x4, $k1, $k4);
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $k8(nb: usize, w: *const u8, stride: usize, a: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the caller's contract.
            unsafe { legacy_rows8(nb, w, stride, $size, a, $quants) }
        }
        pub(crate) fn $rows8(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
            let (nb, stride) = rows8_blocks(GgmlType::$ty, GgmlType::Q8_0, n, w, a);
            // SAFETY: eight rows of `nb` blocks, `stride` bytes apart, and an activation
            // row of `nb` blocks (checked above); reachable only through a table handed
            // out after AVX2+FMA+F16C were detected.
            unsafe { $k8(nb, w.as_ptr(), stride, a.as_ptr()) }
        }
    )*};
}

legacy_kernels! {
    Q8_0, 34, q8_0_quants, vec_dot_q8_0, vec_dot_x4_q8_0, vec_dot_rows8_q8_0, k_q8_0, k_q8_0_x4,
        k_q8_0_rows8;
    Q4_0, 18, q4_0_quants, vec_dot_q4_0, vec_dot_x4_q4_0, vec_dot_rows8_q4_0, k_q4_0, k_q4_0_x4,
        k_q4_0_rows8;
    Q5_0, 22, q5_0_quants, vec_dot_q5_0, vec_dot_x4_q5_0, vec_dot_rows8_q5_0, k_q5_0, k_q5_0_x4,
        k_q5_0_rows8;
}

/// Eight `i32 × 8` vectors → one vector of their eight horizontal sums, in order.
#[inline(always)]
unsafe fn hsum8_i32(p: &[__m256i; 8]) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let s01 = _mm256_hadd_epi32(p[0], p[1]);
        let s23 = _mm256_hadd_epi32(p[2], p[3]);
        let s45 = _mm256_hadd_epi32(p[4], p[5]);
        let s67 = _mm256_hadd_epi32(p[6], p[7]);
        // [Σ0..Σ3 of the low lanes | Σ0..Σ3 of the high lanes], same for 4..7.
        let s0123 = _mm256_hadd_epi32(s01, s23);
        let s4567 = _mm256_hadd_epi32(s45, s67);
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(s0123, s4567),
            _mm256_permute2x128_si256::<0x31>(s0123, s4567),
        )
    }
}

/// Unsigned decoders for the tiles: each weight block's quants as `u8`,
/// `w + 2^shift` (Q8_0: 128, Q4_0: 8, Q5_0: 16), so one `u8·i8` product
/// takes them and the tile starts each block's sums from `−2^shift · Σa`.
#[inline(always)]
pub(super) unsafe fn q8_0_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q8_0 block has its 32 quants at offset 2.
    unsafe { _mm256_xor_si256(load(x.add(2)), _mm256_set1_epi8(0x80u8 as i8)) }
}
#[inline(always)]
pub(super) unsafe fn q4_0_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q4_0 block has its 16 nibble bytes at offset 2.
    unsafe { nibbles(x.add(2)) }
}
#[inline(always)]
pub(super) unsafe fn q5_0_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q5_0 block has qh at offset 2 and 16 nibble bytes at 6.
    unsafe {
        let hi = _mm256_and_si256(bytes_from_bits(x.add(2)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(x.add(6)), hi)
    }
}

/// Dword `J` of each 128-bit half of `w` in all four of its dwords: weight
/// dwords `J` and `J + 4` against a packed vector of [`crate::pack`].
#[inline(always)]
unsafe fn dwords<const J: usize>(w: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        match J {
            0 => _mm256_shuffle_epi32::<0x00>(w),
            1 => _mm256_shuffle_epi32::<0x55>(w),
            2 => _mm256_shuffle_epi32::<0xAA>(w),
            _ => _mm256_shuffle_epi32::<0xFF>(w),
        }
    }
}

/// [`dwords`] for `J` = 0..4: a block's four weight steps.
#[inline(always)]
pub(super) unsafe fn all_dwords(w: __m256i) -> [__m256i; 4] {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        [
            dwords::<0>(w),
            dwords::<1>(w),
            dwords::<2>(w),
            dwords::<3>(w),
        ]
    }
}

/// Per-row halves (rows 0-3 of a packed set in each 128-bit half) → the
/// rows' sums: `lo` holds set 0, `hi` set 1; the result rows 0-7.
#[inline(always)]
pub(super) unsafe fn fold_halves(lo: __m256i, hi: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        )
    }
}

/// The exact integer sums of one weight block (quants `q`) with each row of
/// the `S` packed sets of four rows at `y`, each set's halves apart, added to
/// `init`: one ISA's integer part of [`legacy_tile`].
pub(super) type SetSums<const S: usize> =
    unsafe fn(__m256i, *const u8, [__m256i; S]) -> [__m256i; S];

/// The accumulators a block's `S` sets start from: for unsigned weights
/// `w + 2^SHIFT`, the offset `−2^SHIFT·Σa` the packer stored for each row
/// (in the low half, which [`fold_halves`] adds to the high one); zeros for
/// signed weights.
#[inline(always)]
unsafe fn offset_init<const S: usize, const SHIFT: i32>(sums: *const u8) -> [__m256i; S] {
    // SAFETY: `sums` holds the 4·S rows' i32 sums; AVX2 is enabled in the callers.
    std::array::from_fn(|set| unsafe {
        if SHIFT > 0 {
            _mm256_zextsi128_si256(_mm_loadu_si128(sums.add(16 * set).cast()))
        } else {
            _mm256_setzero_si256()
        }
    })
}

/// `S` packed sets of four rows against signed quants `q` with the `maddubs`
/// sign trick (`|w|` against `a·sign(w)`: no saturation for any i8 weight).
#[inline(always)]
unsafe fn signed_sets<const S: usize>(
    q: __m256i,
    y: *const u8,
    init: [__m256i; S],
) -> [__m256i; S] {
    // SAFETY: `y` holds 4 × S packed vectors; AVX2 is enabled in the callers.
    unsafe {
        let qa = abs_u8(q);
        let ws = all_dwords(q);
        let wa = all_dwords(qa);
        let mut acc = init;
        for j in 0..4 {
            for (set, acc) in acc.iter_mut().enumerate() {
                let a = load(y.add(32 * (j * S + set)));
                *acc = _mm256_add_epi32(*acc, maddubs_i32(wa[j], signed_like(a, ws[j])));
            }
        }
        acc
    }
}

/// `S` packed sets against unsigned quants `q ≤ 31` (Q4_0, Q5_0): a pair of
/// `maddubs` products is at most 2·31·127, so the four steps add up in i16
/// (≤ 31,496) and widen once ([`k_unit`] with a scale of 1).
#[inline(always)]
unsafe fn narrow_sets<const S: usize>(
    q: __m256i,
    y: *const u8,
    init: [__m256i; S],
) -> [__m256i; S] {
    // SAFETY: `y` holds 4 × S packed vectors; AVX2 is enabled in the callers.
    unsafe {
        let mut acc = init;
        k_unit::<S, 4>(q, y, _mm256_set1_epi16(1), &mut acc);
        acc
    }
}

#[inline(always)]
pub(super) unsafe fn fold_set(v: __m256i) -> __m128i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)) }
}
/// One block of [`legacy_tile`]: weight block `x`, packed block group `y`,
/// accumulated into `acc` (one vector of eight rows per pair of sets) and,
/// for an odd number of sets, `last` (the last set's four rows).
#[inline(always)]
unsafe fn legacy_step<const S: usize, const H: usize, const SHIFT: i32>(
    x: *const u8,
    wsize: usize,
    y: *const u8,
    quants: unsafe fn(*const u8) -> __m256i,
    sets: SetSums<S>,
    acc: &mut [__m256; H],
    last: &mut __m128,
) {
    // SAFETY: `x` is a whole weight block and `y` a whole packed block group of
    // 4·S rows (the tile's contract); the callers enable the ISA's features.
    unsafe {
        // Per block: 4·S rows' quants, then their f32 scales, then their quant sums.
        let (scales_at, qsums_at) = (128 * S, 144 * S);
        // The first group of a batch streams the weights from memory.
        prefetch_block(x, wsize);
        let init = offset_init::<S, SHIFT>(y.add(qsums_at));
        let s = sets(quants(x), y, init);
        let dx = fp16_x8(x);
        for h in 0..H {
            let v = fold_halves(s[2 * h], s[2 * h + 1]);
            let d = _mm256_mul_ps(dx, _mm256_loadu_ps(y.add(scales_at + 32 * h).cast()));
            acc[h] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v), acc[h]);
        }
        if S > 2 * H {
            let v = fold_set(s[S - 1]);
            let dy = _mm_loadu_ps(y.add(scales_at + 32 * H).cast());
            let d = _mm_mul_ps(_mm256_castps256_ps128(dx), dy);
            *last = _mm_fmadd_ps(d, _mm_cvtepi32_ps(v), *last);
        }
    }
}

/// One legacy weight row (blocks of `wsize` bytes) against a packed group of
/// `4·S` Q8_0 rows (see [`crate::pack`]), one row per lane: per block, the
/// rows' exact integer sums side by side (`sums`, the ISA's part), then
/// `acc = fma(d_w·d_a, Σ, acc)` per lane, even and odd blocks in two chains
/// added at the end — the row kernels' arithmetic, so a token's result does
/// not depend on its place in a batch. The block's quants and scale are
/// decoded once for all the group's rows: `H = S / 2` vectors of eight rows,
/// and for an odd `S` four more (the second result).
///
/// `quants` gives the block's quants as `sums` takes them: signed (with
/// `SHIFT = 0`), or unsigned `w + 2^SHIFT`, whose offset is taken back
/// through the group's quant sums.
#[inline(always)]
pub(super) unsafe fn legacy_tile<const S: usize, const H: usize, const SHIFT: i32>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    packed: *const u8,
    quants: unsafe fn(*const u8) -> __m256i,
    sets: SetSums<S>,
) -> ([[f32; 8]; H], [f32; 4]) {
    const { assert!(S == 2 * H || S == 2 * H + 1) };
    // SAFETY: the wrappers checked `nb` weight blocks and `nb` packed block groups;
    // the callers enable AVX2/FMA/F16C and whatever `sums` needs.
    unsafe {
        let gb = crate::pack::q8_0_group_block(4 * S);
        // Even and odd blocks in two chains, as the row kernels (named, so
        // they stay in registers).
        let (mut even, mut odd) = ([_mm256_setzero_ps(); H], [_mm256_setzero_ps(); H]);
        let (mut even_last, mut odd_last) = (_mm_setzero_ps(), _mm_setzero_ps());
        let mut i = 0;
        let block = |i: usize| (w.add(i * wsize), packed.add(i * gb));
        while i + 2 <= nb {
            let (x, y) = block(i);
            legacy_step::<S, H, SHIFT>(x, wsize, y, quants, sets, &mut even, &mut even_last);
            let (x, y) = block(i + 1);
            legacy_step::<S, H, SHIFT>(x, wsize, y, quants, sets, &mut odd, &mut odd_last);
            i += 2;
        }
        if i < nb {
            let (x, y) = block(i);
            legacy_step::<S, H, SHIFT>(x, wsize, y, quants, sets, &mut even, &mut even_last);
        }
        let mut out = [[0.0f32; 8]; H];
        for h in 0..H {
            _mm256_storeu_ps(out[h].as_mut_ptr(), _mm256_add_ps(even[h], odd[h]));
        }
        let mut last = [0.0f32; 4];
        _mm_storeu_ps(last.as_mut_ptr(), _mm_add_ps(even_last, odd_last));
        (out, last)
    }
}

legacy_tile_fns! {
    "avx2,fma,f16c";
    // Q8_0's unsigned quants reach 255: `maddubs` would saturate, so the sign trick.
    Q8_0, 34, q8_0_quants, 0, signed_sets,
        k_q8_0_x16 => tile16_q8_0, k_q8_0_x12 => tile12_q8_0, k_q8_0_x8 => tile8_q8_0,
        k_q8_0_t4 => tile4_q8_0;
    Q4_0, 18, q4_0_unsigned, 3, narrow_sets,
        k_q4_0_x16 => tile16_q4_0, k_q4_0_x12 => tile12_q4_0, k_q4_0_x8 => tile8_q4_0,
        k_q4_0_t4 => tile4_q4_0;
    Q5_0, 22, q5_0_unsigned, 4, narrow_sets,
        k_q5_0_x16 => tile16_q5_0, k_q5_0_x12 => tile12_q5_0, k_q5_0_x8 => tile8_q5_0,
        k_q5_0_t4 => tile4_q5_0;
}

/// A row of a Q8_1-activation type (Q4_1, Q5_1: `d`, `m`, then quants read
/// unsigned by `quants`) against `N` Q8_1 rows. Per block `d_w·d_a·Σ q·a`
/// and `m_w·s_a` (`s_a = d_a·Σa`), each in two chains, even and odd
/// blocks, added at the end; eight blocks at a time share one horizontal
/// reduction per activation row, and each weight block is unpacked once
/// for all `N`. (The one-chain, one-reduction-a-block kernel before this
/// ran Q4_1 at 10 GB/s in cache; Q5_1 had only the scalar one, 1.6.)
#[inline(always)]
unsafe fn q8_1_rows<const N: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    a: [*const u8; N],
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (`wsize` bytes; Q8_1: 36 bytes),
    // `quants` reads inside a weight block; AVX2/FMA/F16C are enabled in
    // the callers.
    unsafe {
        let mut acc = [[0.0f32; 2]; N];
        let mut mins = [[0.0f32; 2]; N];
        let mut i = 0;
        while i + 8 <= nb {
            let mut p = [[_mm256_setzero_si256(); 8]; N];
            let (mut dx, mut mx) = ([0.0f32; 8], [0.0f32; 8]);
            for b in 0..8 {
                let x = w.add((i + b) * wsize);
                prefetch_block(x, wsize);
                let qx = quants(x);
                (dx[b], mx[b]) = (fp16(x), fp16(x.add(2)));
                for c in 0..N {
                    p[c][b] = maddubs_i32(qx, load(a[c].add((i + b) * 36 + 4)));
                }
            }
            for c in 0..N {
                let mut sums = [0.0f32; 8];
                _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_cvtepi32_ps(hsum8_i32(&p[c])));
                for b in 0..8 {
                    // `i` is even: block `i + b` goes to chain `b % 2`.
                    let y = a[c].add((i + b) * 36);
                    acc[c][b % 2] = (dx[b] * fp16(y)).mul_add(sums[b], acc[c][b % 2]);
                    mins[c][b % 2] = mx[b].mul_add(fp16(y.add(2)), mins[c][b % 2]);
                }
            }
            i += 8;
        }
        for i in i..nb {
            let x = w.add(i * wsize);
            prefetch_block(x, wsize);
            let qx = quants(x);
            let (dx, mx) = (fp16(x), fp16(x.add(2)));
            for c in 0..N {
                let y = a[c].add(i * 36);
                let sum = hsum_i32(maddubs_i32(qx, load(y.add(4)))) as f32;
                acc[c][i % 2] = (dx * fp16(y)).mul_add(sum, acc[c][i % 2]);
                mins[c][i % 2] = mx.mul_add(fp16(y.add(2)), mins[c][i % 2]);
            }
        }
        std::array::from_fn(|c| (acc[c][0] + acc[c][1]) + (mins[c][0] + mins[c][1]))
    }
}

/// Q4_1's quants, 0..15: 16 nibble bytes at offset 4.
#[inline(always)]
unsafe fn q4_1_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q4_1 block has 16 nibble bytes at offset 4.
    unsafe { nibbles(x.add(4)) }
}

/// Q5_1's quants, 0..31: `qh` at offset 4, 16 nibble bytes at 8.
#[inline(always)]
unsafe fn q5_1_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q5_1 block has qh at offset 4 and 16 nibble bytes at 8.
    unsafe {
        let hi = _mm256_and_si256(bytes_from_bits(x.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(x.add(8)), hi)
    }
}

row_x4_fns!(q8_1_rows, Q8_1; Q4_1, 20, q4_1_quants, vec_dot_q4_1, vec_dot_x4_q4_1, k_q4_1, k_q4_1_x4);
row_x4_fns!(q8_1_rows, Q8_1; Q5_1, 24, q5_1_quants, vec_dot_q5_1, vec_dot_x4_q5_1, k_q5_1, k_q5_1_x4);

// --------------------------------------------------------- K-quant products

/// Σ_j mins[j] · (bsums[2j] + bsums[2j+1]) for one Q8_K block at `y`.
#[inline(always)]
unsafe fn k4_min_sum(mins: [u8; 8], y: *const u8) -> i32 {
    // SAFETY: a Q8_K block has 16 i16 bsums at offset 260; AVX2 is enabled in the callers.
    unsafe {
        let bsums = _mm256_loadu_si256(y.add(260).cast());
        let pairs = _mm_hadd_epi16(
            _mm256_castsi256_si128(bsums),
            _mm256_extracti128_si256::<1>(bsums),
        );
        let m = _mm_cvtepu8_epi16(_mm_loadl_epi64(mins.as_ptr().cast()));
        let p = _mm_madd_epi16(m, pairs);
        let p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
        let p = _mm_add_epi32(p, _mm_shuffle_epi32::<0b01>(p));
        _mm_cvtsi128_si32(p)
    }
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: the caller passes four readable bytes.
    unsafe { p.cast::<f32>().read_unaligned() }
}

/// The float steps of every x86 K-quant kernel (row, x4, tiles, AVX-512),
/// once per super-block with its exact integer sums `s` (scales applied) and
/// `m` (mins applied): `acc = fma(d_w·d_a, s, acc)`,
/// `accm = fma(dmin_w·d_a, m, accm)`; the result is `acc − accm`. Scalar
/// here, the same per lane in the tiles: a token's result is the same in
/// any batch.
#[inline(always)]
pub(super) fn k_block_step(d: f32, s: i32, acc: f32, dm: f32, m: i32, accm: f32) -> (f32, f32) {
    (d.mul_add(s as f32, acc), dm.mul_add(m as f32, accm))
}

/// Q4_K (`HIGH = false`) and Q5_K (`HIGH = true`) against `N` Q8_K rows.
#[inline(always)]
unsafe fn q45_k<const N: usize, const HIGH: bool>(
    nb: usize,
    w: *const u8,
    a: [*const u8; N],
) -> [f32; N] {
    let bsize = if HIGH { 176 } else { 144 };
    let qs_off = if HIGH { 48 } else { 16 };
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m1 = _mm256_set1_epi8(1);
        let mut acc = [0.0f32; N];
        let mut accm = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * bsize);
            prefetch_block(x, bsize);
            let ys = a.map(|p| p.add(i * 292));
            let (dx, dminx) = (fp16(x), fp16(x.add(2)));
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut hbits = if HIGH {
                load(x.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sumi = [_mm256_setzero_si256(); N];
            for j in 0..4 {
                let q = load(x.add(qs_off + 32 * j));
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                if HIGH {
                    let h0 = _mm256_and_si256(hbits, m1);
                    let h1 = _mm256_and_si256(_mm256_srli_epi16::<1>(hbits), m1);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(h0));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(h1));
                    hbits = _mm256_srli_epi16::<2>(hbits);
                }
                let sl = _mm256_set1_epi16(scales[2 * j] as i16);
                let sh = _mm256_set1_epi16(scales[2 * j + 1] as i16);
                for c in 0..N {
                    let q8 = ys[c].add(4 + 64 * j);
                    let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, load(q8)));
                    let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, load(q8.add(32))));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
                }
            }
            for c in 0..N {
                let dy = f32_at(ys[c]);
                let m = k4_min_sum(mins, ys[c]);
                (acc[c], accm[c]) =
                    k_block_step(dy * dx, hsum_i32(sumi[c]), acc[c], dy * dminx, m, accm[c]);
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] - accm[c];
        }
        out
    }
}

/// The 128 unsigned 6-bit quants (0..63) of half `half` of the Q6_K block at
/// `x`, as four vectors of 32 consecutive values.
#[inline(always)]
unsafe fn q6_k_quants(x: *const u8, half: usize) -> [__m256i; 4] {
    // SAFETY: a Q6_K block has ql at 0 (128 bytes) and qh at 128 (64 bytes);
    // AVX2 is enabled in every kernel calling this.
    unsafe {
        let (m4, m2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
        let ql = x.add(64 * half);
        let qh = load(x.add(128 + 32 * half));
        let (b1, b2) = (load(ql), load(ql.add(32)));
        // Two high bits moved to bits 4..5 (a helper, not a closure: closures
        // do not inherit `target_feature`).
        #[inline(always)]
        unsafe fn high(bits: __m256i, m2: __m256i) -> __m256i {
            // SAFETY: AVX2 is enabled in every kernel calling this.
            unsafe { _mm256_slli_epi16::<4>(_mm256_and_si256(bits, m2)) }
        }
        [
            _mm256_or_si256(_mm256_and_si256(b1, m4), high(qh, m2)),
            _mm256_or_si256(
                _mm256_and_si256(b2, m4),
                high(_mm256_srli_epi16::<2>(qh), m2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                high(_mm256_srli_epi16::<4>(qh), m2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                high(_mm256_srli_epi16::<6>(qh), m2),
            ),
        ]
    }
}

/// Q6_K against `N` Q8_K rows. The quants are used unsigned (0..63); the
/// `-32` offset is applied once per block through the activation's bsums.
/// Per block, the exact integer sum, then `acc = fma(d_w·d_a, Σ, acc)`.
#[inline(always)]
unsafe fn q6_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * 210);
            prefetch_block(x, 210);
            let ys = a.map(|p| p.add(i * 292));
            let dx = fp16(x.add(208));
            let sc = &*x.add(192).cast::<[i8; 16]>();
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr().cast()));
            let mut sumi = [_mm256_setzero_si256(); N];
            for c in 0..N {
                // -32 · Σ_s scale_s · bsum_s
                let off = _mm256_madd_epi16(sc16, _mm256_loadu_si256(ys[c].add(260).cast()));
                sumi[c] = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32::<5>(off));
            }
            for half in 0..2 {
                let q = q6_k_quants(x, half);
                for (k, &qk) in q.iter().enumerate() {
                    let s = 8 * half + 2 * k;
                    let scale = _mm256_set_m128i(
                        _mm_set1_epi16(sc[s + 1] as i16),
                        _mm_set1_epi16(sc[s] as i16),
                    );
                    for c in 0..N {
                        let q8 = load(ys[c].add(4 + 128 * half + 32 * k));
                        let p = _mm256_madd_epi16(scale, _mm256_maddubs_epi16(qk, q8));
                        sumi[c] = _mm256_add_epi32(sumi[c], p);
                    }
                }
            }
            for c in 0..N {
                let dy = f32_at(ys[c]);
                acc[c] = (dy * dx).mul_add(hsum_i32(sumi[c]) as f32, acc[c]);
            }
        }
        acc
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q4_k(nb: usize, w: *const u8, a: [*const u8; 1]) -> [f32; 1] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q45_k::<1, false>(nb, w, a) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q4_k_x4(nb: usize, w: *const u8, a: [*const u8; 4]) -> [f32; 4] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q45_k::<4, false>(nb, w, a) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q5_k(nb: usize, w: *const u8, a: [*const u8; 1]) -> [f32; 1] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q45_k::<1, true>(nb, w, a) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q5_k_x4(nb: usize, w: *const u8, a: [*const u8; 4]) -> [f32; 4] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q45_k::<4, true>(nb, w, a) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q6_k(nb: usize, w: *const u8, a: [*const u8; 1]) -> [f32; 1] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q6_k::<1>(nb, w, a) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_q6_k_x4(nb: usize, w: *const u8, a: [*const u8; 4]) -> [f32; 4] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q6_k::<4>(nb, w, a) }
}

macro_rules! k_wrappers {
    ($($ty:ident: $k:ident => $one:ident $(, $k4:ident => $x4:ident)?;)*) => {$(
        pub(crate) fn $one(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = row_blocks(GgmlType::$ty, n, w);
            row_blocks(GgmlType::Q8_K, n, a);
            // SAFETY: both rows hold `nb` blocks (checked above); reachable only through a
            // table handed out after the kernel's features were detected.
            unsafe { $k(nb, w.as_ptr(), [a.as_ptr()])[0] }
        }
        $(
        pub(crate) fn $x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            let nb = row_blocks(GgmlType::$ty, n, w);
            for c in a {
                row_blocks(GgmlType::Q8_K, n, c);
            }
            // SAFETY: as for the row kernel; all five rows hold `nb` blocks.
            unsafe { $k4(nb, w.as_ptr(), a.map(<[u8]>::as_ptr)) }
        }
        )?
    )*};
}

/// One 32-value unit of `S` packed sets of four Q8_K rows against unsigned
/// quants `q`, the steps summed in i16 `STEPS` at a time (the caller keeps
/// `STEPS · 2 · q_max · 127` within i16), each partial widened with `scale`
/// (i16 lanes: the 16-value scale of each half, or one 32-value scale):
/// exact per set, one row per lane, each half on its own.
#[inline(always)]
unsafe fn k_unit<const S: usize, const STEPS: usize>(
    q: __m256i,
    y: *const u8,
    scale: __m256i,
    acc: &mut [__m256i; S],
) {
    // SAFETY: `y` holds the unit's 4 × S packed vectors; AVX2 is enabled in the callers.
    unsafe {
        let ws = all_dwords(q);
        for (set, acc) in acc.iter_mut().enumerate() {
            let mut part = _mm256_setzero_si256();
            for (j, &w) in ws.iter().enumerate() {
                let a = load(y.add(32 * (j * S + set)));
                part = _mm256_add_epi16(part, _mm256_maddubs_epi16(w, a));
                if (j + 1) % STEPS == 0 {
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(part, scale));
                    part = _mm256_setzero_si256();
                }
            }
        }
    }
}

/// `Σ_p madd(pair_p, sums_p)` over the 8 i16 pairs of a packed Q8_K
/// super-block for one set of four rows: `pairs[p]` holds two i16 factors.
#[inline(always)]
unsafe fn k_pair_sums<const S: usize>(pairs: [i32; 8], y: *const u8, set: usize) -> __m128i {
    // SAFETY: `y` points at the group's 8 × 4S pairs; AVX2 is enabled in the callers.
    unsafe {
        let mut m = _mm_setzero_si128();
        for (p, &f) in pairs.iter().enumerate() {
            let v = _mm_loadu_si128(y.add((p * 4 * S + 4 * set) * 4).cast());
            m = _mm_add_epi32(m, _mm_madd_epi16(_mm_set1_epi32(f), v));
        }
        m
    }
}

/// One Q4_K unit (nibbles `q`, 32 values) against `S` packed sets of four
/// rows at `y`: `acc[set] += scale · Σ q·a`, exact, each set's halves apart.
pub(super) type Q4KUnit<const S: usize> = unsafe fn(__m256i, *const u8, i16, &mut [__m256i; S]);

/// [`Q4KUnit`] with `maddubs`: nibbles ≤ 15, so four steps stay within i16
/// (4·2·15·127), then one `madd` by the scale.
#[inline(always)]
pub(super) unsafe fn q4_k_unit<const S: usize>(
    q: __m256i,
    y: *const u8,
    scale: i16,
    acc: &mut [__m256i; S],
) {
    // SAFETY: forwarded from the tile's contract.
    unsafe { k_unit::<S, 4>(q, y, _mm256_set1_epi16(scale), acc) }
}

/// One Q6_K unit (quants `q` ≤ 63, 32 values) against `S` packed sets of
/// four rows at `y`: `acc[set] += Σ scale·q·a` with the scale of values
/// 0..15 (each set's low half) and of values 16..31 (its high half), exact.
pub(super) type Q6KUnit<const S: usize> = unsafe fn(__m256i, *const u8, [i8; 2], &mut [__m256i; S]);

/// [`Q6KUnit`] with `maddubs`: two steps stay within i16 (2·2·63·127).
#[inline(always)]
pub(super) unsafe fn q6_k_unit<const S: usize>(
    q: __m256i,
    y: *const u8,
    scales: [i8; 2],
    acc: &mut [__m256i; S],
) {
    // SAFETY: forwarded from the tile's contract.
    unsafe {
        let scale = _mm256_set_m128i(
            _mm_set1_epi16(scales[1] as i16),
            _mm_set1_epi16(scales[0] as i16),
        );
        k_unit::<S, 2>(q, y, scale, acc)
    }
}

/// Two i16 in one i32 lane: `lo` in the low half.
#[inline(always)]
fn i16_pair(lo: i32, hi: i32) -> i32 {
    (lo & 0xFFFF) | (hi << 16)
}

/// One Q4_K weight row against a packed group of `4·S` Q8_K rows (see
/// [`crate::pack`]), rows side by side: per super-block the exact integer
/// sums with scales and with mins, then [`k_block_step`] per lane — the row
/// kernels' bits.
///
/// `unit` is the ISA's integer part: one 32-value unit's scaled sums.
#[inline(always)]
pub(super) unsafe fn q4_k_tile<const S: usize>(
    nb: usize,
    w: *const u8,
    packed: *const u8,
    unit: Q4KUnit<S>,
) -> [[f32; 4]; S] {
    // SAFETY: the same contract.
    unsafe { q45_k_tile::<S, false>(nb, w, packed, unit) }
}

/// [`q4_k_tile`] for Q5_K: each nibble with its fifth bit (quants ≤ 31,
/// which a [`Q4KUnit`]'s four `maddubs` steps still hold in i16:
/// 4·2·31·127 < 2^15), the same sums and steps — the row kernel's bits.
#[inline(always)]
pub(super) unsafe fn q5_k_tile<const S: usize>(
    nb: usize,
    w: *const u8,
    packed: *const u8,
    unit: Q4KUnit<S>,
) -> [[f32; 4]; S] {
    // SAFETY: as for `q4_k_tile`, with 176-byte weight blocks.
    unsafe { q45_k_tile::<S, true>(nb, w, packed, unit) }
}

/// Q4_K (`HIGH = false`) or Q5_K (`HIGH = true`) against a packed group:
/// [`q4_k_tile`], [`q5_k_tile`].
#[inline(always)]
unsafe fn q45_k_tile<const S: usize, const HIGH: bool>(
    nb: usize,
    w: *const u8,
    packed: *const u8,
    unit: Q4KUnit<S>,
) -> [[f32; 4]; S] {
    let bsize = if HIGH { 176 } else { 144 };
    let qs_off = if HIGH { 48 } else { 16 };
    // SAFETY: the wrappers checked `nb` weight blocks and `nb` packed super-block
    // groups of `4·S` rows; AVX2/FMA/F16C are enabled in the callers.
    unsafe {
        let gb = crate::pack::q8_k_group_block(4 * S);
        let (m4, m1) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
        let mut acc = [_mm_setzero_ps(); S];
        let mut accm = [_mm_setzero_ps(); S];
        for i in 0..nb {
            let (x, y) = (w.add(i * bsize), packed.add(i * gb));
            prefetch_block(x, bsize);
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut hbits = if HIGH {
                load(x.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sums = [_mm256_setzero_si256(); S];
            for j in 0..4 {
                let q = load(x.add(qs_off + 32 * j));
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                if HIGH {
                    // As in `q45_k`: two of the fifth bits per byte a step.
                    let h0 = _mm256_and_si256(hbits, m1);
                    let h1 = _mm256_and_si256(_mm256_srli_epi16::<1>(hbits), m1);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(h0));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(h1));
                    hbits = _mm256_srli_epi16::<2>(hbits);
                }
                for (u, q) in [(2 * j, lo), (2 * j + 1, hi)] {
                    unit(q, y.add(u * 128 * S), scales[u] as i16, &mut sums);
                }
            }
            let pairs = mins.map(|m| i16_pair(m as i32, m as i32));
            let (dx, dminx) = (fp16_x8(x), fp16_x8(x.add(2)));
            for set in 0..S {
                let s = fold_set(sums[set]);
                let m = k_pair_sums::<S>(pairs, y.add(260 * 4 * S), set);
                let dy = _mm_loadu_ps(y.add(256 * 4 * S + 16 * set).cast());
                let d = _mm_mul_ps(_mm256_castps256_ps128(dx), dy);
                let dm = _mm_mul_ps(_mm256_castps256_ps128(dminx), dy);
                acc[set] = _mm_fmadd_ps(d, _mm_cvtepi32_ps(s), acc[set]);
                accm[set] = _mm_fmadd_ps(dm, _mm_cvtepi32_ps(m), accm[set]);
            }
        }
        let mut out = [[0.0f32; 4]; S];
        for set in 0..S {
            _mm_storeu_ps(out[set].as_mut_ptr(), _mm_sub_ps(acc[set], accm[set]));
        }
        out
    }
}

/// One Q6_K weight row against a packed group of `4·S` Q8_K rows: unsigned
/// quants (0..63), the `-32` offset through the 16-value sums, per super-block
/// the exact integer sum, then `acc = fma(d_w·d_a, Σ, acc)` per lane.
#[inline(always)]
pub(super) unsafe fn q6_k_tile<const S: usize>(
    nb: usize,
    w: *const u8,
    packed: *const u8,
    unit: Q6KUnit<S>,
) -> [[f32; 4]; S] {
    // SAFETY: as for `q4_k_tile`, with 210-byte weight blocks.
    unsafe {
        let gb = crate::pack::q8_k_group_block(4 * S);
        let mut acc = [_mm_setzero_ps(); S];
        for i in 0..nb {
            let (x, y) = (w.add(i * 210), packed.add(i * gb));
            prefetch_block(x, 210);
            let sc = &*x.add(192).cast::<[i8; 16]>();
            let mut sums = [_mm256_setzero_si256(); S];
            for half in 0..2 {
                let q = q6_k_quants(x, half);
                for (k, &qk) in q.iter().enumerate() {
                    let u = 4 * half + k;
                    unit(
                        qk,
                        y.add(u * 128 * S),
                        [sc[2 * u], sc[2 * u + 1]],
                        &mut sums,
                    );
                }
            }
            let pairs: [i32; 8] =
                std::array::from_fn(|p| i16_pair(sc[2 * p] as i32, sc[2 * p + 1] as i32));
            let dx = fp16_x8(x.add(208));
            for set in 0..S {
                let off = k_pair_sums::<S>(pairs, y.add(260 * 4 * S), set);
                let s = _mm_sub_epi32(fold_set(sums[set]), _mm_slli_epi32::<5>(off));
                let dy = _mm_loadu_ps(y.add(256 * 4 * S + 16 * set).cast());
                let d = _mm_mul_ps(_mm256_castps256_ps128(dx), dy);
                acc[set] = _mm_fmadd_ps(d, _mm_cvtepi32_ps(s), acc[set]);
            }
        }
        let mut out = [[0.0f32; 4]; S];
        for set in 0..S {
            _mm_storeu_ps(out[set].as_mut_ptr(), acc[set]);
        }
        out
    }
}

k_tiles! {
    "avx2,fma,f16c";
    Q4_K: q4_k_tile(q4_k_unit), k_q4_k_x16 => tile16_q4_k, k_q4_k_x12 => tile12_q4_k,
        k_q4_k_x8 => tile8_q4_k, k_q4_k_t4 => tile4_q4_k;
    Q5_K: q5_k_tile(q4_k_unit), k_q5_k_x16 => tile16_q5_k, k_q5_k_x12 => tile12_q5_k,
        k_q5_k_x8 => tile8_q5_k, k_q5_k_t4 => tile4_q5_k;
    Q6_K: q6_k_tile(q6_k_unit), k_q6_k_x16 => tile16_q6_k, k_q6_k_x12 => tile12_q6_k,
        k_q6_k_x8 => tile8_q6_k, k_q6_k_t4 => tile4_q6_k;
}

k_wrappers! {
    Q4_K: k_q4_k => vec_dot_q4_k, k_q4_k_x4 => vec_dot_x4_q4_k;
    Q5_K: k_q5_k => vec_dot_q5_k, k_q5_k_x4 => vec_dot_x4_q5_k;
    Q6_K: k_q6_k => vec_dot_q6_k, k_q6_k_x4 => vec_dot_x4_q6_k;
}

// ------------------------------------------------------------------- floats

/// Σ x·y over `n` values; `load8` turns 8 elements at a pointer into f32 lanes.
#[inline(always)]
unsafe fn float_dot(
    n: usize,
    x: *const u8,
    y: *const u8,
    esize: usize,
    load8: unsafe fn(*const u8) -> __m256,
    one: unsafe fn(*const u8) -> f32,
) -> f32 {
    // SAFETY: both rows hold `n` elements of `esize` bytes; AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = (i + 8 * k) * esize;
                *a = _mm256_fmadd_ps(load8(x.add(o)), load8(y.add(o)), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(load8(x.add(i * esize)), load8(y.add(i * esize)), acc[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut sum = hsum_f32(v);
        while i < n {
            sum += one(x.add(i * esize)) * one(y.add(i * esize));
            i += 1;
        }
        sum
    }
}

#[inline(always)]
pub(super) unsafe fn load8_f32(p: *const u8) -> __m256 {
    // SAFETY: the caller passes 32 readable bytes.
    unsafe { _mm256_loadu_ps(p.cast()) }
}
#[inline(always)]
pub(super) unsafe fn load8_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller passes 16 readable bytes; F16C is enabled.
    unsafe {
        if cfg!(miri) {
            // Miri lacks F16C (the AVX-512 attention's tests run there).
            let f: [f32; 8] = std::array::from_fn(|i| fp16(p.add(2 * i)));
            return _mm256_loadu_ps(f.as_ptr());
        }
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_f32(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { float_dot(n, x, y, 4, load8_f32, f32_at) }
}
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { float_dot(n, x, y, 2, load8_f16, fp16) }
}

pub(crate) fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(GgmlType::F32, n, w);
    row_blocks(GgmlType::F32, n, a);
    // SAFETY: both rows hold `n` f32 (checked above); reachable only after AVX2 detection.
    unsafe { k_f32(n, w.as_ptr(), a.as_ptr()) }
}
pub(crate) fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(GgmlType::F16, n, w);
    row_blocks(GgmlType::F16, n, a);
    // SAFETY: both rows hold `n` f16 (checked above); reachable only after AVX2 detection.
    unsafe { k_f16(n, w.as_ptr(), a.as_ptr()) }
}

// --------------------------------------------------------------- quantizers

/// Rounds half away from zero like C's `roundf`: `trunc(x + copysign(0.5 - ulp/4, x))`
/// (the largest float below 0.5 makes `0.49999997` round down, `0.5` up).
#[inline(always)]
unsafe fn round_away(x: __m256) -> __m256 {
    // SAFETY: AVX is enabled in every caller.
    unsafe {
        let sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0));
        let half = _mm256_or_ps(sign, _mm256_set1_ps(f32::from_bits(0x3eff_ffff)));
        _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(_mm256_add_ps(x, half))
    }
}

#[inline(always)]
unsafe fn abs_ps(x: __m256) -> __m256 {
    // SAFETY: AVX is enabled in every caller.
    unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), x) }
}

#[inline(always)]
unsafe fn hmax_ps(v: __m256) -> f32 {
    // SAFETY: AVX is enabled in every caller.
    unsafe {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        _mm_cvtss_f32(m)
    }
}

/// Four vectors of i32 (each in i8 range) → 32 bytes in order.
#[inline(always)]
unsafe fn pack_i8(v: [__m256i; 4]) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        let a = _mm256_packs_epi32(v[0], v[1]);
        let b = _mm256_packs_epi32(v[2], v[3]);
        let p = _mm256_packs_epi16(a, b);
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// One 32-value Q8_0/Q8_1 block: returns (d, Σq) and writes the quants to `qs`.
#[inline(always)]
unsafe fn q8_block(x: *const f32, qs: *mut u8) -> (f32, i32) {
    // SAFETY: `x` has 32 readable floats, `qs` 32 writable bytes; AVX2 is enabled.
    unsafe {
        // Plain arrays, not `map` closures: closures do not inherit `target_feature`,
        // and the intrinsics inside them would be called out of line.
        let v = [
            _mm256_loadu_ps(x),
            _mm256_loadu_ps(x.add(8)),
            _mm256_loadu_ps(x.add(16)),
            _mm256_loadu_ps(x.add(24)),
        ];
        let m = _mm256_max_ps(
            _mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
            _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])),
        );
        let d = hmax_ps(m) / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = [
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[0], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[1], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[2], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[3], id))),
        ];
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        _mm256_storeu_si256(qs.cast(), pack_i8(q));
        (d, hsum_i32(sum))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_quantize_q8_0(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(34 * i);
            let (d, _) = q8_block(x.add(32 * i), b.add(2));
            b.cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(d).to_le_bytes());
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_quantize_q8_1(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(36 * i);
            let (d, sum) = q8_block(x.add(32 * i), b.add(4));
            b.cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(d).to_le_bytes());
            b.add(2)
                .cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(sum as f32 * d).to_le_bytes());
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_quantize_q8_k(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input (256 floats) and output (292 bytes), checked by the wrapper.
        unsafe {
            let x = x.add(256 * i);
            let b = y.add(292 * i);
            let mut m = _mm256_setzero_ps();
            for k in 0..32 {
                m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x.add(8 * k))));
            }
            let amax = hmax_ps(m);
            if amax == 0.0 {
                core::ptr::write_bytes(b, 0, 292);
                continue;
            }
            // The first value of largest magnitude sets the sign, as in the reference.
            let am = _mm256_set1_ps(amax);
            let mut first = 0;
            for k in 0..32 {
                let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(abs_ps(_mm256_loadu_ps(x.add(8 * k))), am);
                let mask = _mm256_movemask_ps(eq);
                if mask != 0 {
                    first = 8 * k + mask.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = -127.0 / *x.add(first);
            let vs = _mm256_set1_ps(iscale);
            let magic = _mm256_set1_ps(12_582_912.0);
            let (low, bias, top) = (
                _mm256_set1_epi32(0x007f_ffff),
                _mm256_set1_epi32(0x0040_0000),
                _mm256_set1_epi32(127),
            );
            let mut bsums = [0i16; 16];
            for g in 0..8 {
                let mut q = [_mm256_setzero_si256(); 4];
                for (j, q) in q.iter_mut().enumerate() {
                    let v = _mm256_add_ps(
                        _mm256_mul_ps(vs, _mm256_loadu_ps(x.add(32 * g + 8 * j))),
                        magic,
                    );
                    let n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), low), bias);
                    *q = _mm256_min_epi32(n, top);
                }
                bsums[2 * g] = hsum_i32(_mm256_add_epi32(q[0], q[1])) as i16;
                bsums[2 * g + 1] = hsum_i32(_mm256_add_epi32(q[2], q[3])) as i16;
                _mm256_storeu_si256(b.add(4 + 32 * g).cast(), pack_i8(q));
            }
            b.cast::<f32>().write_unaligned(1.0 / iscale);
            b.add(260).cast::<[i16; 16]>().write_unaligned(bsums);
        }
    }
}

macro_rules! quantizers {
    ($($ty:ident, $bs:expr, $k:ident => $f:ident;)*) => {$(
        pub(crate) fn $f(src: &[f32], dst: &mut [u8]) {
            assert!(src.len().is_multiple_of($bs), "{} values is not a whole number of blocks", src.len());
            let nb = src.len() / $bs;
            assert_eq!(dst.len(), nb * GgmlType::$ty.type_size(), "activation buffer size");
            // SAFETY: `nb` whole blocks of input and output (checked above); reachable only
            // through a table handed out after AVX2+FMA+F16C were detected.
            unsafe { $k(nb, src.as_ptr(), dst.as_mut_ptr()) }
        }
    )*};
}

quantizers! {
    Q8_0, 32, k_quantize_q8_0 => quantize_q8_0;
    Q8_1, 32, k_quantize_q8_1 => quantize_q8_1;
    Q8_K, 256, k_quantize_q8_k => quantize_q8_k;
}

// ---------------------------------------------------------------- attention

/// Eight f32 × 8 vectors → one vector of their eight horizontal sums, in order.
#[inline(always)]
unsafe fn hsum8_ps(p: &[__m256; 8]) -> __m256 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let s01 = _mm256_hadd_ps(p[0], p[1]);
        let s23 = _mm256_hadd_ps(p[2], p[3]);
        let s45 = _mm256_hadd_ps(p[4], p[5]);
        let s67 = _mm256_hadd_ps(p[6], p[7]);
        let s0123 = _mm256_hadd_ps(s01, s23);
        let s4567 = _mm256_hadd_ps(s45, s67);
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(s0123, s4567),
            _mm256_permute2f128_ps::<0x31>(s0123, s4567),
        )
    }
}

/// [`crate::ops::exp_fast`] in 8 lanes: the same range reduction and polynomial.
#[inline(always)]
unsafe fn exp_ps(x: __m256) -> __m256 {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.0));
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
            _mm256_set1_ps(88.0),
        );
        let magic = _mm256_set1_ps(12_582_912.0);
        let n = _mm256_sub_ps(
            _mm256_add_ps(
                _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
                magic,
            ),
            magic,
        );
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693_359_4))),
            _mm256_mul_ps(n, _mm256_set1_ps(-2.121_944_4e-4)),
        );
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
        }
        let e = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r),
            _mm256_set1_ps(1.0),
        );
        let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_andnot_ps(below, _mm256_mul_ps(e, _mm256_castsi256_ps(pow2)))
    }
}

/// Keys per online-softmax update (the scalar path's block, for the same rescaling points).
const KEY_BLOCK: usize = crate::attention::KEY_BLOCK;

/// Four f32 × 8 vectors → their four horizontal sums, each by the same
/// addition tree as [`hsum8_ps`] gives it.
#[inline(always)]
pub(super) unsafe fn hsum4_ps(p: [__m256; 4]) -> __m128 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let s0123 = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
        _mm_add_ps(
            _mm256_castps256_ps128(s0123),
            _mm256_extractf128_ps::<1>(s0123),
        )
    }
}

/// One key's score for `R` heads into `s[r][j]`: one FMA chain over the
/// head's 8-value chunks, then `hsum_f32`'s tree (the keys past a block's
/// last whole group of eight, in the AVX2 and AVX-512 kernels alike).
#[inline(always)]
pub(super) unsafe fn score_one<const R: usize, const ESIZE: usize>(
    q: [*const f32; R],
    hd: usize,
    key: *const u8,
    scale: f32,
    load8: unsafe fn(*const u8) -> __m256,
    s: &mut [[f32; KEY_BLOCK]; R],
    j: usize,
) {
    // SAFETY: the caller passes `hd` values (a multiple of 8) at each `q[r]` and
    // at `key`; AVX2 and FMA are enabled in every kernel calling this.
    unsafe {
        for r in 0..R {
            let mut a = _mm256_setzero_ps();
            for c in 0..hd / 8 {
                let qv = _mm256_loadu_ps(q[r].add(8 * c));
                a = _mm256_fmadd_ps(qv, load8(key.add(8 * c * ESIZE)), a);
            }
            s[r][j] = hsum_f32(a) * scale;
        }
    }
}

/// One key block's softmax step for `R` heads: the scores `s[r][..n]`
/// (soft-capped here when `softcap` is set) raise each head's running max,
/// rescaling its output row (`hd` values at `out[r]`, a multiple of 8) and
/// its sum; then `p[r] = exp(s − max)` in 8 lanes (lanes past `n` give 0)
/// and the sum grows by their total. Shared by the AVX2 and AVX-512 kernels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn softmax_block<const R: usize>(
    s: &mut [[f32; KEY_BLOCK]; R],
    n: usize,
    softcap: Option<f32>,
    max: &mut [f32; R],
    sum: &mut [f32; R],
    p: &mut [[f32; KEY_BLOCK]; R],
    out: [*mut f32; R],
    hd: usize,
) {
    // SAFETY: the caller passes `hd` values at each `out[r]` and `n ≤ KEY_BLOCK`;
    // AVX2 is enabled in every kernel calling this.
    unsafe {
        for r in 0..R {
            let s = &mut s[r];
            if let Some(c) = softcap {
                s[..n].iter_mut().for_each(|x| *x = c * (*x / c).tanh());
            }
            // Lanes past `n` hold -inf: they leave the max alone and give 0.
            s[n..n.next_multiple_of(8).min(KEY_BLOCK)].fill(f32::NEG_INFINITY);
            // The max in 8 lanes (a scalar fold was a fifth of the kernel's time).
            let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
            for c in 0..n.div_ceil(8) {
                mv = _mm256_max_ps(mv, _mm256_loadu_ps(s.as_ptr().add(8 * c)));
            }
            let block_max = hmax_ps(mv);
            if block_max > max[r] {
                let rescale = crate::ops::exp_fast(max[r] - block_max);
                if sum[r] > 0.0 {
                    let f = _mm256_set1_ps(rescale);
                    for c in 0..hd / 8 {
                        let o = out[r].add(8 * c);
                        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), f));
                    }
                }
                sum[r] *= rescale;
                max[r] = block_max;
            }
            let m = _mm256_set1_ps(max[r]);
            let mut psum = _mm256_setzero_ps();
            for c in 0..n.div_ceil(8) {
                let e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s.as_ptr().add(8 * c)), m));
                _mm256_storeu_ps(p[r].as_mut_ptr().add(8 * c), e);
                psum = _mm256_add_ps(psum, e);
            }
            sum[r] += hsum_f32(psum);
        }
    }
}

/// `R` query heads (`hd` f32 each at `q[r]`, `hd` a multiple of 8) that
/// share one kv head, against key rows `start..end` (row `j`'s head at
/// `k + j·row`, elements read by `load8`), into `out[r]`: scores 8 keys at a
/// time (8 FMA chains per head, the same addition tree for every key of a
/// full step), the block's `exp` in 8 lanes, and the value rows accumulated
/// into the outputs 8 dimensions at a time. Each key and value row is read
/// once for all `R` heads; every head gets the bits it gets alone (`R = 1`).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn attend<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
) {
    let KeyRows {
        hd,
        k,
        v,
        row,
        start,
        end,
        scale,
        softcap,
    } = rows;
    // SAFETY: the wrapper checked `hd` values at each `q[r]` and `out[r]` and that
    // every key row of the range holds `hd` elements; AVX2/FMA/F16C are enabled.
    unsafe {
        let chunks = hd / 8;
        for o in out {
            for c in 0..chunks {
                _mm256_storeu_ps(o.add(8 * c), _mm256_setzero_ps());
            }
        }
        let (mut max, mut sum) = ([f32::NEG_INFINITY; R], [0.0f32; R]);
        let mut s = [[f32::NEG_INFINITY; KEY_BLOCK]; R];
        let mut j0 = start;
        while j0 < end {
            let n = (end - j0).min(KEY_BLOCK);
            let key = |j: usize| k.add((j0 + j) * row);
            let mut j = 0;
            while j + 8 <= n {
                if R == 1 {
                    let mut acc = [_mm256_setzero_ps(); 8];
                    for c in 0..chunks {
                        let qv = _mm256_loadu_ps(q[0].add(8 * c));
                        for (i, a) in acc.iter_mut().enumerate() {
                            *a = _mm256_fmadd_ps(qv, load8(key(j + i).add(8 * c * ESIZE)), *a);
                        }
                    }
                    let sv = _mm256_mul_ps(hsum8_ps(&acc), _mm256_set1_ps(scale));
                    _mm256_storeu_ps(s[0].as_mut_ptr().add(j), sv);
                } else {
                    // Four keys × R heads per pass: each key's FMA chain and
                    // addition tree are the single head's.
                    for half in [j, j + 4] {
                        let mut acc = [[_mm256_setzero_ps(); 4]; R];
                        for c in 0..chunks {
                            let kv: [__m256; 4] =
                                std::array::from_fn(|i| load8(key(half + i).add(8 * c * ESIZE)));
                            for r in 0..R {
                                let qv = _mm256_loadu_ps(q[r].add(8 * c));
                                for i in 0..4 {
                                    acc[r][i] = _mm256_fmadd_ps(qv, kv[i], acc[r][i]);
                                }
                            }
                        }
                        for r in 0..R {
                            let sv = _mm_mul_ps(hsum4_ps(acc[r]), _mm_set1_ps(scale));
                            _mm_storeu_ps(s[r].as_mut_ptr().add(half), sv);
                        }
                    }
                }
                j += 8;
            }
            while j < n {
                score_one::<R, ESIZE>(q, hd, key(j), scale, load8, &mut s, j);
                j += 1;
            }
            let mut p = [[0.0f32; KEY_BLOCK]; R];
            softmax_block(&mut s, n, softcap, &mut max, &mut sum, &mut p, out, hd);
            // Values: two chunks of 8 dimensions of all R outputs in registers
            // while the block's value rows stream past (one chunk at the end).
            let mut c = 0;
            while c < chunks {
                let two = c + 2 <= chunks;
                let mut acc = [[_mm256_setzero_ps(); 2]; R];
                for r in 0..R {
                    acc[r][0] = _mm256_loadu_ps(out[r].add(8 * c));
                    if two {
                        acc[r][1] = _mm256_loadu_ps(out[r].add(8 * c + 8));
                    }
                }
                for jj in 0..n {
                    let vrow = v.add((j0 + jj) * row + 8 * c * ESIZE);
                    let v0 = load8(vrow);
                    let v1 = if two { load8(vrow.add(8 * ESIZE)) } else { v0 };
                    for r in 0..R {
                        let pj = _mm256_set1_ps(p[r][jj]);
                        acc[r][0] = _mm256_fmadd_ps(pj, v0, acc[r][0]);
                        if two {
                            acc[r][1] = _mm256_fmadd_ps(pj, v1, acc[r][1]);
                        }
                    }
                }
                for r in 0..R {
                    _mm256_storeu_ps(out[r].add(8 * c), acc[r][0]);
                    if two {
                        _mm256_storeu_ps(out[r].add(8 * c + 8), acc[r][1]);
                    }
                }
                c += if two { 2 } else { 1 };
            }
            j0 += n;
        }
        normalize(&sum, out, hd);
    }
}

/// Divides each head's output row (`hd` values at `out[r]`, a multiple of 8)
/// by its softmax sum (rows that attended nothing stay zero).
#[inline(always)]
pub(super) unsafe fn normalize<const R: usize>(sum: &[f32; R], out: [*mut f32; R], hd: usize) {
    // SAFETY: the caller passes `hd` values at each `out[r]`; AVX is enabled in
    // every kernel calling this.
    unsafe {
        for r in 0..R {
            if sum[r] > 0.0 {
                let f = _mm256_set1_ps(1.0 / sum[r]);
                for c in 0..hd / 8 {
                    let o = out[r].add(8 * c);
                    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), f));
                }
            }
        }
    }
}

/// An attention kernel call's key and value rows and scaling: key rows
/// `start..end`, row `j`'s kv head at `k + j·row` (and `v + j·row`), `hd`
/// values each; scores times `scale`, soft-capped where `softcap` is set.
#[derive(Clone, Copy)]
pub(super) struct KeyRows {
    pub hd: usize,
    pub k: *const u8,
    pub v: *const u8,
    pub row: usize,
    pub start: usize,
    pub end: usize,
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// One attention kernel entry point (see [`attend`]): `R` heads' queries
/// at `q` and outputs at `out`, `R·hd` values each.
pub(super) type AttendKernel = unsafe fn(KeyRows, *const f32, *mut f32);

attend_fns! {
    "avx2,fma,f16c", attend;
    ATTEND_F32: 4, load8_f32 => k_attend1_f32: 1, k_attend2_f32: 2, k_attend3_f32: 3, k_attend4_f32: 4;
    ATTEND_F16: 2, load8_f16 => k_attend1_f16: 1, k_attend2_f16: 2, k_attend3_f16: 3, k_attend4_f16: 4;
}
// The same arithmetic with AVX-512 VL's 32 vector registers: four heads' score
// chains fit without spilling.
attend_fns! {
    "avx2,fma,f16c,avx512f,avx512vl", attend;
    ATTEND_F32_VL: 4, load8_f32 => v_attend1_f32: 1, v_attend2_f32: 2, v_attend3_f32: 3, v_attend4_f32: 4;
    ATTEND_F16_VL: 2, load8_f16 => v_attend1_f16: 1, v_attend2_f16: 2, v_attend3_f16: 3, v_attend4_f16: 4;
}

/// [`crate::attention::AttendFn`] with AVX2 + FMA + F16C (head dimension a
/// multiple of 8, up to [`crate::attention::MAX_HEADS`] heads per call).
pub(crate) fn attend_row(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    attend_row_with([ATTEND_F32, ATTEND_F16], args, out)
}

/// [`attend_row`] built for AVX-512 VL (the same bits); reachable only
/// after AVX-512 F/VL detection.
pub(crate) fn attend_row_vl(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    attend_row_with([ATTEND_F32_VL, ATTEND_F16_VL], args, out)
}

pub(super) fn attend_row_with(
    [f32_kernels, f16_kernels]: [[AttendKernel; crate::attention::MAX_HEADS]; 2],
    args: crate::attention::RowArgs<'_>,
    out: &mut [f32],
) {
    use crate::attention::{KvRows, MAX_HEADS};
    let crate::attention::RowArgs {
        q,
        head_dim: hd,
        k,
        v,
        off,
        kv_row,
        keys,
        scale,
        softcap,
    } = args;
    let heads = q.len() / hd.max(1);
    assert!(
        hd.is_multiple_of(8) && q.len() == heads * hd && out.len() == q.len(),
        "heads of {hd} values"
    );
    assert!(
        (1..=MAX_HEADS).contains(&heads),
        "{heads} heads in one call"
    );
    if keys.is_empty() {
        out.fill(0.0);
        return;
    }
    // Every key row of the range must hold the head: `(end-1)·kv_row + off + hd ≤ len`.
    let fits = |len: usize| (keys.end - 1) * kv_row + off + hd <= len;
    let (kernel, kp, vp, esize): (AttendKernel, *const u8, *const u8, usize) = match (k, v) {
        (KvRows::F32(k), KvRows::F32(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows {keys:?}");
            (
                f32_kernels[heads - 1],
                k[off..].as_ptr().cast(),
                v[off..].as_ptr().cast(),
                4,
            )
        }
        (KvRows::F16(k), KvRows::F16(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows {keys:?}");
            (
                f16_kernels[heads - 1],
                k[off..].as_ptr().cast(),
                v[off..].as_ptr().cast(),
                2,
            )
        }
        // `attention_on` refuses keys and values of different types.
        _ => unreachable!("keys and values of different types"),
    };
    // SAFETY: the rows read lie inside `k` and `v` (checked above), `q` and `out`
    // hold `heads · hd` values; reachable only after the detection of the
    // kernels' features (AVX2/FMA/F16C, and AVX-512 F/VL for the VL table).
    unsafe {
        let rows = KeyRows {
            hd,
            k: kp,
            v: vp,
            row: kv_row * esize,
            start: keys.start,
            end: keys.end,
            scale,
            softcap,
        };
        kernel(rows, q.as_ptr(), out.as_mut_ptr())
    }
}

// ------------------------------------------------------------ activations

/// [`crate::ops::gelu_mul`] in 8 lanes: the same operations in the same
/// order (no FMA contraction), so the same bits.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_gelu_mul(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX2 is enabled.
    unsafe {
        let (c, a) = (_mm256_set1_ps(0.797_884_6), _mm256_set1_ps(0.044_715));
        let (one, m2) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-2.0));
        for i in (0..n / 8).map(|i| 8 * i) {
            let u = _mm256_loadu_ps(gate.add(i));
            // z = c·u·(1 + a·u·u), evaluated left to right as the scalar code.
            let z = _mm256_mul_ps(
                _mm256_mul_ps(c, u),
                _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(a, u), u)),
            );
            let g = _mm256_div_ps(u, _mm256_add_ps(one, exp_ps(_mm256_mul_ps(m2, z))));
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(g, _mm256_loadu_ps(up.add(i))));
        }
    }
}

/// [`crate::ops::silu_mul`] in 8 lanes, the same bits.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_silu_mul(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX2 is enabled.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        let neg = _mm256_set1_ps(-0.0);
        for i in (0..n / 8).map(|i| 8 * i) {
            let g = _mm256_loadu_ps(gate.add(i));
            let s = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(_mm256_xor_ps(g, neg))));
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up.add(i))));
        }
    }
}

/// The 8-lane part of a gated activation: the first `len / 8 · 8` values;
/// the caller finishes the tail with the scalar code. Returns that count.
pub(crate) fn gelu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; reachable only after AVX2 detection.
    unsafe { k_gelu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    gate.len() / 8 * 8
}
/// As [`gelu_mul`], for SiLU.
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; reachable only after AVX2 detection.
    unsafe { k_silu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    gate.len() / 8 * 8
}

// ------------------------------------------------------------ panel activations

/// Quantizes `nb` blocks of 32 floats to Q8_0 and writes each in the legacy
/// panels' prepared form (see [`crate::panel`]): the 32 quants, the f16
/// scale as f32, and `−Σq · 2^SHIFT`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_quantize_prepared<const SHIFT: u32>(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(crate::panel::LEGACY_ACT * i);
            let (d, sum) = q8_block(x.add(32 * i), b);
            let d = f16::from_f32(d).to_f32();
            b.add(32).cast::<[u8; 4]>().write_unaligned(d.to_le_bytes());
            // |Σq| ≤ 32·127 < 2^12: the offset fits an i32 for any shift ≤ 18.
            b.add(36)
                .cast::<[u8; 4]>()
                .write_unaligned((-(sum << SHIFT)).to_le_bytes());
        }
    }
}

fn quantize_prepared<const SHIFT: u32>(x: &[f32], out: &mut [u8]) {
    let nb = x.len() / 32;
    assert!(
        x.len().is_multiple_of(32) && out.len() == nb * crate::panel::LEGACY_ACT,
        "{} values into {} prepared bytes",
        x.len(),
        out.len()
    );
    // SAFETY: `nb` blocks of input and output (checked above); reachable only
    // through the AVX2 and AVX-512 tables, handed out after AVX2/FMA/F16C were
    // detected.
    unsafe { k_quantize_prepared::<SHIFT>(nb, x.as_ptr(), out.as_mut_ptr()) }
}

/// [`crate::panel::QuantizePreparedFn`] of the Q4_0, Q5_0 and Q8_0 panels
/// (their weights' unsigned offsets: 2^3, 2^4, 2^7).
pub(crate) fn quantize_prepared_q4_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<3>(x, out)
}
pub(crate) fn quantize_prepared_q5_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<4>(x, out)
}
pub(crate) fn quantize_prepared_q8_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<7>(x, out)
}
