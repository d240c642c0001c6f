//! AVX2 tiles: one weight row against 16, 12, 8 or 4 packed activation rows
//! ([`crate::act_pack`]), legacy and K-quant types.

use super::*;

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
                let a = load256(y.add(32 * (j * S + set)));
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
/// `4·S` Q8_0 rows (see [`crate::act_pack`]), one row per lane: per block, the
/// rows' exact integer sums side by side (`sums`, the ISA's part), then
/// `acc = fma(d_w·d_a, Σ, acc)` per lane, even and odd blocks in two chains
/// added at the end — the row kernels' arithmetic, so a token's result does
/// not depend on its place in a batch. The block's quants and scale are
/// decoded once for all the group's rows: `H = S / 2` vectors of eight rows,
/// and for an odd `S` four more.
///
/// `quants` gives the block's quants as `sums` takes them: signed (with
/// `SHIFT = 0`), or unsigned `w + 2^SHIFT`, whose offset is taken back
/// through the group's quant sums. The AVX-512 tiles run this body with
/// their `vpdpbusd` sums.
#[inline(always)]
pub(in crate::x86_64) unsafe fn legacy_tile<const S: usize, const H: usize, const SHIFT: i32>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    packed: *const u8,
    quants: unsafe fn(*const u8) -> __m256i,
    sets: SetSums<S>,
) -> [[f32; 4]; S] {
    const { assert!(S == 2 * H || S == 2 * H + 1) };
    // SAFETY: the wrappers checked `nb` weight blocks and `nb` packed block groups;
    // the callers enable AVX2/FMA/F16C and whatever `sums` needs.
    unsafe {
        let gb = crate::act_pack::q8_0_group_block(4 * S);
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
        let mut out = [[0.0f32; 4]; S];
        let o = out.as_mut_ptr().cast::<f32>();
        for h in 0..H {
            _mm256_storeu_ps(o.add(8 * h), _mm256_add_ps(even[h], odd[h]));
        }
        if S > 2 * H {
            _mm_storeu_ps(o.add(8 * H), _mm_add_ps(even_last, odd_last));
        }
        out
    }
}

kernel_fns! { tiles avx2, Q8_0;
    // Q8_0's unsigned quants reach 255: `maddubs` would saturate, so the sign trick.
    Q8_0 => tile16_q8_0: 4, tile12_q8_0: 3, tile8_q8_0: 2, tile4_q8_0: 1
        = |nb, w, packed| legacy_tile::<S, H, 0>(nb, w, 34, packed, q8_0_quants, signed_sets::<S>);
    Q4_0 => tile16_q4_0: 4, tile12_q4_0: 3, tile8_q4_0: 2, tile4_q4_0: 1
        = |nb, w, packed| {
            legacy_tile::<S, H, 3>(nb, w, 18, packed, q4_0_unsigned, narrow_sets::<S>)
        };
    Q5_0 => tile16_q5_0: 4, tile12_q5_0: 3, tile8_q5_0: 2, tile4_q5_0: 1
        = |nb, w, packed| {
            legacy_tile::<S, H, 4>(nb, w, 22, packed, q5_0_unsigned, narrow_sets::<S>)
        };
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
                let a = load256(y.add(32 * (j * S + set)));
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
/// [`crate::act_pack`]), rows side by side: per super-block the exact integer
/// sums with scales and with mins, then [`k_block_step`] per lane — the row
/// kernels' bits.
///
/// `unit` is the ISA's integer part: one 32-value unit's scaled sums (the
/// AVX-512 tiles pass their `vpdpbusd` unit).
#[inline(always)]
pub(in crate::x86_64) unsafe fn q4_k_tile<const S: usize>(
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
        let gb = crate::act_pack::q8_k_group_block(4 * S);
        let (m4, m1) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
        let mut acc = [_mm_setzero_ps(); S];
        let mut accm = [_mm_setzero_ps(); S];
        for i in 0..nb {
            let (x, y) = (w.add(i * bsize), packed.add(i * gb));
            prefetch_block(x, bsize);
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut hbits = if HIGH {
                load256(x.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sums = [_mm256_setzero_si256(); S];
            for j in 0..4 {
                let q = load256(x.add(qs_off + 32 * j));
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
pub(in crate::x86_64) unsafe fn q6_k_tile<const S: usize>(
    nb: usize,
    w: *const u8,
    packed: *const u8,
    unit: Q6KUnit<S>,
) -> [[f32; 4]; S] {
    // SAFETY: as for `q4_k_tile`, with 210-byte weight blocks.
    unsafe {
        let gb = crate::act_pack::q8_k_group_block(4 * S);
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

kernel_fns! { tiles avx2, Q8_K;
    Q4_K => tile16_q4_k: 4, tile12_q4_k: 3, tile8_q4_k: 2, tile4_q4_k: 1
        = |nb, w, packed| q4_k_tile::<S>(nb, w, packed, q4_k_unit::<S>);
    Q5_K => tile16_q5_k: 4, tile12_q5_k: 3, tile8_q5_k: 2, tile4_q5_k: 1
        = |nb, w, packed| q5_k_tile::<S>(nb, w, packed, q4_k_unit::<S>);
    Q6_K => tile16_q6_k: 4, tile12_q6_k: 3, tile8_q6_k: 2, tile4_q6_k: 1
        = |nb, w, packed| q6_k_tile::<S>(nb, w, packed, q6_k_unit::<S>);
}
