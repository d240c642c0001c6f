//! Helpers shared by the AVX2 and AVX-512 kernels: scalar loads of block
//! scales, 256-bit loads and horizontal sums, nibble and bit unpacking, the
//! legacy types' unsigned decoders, the K-quants' float step and the weight
//! prefetches.
//!
//! Every function is `#[inline(always)]`, so it compiles inside the calling
//! kernel with that kernel's `#[target_feature]` set.

use core::arch::x86_64::*;
use half::f16;

#[inline(always)]
pub(super) unsafe fn rd_u16(p: *const u8) -> u16 {
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

#[inline(always)]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
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

/// 16 bytes of nibbles → 32 bytes: low nibbles first, then high nibbles.
#[inline(always)]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: `p` has 16 readable bytes; AVX2 is enabled in every caller.
    unsafe {
        let t = _mm_loadu_si128(p.cast());
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// 32 bits (little-endian at `p`) → 32 bytes, 0xFF where the bit is set.
#[inline(always)]
pub(super) unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
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
/// prefetched: the hardware prefetchers alone do not keep single-token
/// matmuls at the memory's streaming rate.
pub(super) const PREFETCH_AHEAD: usize = 3072;

/// How far ahead of the eight rows being multiplied the eight-row kernels
/// prefetch the weights that follow them (at least the next eight rows):
/// one group of eight rows ahead is too short to hide the memory latency.
pub(super) const ROWS8_PREFETCH_AHEAD: usize = 8192;

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

/// Unsigned decoders for the tiles: each weight block's quants as `u8`,
/// `w + 2^shift` (Q8_0: 128, Q4_0: 8, Q5_0: 16), so one `u8·i8` product
/// takes them and the tile starts each block's sums from `−2^shift · Σa`.
#[inline(always)]
pub(super) unsafe fn q8_0_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q8_0 block has its 32 quants at offset 2.
    unsafe { _mm256_xor_si256(load256(x.add(2)), _mm256_set1_epi8(0x80u8 as i8)) }
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

/// Q4_1's quants, 0..15 (unsigned as they are): 16 nibble bytes at offset 4.
#[inline(always)]
pub(super) unsafe fn q4_1_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q4_1 block has 16 nibble bytes at offset 4.
    unsafe { nibbles(x.add(4)) }
}
/// Q5_1's quants, 0..31: `qh` at offset 4, 16 nibble bytes at 8.
#[inline(always)]
pub(super) unsafe fn q5_1_unsigned(x: *const u8) -> __m256i {
    // SAFETY: a Q5_1 block has qh at offset 4 and 16 nibble bytes at 8.
    unsafe {
        let hi = _mm256_and_si256(bytes_from_bits(x.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(x.add(8)), hi)
    }
}

/// Dword `J` of each 128-bit half of `w` in all four of its dwords: weight
/// dwords `J` and `J + 4` against a packed vector of [`crate::act_pack`].
#[inline(always)]
pub(super) unsafe fn dwords<const J: usize>(w: __m256i) -> __m256i {
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

/// The f16 at `p` as f32, decoded in software (exact): the AVX-512 kernels
/// use it because Miri, which runs them in the tests, lacks F16C.
#[inline(always)]
pub(super) unsafe fn fp16_soft(p: *const u8) -> f32 {
    // SAFETY: the caller passes two readable bytes.
    f16::from_bits(unsafe { p.cast::<u16>().read_unaligned() }).to_f32_const()
}

/// The f32 at `p` (unaligned).
#[inline(always)]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
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

/// Block `i`'s per-row scales of sixteen weight rows (`rb` bytes apart,
/// blocks of `SIZE` bytes) into panel block `dst`, one row at a time by
/// `meta`: the scalar half of the K-quant unpackers.
pub(super) fn rows_meta<const B: usize, const SIZE: usize>(
    rows: &[u8],
    rb: usize,
    i: usize,
    dst: &mut [u8; B],
    meta: fn(usize, &[u8; SIZE], &mut [u8; B]),
) {
    for r in 0..crate::panel::PANEL_ROWS {
        meta(
            r,
            rows[r * rb + i * SIZE..][..SIZE].try_into().unwrap(),
            dst,
        );
    }
}

/// Checks a panel call's buffers; returns (blocks, prepared row bytes).
#[allow(clippy::too_many_arguments)]
pub(in crate::x86_64) fn panel_call(
    ty: &str,
    bs: usize,
    cols: usize,
    panel: &[u8],
    block: usize,
    acts: &[u8],
    act_block: usize,
    out: &[f32],
    tokens: usize,
) -> (usize, usize) {
    assert!(
        cols.is_multiple_of(bs),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / bs;
    assert_eq!(panel.len(), nb * block, "{ty} panel size");
    assert_eq!(
        acts.len(),
        tokens * nb * act_block,
        "{ty} prepared rows size"
    );
    assert_eq!(out.len(), 16 * tokens, "{ty} panel output size");
    (nb, nb * act_block)
}
