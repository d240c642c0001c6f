//! AVX-512 VNNI bodies of the Q4_K and Q6_K panel kernels, over unpacked or
//! stored panels.

use super::*;
use crate::panel::{Q4_K_ACT_QUANTS, Q4_K_ACT_SUMS, Q6_K_ACT_QUANTS};

/// `s + vpmaddwd(x, scale)` per i32 lane (so `s + x · scale` for
/// `|x| < 2^15` and a scale `0 ≤ scale < 2^15`, its lane read as the i16
/// pair `(scale, 0)`): one `vpdpwssd`, or under Miri (which does not
/// implement it) the same `vpmaddwd` and add.
// Not `inline(always)`: asm needs the features on its own function, and
// LLVM still inlines it into callers that have them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn scale_add(s: __m512i, x: __m512i, scale: __m512i) -> __m512i {
    // Under Miri the intrinsics are safe: this function enables their features.
    #[cfg(miri)]
    {
        _mm512_add_epi32(s, _mm512_madd_epi16(x, scale))
    }
    // LLVM turns the intrinsic back into `vpmaddwd` and `vpaddd` when it
    // tunes for generic x86-64, a micro-op more; asm keeps it one.
    #[cfg(not(miri))]
    {
        let mut s = s;
        // SAFETY: AVX-512F/BW + VNNI are enabled in every caller; the
        // instruction touches only the three registers named.
        unsafe {
            core::arch::asm!(
                "vpdpwssd {s}, {x}, {scale}",
                s = inout(zmm_reg) s,
                x = in(zmm_reg) x,
                scale = in(zmm_reg) scale,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        s
    }
}

/// Bytes of one Q4_K panel super-block: stored, or unpacked.
const fn q4_k_block_bytes<const STORED: bool>() -> usize {
    if STORED {
        crate::panel::STORED_Q4_K_BLOCK
    } else {
        crate::panel::Q4_K_BLOCK
    }
}

/// The `T` prepared rows' (`arow` bytes apart) super-block `i`.
#[inline(always)]
unsafe fn q4_k_rows<const T: usize>(acts: *const u8, arow: usize, i: usize) -> [*const u8; T] {
    // SAFETY: the callers pass `T` prepared rows of at least `i + 1` super-blocks.
    std::array::from_fn(|t| unsafe { acts.add(t * arow + i * crate::panel::Q4_K_ACT) })
}

/// A Q4_K panel against `T` prepared rows: per super-block the exact
/// `Σ_s scale_s · Σ q·a` per lane (each sub-block's sum in two chains of 16
/// products, added and multiplied by its scale with `vpmulld`, which leaves
/// the `vpdpbusd` ports to the products), then `acc = fma(d_w·d_a, Σ, acc)`; the
/// mins' chain `accm = fma(dmin_w·d_a, Σ_s min_s · Σa_s, accm)` runs in a
/// second pass (independent of the first, so the same bits as the row
/// kernel's interleaved steps, with fewer live registers); the result is
/// `acc − accm`.
#[inline(always)]
pub(super) unsafe fn q4_k_panel<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: the same contract.
    unsafe { q4_k_panel_ahead::<T, STORED>(nb, panel, acts, arow, out, 0) }
}

/// [`q4_k_panel`], each sub-block's bytes prefetched `ahead` bytes further
/// on ([`crate::prefetch`]; 0: none).
#[inline(always)]
pub(super) unsafe fn q4_k_panel_ahead<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: as for [`legacy_panel`], with Q4_K panel (or stored) and
    // prepared blocks.
    unsafe {
        let block = q4_k_block_bytes::<STORED>();
        let ys = |i: usize| q4_k_rows::<T>(acts, arow, i);
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            let ys = ys(i);
            let meta = if STORED {
                stored_q4_k_meta(p)
            } else {
                [_mm512_setzero_si512(); 4]
            };
            let mut s = [_mm512_setzero_si512(); T];
            for sb in 0..8 {
                stream_ahead(p.add(block / 8 * sb), ahead, block / 8);
                let mut w = [_mm512_setzero_si512(); 8];
                for (k, w) in w.iter_mut().enumerate() {
                    *w = if !STORED {
                        load512(p.add(512 * sb + 64 * k))
                    } else if sb % 2 == 0 {
                        _mm512_and_si512(load512(p.add(512 * (sb / 2) + 64 * k)), low)
                    } else {
                        let packed = load512(p.add(512 * (sb / 2) + 64 * k));
                        _mm512_and_si512(_mm512_srli_epi16::<4>(packed), low)
                    };
                }
                let sc = if STORED {
                    // Byte `sb % 4` of the scales' dword alone, as an i32.
                    q4_k_scale(&meta, sb)
                } else {
                    load512(p.add(4096 + 64 * sb))
                };
                for t in 0..T {
                    let y = ys[t].add(Q4_K_ACT_QUANTS + 32 * sb);
                    let mut a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast(y));
                    let mut a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcast(y.add(4)));
                    for k in 1..4 {
                        a0 = _mm512_dpbusd_epi32(a0, w[2 * k], bcast(y.add(8 * k)));
                        a1 = _mm512_dpbusd_epi32(a1, w[2 * k + 1], bcast(y.add(8 * k + 4)));
                    }
                    s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(_mm512_add_epi32(a0, a1), sc));
                }
            }
            let dw = if STORED {
                load16_f16(p.add(2240))
            } else {
                _mm512_loadu_ps(p.add(4864).cast())
            };
            for t in 0..T {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t]), acc[t]);
            }
        }
        let accm = q4_k_min_sums::<T, STORED>(nb, panel, acts, arow);
        for t in 0..T {
            _mm512_storeu_ps(out.add(16 * t), _mm512_sub_ps(acc[t], accm[t]));
        }
    }
}

/// The mins' chain of a Q4_K panel (or stored) against `T` prepared rows:
/// per super-block `accm = fma(dmin_w·d_a, Σ_s min_s · Σa_s, accm)`.
#[inline(always)]
pub(crate) unsafe fn q4_k_min_sums<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
) -> [__m512; T] {
    // SAFETY: as for [`q4_k_panel`].
    unsafe {
        let block = q4_k_block_bytes::<STORED>();
        let ys = |i: usize| q4_k_rows::<T>(acts, arow, i);
        let mut accm = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            let ys = ys(i);
            let mut mins = [_mm512_setzero_si512(); 4];
            if STORED {
                let meta = stored_q4_k_meta(p);
                for (q, mins) in mins.iter_mut().enumerate() {
                    *mins = q4_k_min_pair(&meta, q);
                }
            } else {
                for (q, mins) in mins.iter_mut().enumerate() {
                    *mins = load512(p.add(4608 + 64 * q));
                }
            }
            let dmw = if STORED {
                load16_f16(p.add(2272))
            } else {
                _mm512_loadu_ps(p.add(4928).cast())
            };
            for t in 0..T {
                let y = ys[t];
                let mut m = _mm512_madd_epi16(mins[0], bcast(y.add(Q4_K_ACT_SUMS)));
                for (q, &mins) in mins.iter().enumerate().skip(1) {
                    m = scale_add(m, mins, bcast(y.add(Q4_K_ACT_SUMS + 4 * q)));
                }
                let dm = _mm512_mul_ps(dmw, _mm512_set1_ps(f32_at(y)));
                accm[t] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m), accm[t]);
            }
        }
        accm
    }
}

/// A Q2_K panel against `T` prepared rows: [`q4_k_panel`]'s steps over
/// sixteen 16-value sub-blocks (each sum one chain of four `vpdpbusd`,
/// multiplied by its scale), then `acc = fma(d_w·d_a, Σ, acc)`; the mins'
/// chain over the sixteen 16-value sums runs in a second pass; the result
/// is `acc − accm`, the row kernel's two chains.
#[inline(always)]
pub(super) unsafe fn q2_k_panel<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: as for [`q4_k_panel`], with Q2_K panel blocks.
    unsafe {
        use crate::panel::Q2_K_BLOCK;
        let mut acc = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * Q2_K_BLOCK);
            let ys = q4_k_rows::<T>(acts, arow, i);
            let mut s = [_mm512_setzero_si512(); T];
            for sb in 0..16 {
                let mut w = [_mm512_setzero_si512(); 4];
                for (k, w) in w.iter_mut().enumerate() {
                    *w = load512(p.add(256 * sb + 64 * k));
                }
                let sc = load512(p.add(4096 + 64 * sb));
                for (s, y) in s.iter_mut().zip(ys) {
                    let y = y.add(Q4_K_ACT_QUANTS + 16 * sb);
                    let a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast(y));
                    let a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcast(y.add(4)));
                    let a0 = _mm512_dpbusd_epi32(a0, w[2], bcast(y.add(8)));
                    let a1 = _mm512_dpbusd_epi32(a1, w[3], bcast(y.add(12)));
                    *s = _mm512_add_epi32(*s, _mm512_mullo_epi32(_mm512_add_epi32(a0, a1), sc));
                }
            }
            let dw = _mm512_loadu_ps(p.add(5632).cast());
            for ((acc, s), y) in acc.iter_mut().zip(s).zip(ys) {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y)));
                *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), *acc);
            }
        }
        let accm = q2_k_min_sums::<T>(nb, panel, acts, arow);
        for t in 0..T {
            _mm512_storeu_ps(out.add(16 * t), _mm512_sub_ps(acc[t], accm[t]));
        }
    }
}

/// The mins' chain of a Q2_K panel against `T` prepared rows: per
/// super-block `accm = fma(dmin_w·d_a, Σ_s min_s · Σa_s, accm)` over the
/// sixteen 16-value sums.
#[inline(always)]
unsafe fn q2_k_min_sums<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
) -> [__m512; T] {
    // SAFETY: as for [`q2_k_panel`].
    unsafe {
        use crate::panel::Q2_K_BLOCK;
        let mut accm = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * Q2_K_BLOCK);
            let ys = q4_k_rows::<T>(acts, arow, i);
            let mut mins = [_mm512_setzero_si512(); 8];
            for (q, mins) in mins.iter_mut().enumerate() {
                *mins = load512(p.add(5120 + 64 * q));
            }
            let dmw = _mm512_loadu_ps(p.add(5696).cast());
            for (accm, y) in accm.iter_mut().zip(ys) {
                let mut m = _mm512_madd_epi16(mins[0], bcast(y.add(Q4_K_ACT_SUMS)));
                for (q, &mins) in mins.iter().enumerate().skip(1) {
                    m = scale_add(m, mins, bcast(y.add(Q4_K_ACT_SUMS + 4 * q)));
                }
                let dm = _mm512_mul_ps(dmw, _mm512_set1_ps(f32_at(y)));
                *accm = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m), *accm);
            }
        }
        accm
    }
}

/// A Q4_K panel pair (`panels`: two panels, or stored panels, of `nb`
/// super-blocks back to back) against `T` prepared rows: [`q4_k_panel`]'s
/// sums for both, each broadcast of four activation bytes feeding both
/// panels' `vpdpbusd`, so the loads per product halve. One chain per panel,
/// token and sub-block (the sums are exact integers, so their order leaves
/// every bit as the single panel's); the float steps are [`q4_k_panel`]'s.
/// Writes the first panel's `16·T` outputs, then the second's.
// The sub-block index also places the quants and activations.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn q4_k_pair<const T: usize, const STORED: bool>(
    nb: usize,
    panels: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: as for [`q4_k_panel`], with two Q4_K panels (or stored).
    unsafe {
        let block = q4_k_block_bytes::<STORED>();
        let pb = panels.add(nb * block);
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); T]; 2];
        for i in 0..nb {
            let p = [panels.add(i * block), pb.add(i * block)];
            let ys = q4_k_rows::<T>(acts, arow, i);
            // The sub-blocks' scales, one row per lane.
            let mut scales = [[_mm512_setzero_si512(); 8]; 2];
            for (h, scales) in scales.iter_mut().enumerate() {
                if STORED {
                    let meta = stored_q4_k_meta(p[h]);
                    for (sb, sc) in scales.iter_mut().enumerate() {
                        *sc = q4_k_scale(&meta, sb);
                    }
                } else {
                    for (sb, sc) in scales.iter_mut().enumerate() {
                        *sc = load512(p[h].add(4096 + 64 * sb));
                    }
                }
            }
            let mut s = [[_mm512_setzero_si512(); T]; 2];
            for sb in 0..8 {
                let mut c = [[_mm512_setzero_si512(); T]; 2];
                for k in 0..8 {
                    let mut w = [_mm512_setzero_si512(); 2];
                    for h in 0..2 {
                        w[h] = if !STORED {
                            load512(p[h].add(512 * sb + 64 * k))
                        } else if sb % 2 == 0 {
                            _mm512_and_si512(load512(p[h].add(512 * (sb / 2) + 64 * k)), low)
                        } else {
                            let packed = load512(p[h].add(512 * (sb / 2) + 64 * k));
                            _mm512_and_si512(_mm512_srli_epi16::<4>(packed), low)
                        };
                    }
                    for t in 0..T {
                        let y = bcast(ys[t].add(Q4_K_ACT_QUANTS + 32 * sb + 4 * k));
                        c[0][t] = _mm512_dpbusd_epi32(c[0][t], w[0], y);
                        c[1][t] = _mm512_dpbusd_epi32(c[1][t], w[1], y);
                    }
                }
                for h in 0..2 {
                    for t in 0..T {
                        let scaled = _mm512_mullo_epi32(c[h][t], scales[h][sb]);
                        s[h][t] = _mm512_add_epi32(s[h][t], scaled);
                    }
                }
            }
            for h in 0..2 {
                let dw = if STORED {
                    load16_f16(p[h].add(2240))
                } else {
                    _mm512_loadu_ps(p[h].add(4864).cast())
                };
                for t in 0..T {
                    let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                    acc[h][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[h][t]), acc[h][t]);
                }
            }
        }
        for (h, p) in [panels, pb].into_iter().enumerate() {
            let accm = q4_k_min_sums::<T, STORED>(nb, p, acts, arow);
            for t in 0..T {
                _mm512_storeu_ps(out.add(16 * (T * h + t)), _mm512_sub_ps(acc[h][t], accm[t]));
            }
        }
    }
}

/// Each i32 lane's first byte index within its 128-bit lane (`4·(lane % 4)`),
/// the base of the shuffles picking bytes of a lane's own dword.
#[inline(always)]
unsafe fn lane_bytes4() -> __m512i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm512_set_epi32(12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0) }
}

/// Sub-block `sb`'s scale of a stored Q4_K super-block's `meta`
/// ([`stored_q4_k_meta`]), one row per i32 lane.
#[inline(always)]
pub(crate) unsafe fn q4_k_scale(meta: &[__m512i; 4], sb: usize) -> __m512i {
    // SAFETY: AVX-512F/BW are enabled in every caller.
    unsafe {
        // Byte `sb % 4` of the lane's dword, then three zeros.
        let pick = (0x8080_8000 | (sb % 4) as u32) as i32;
        let pick = _mm512_or_si512(lane_bytes4(), _mm512_set1_epi32(pick));
        _mm512_shuffle_epi8(meta[sb / 4], pick)
    }
}

/// Sub-blocks `2q` and `2q + 1`'s mins of a stored Q4_K super-block's
/// `meta`, as an i16 pair per lane (the Q4_K panel's layout).
#[inline(always)]
pub(super) unsafe fn q4_k_min_pair(meta: &[__m512i; 4], q: usize) -> __m512i {
    // SAFETY: AVX-512F/BW are enabled in every caller.
    unsafe {
        // Bytes `2q % 4` and `2q % 4 + 1` of the lane's dword, each then a zero.
        let b = (2 * q % 4) as u32;
        let pick = (0x8000_8000 | b | (b + 1) << 16) as i32;
        let base = _mm512_or_si512(lane_bytes4(), _mm512_slli_epi32::<16>(lane_bytes4()));
        let pick = _mm512_or_si512(base, _mm512_set1_epi32(pick));
        _mm512_shuffle_epi8(meta[2 + q / 2], pick)
    }
}

/// A stored Q4_K super-block's 6-bit scales and mins as bytes, one row per
/// i32 lane: scales 0..4, scales 4..8, mins 0..4, mins 4..8 (ggml's
/// `get_scale_min_k4` on the three dwords of twelve bytes).
#[inline(always)]
pub(crate) unsafe fn stored_q4_k_meta(p: *const u8) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F/BW.
    unsafe {
        let d0 = load512(p.add(2048));
        let d1 = load512(p.add(2112));
        let d2 = load512(p.add(2176));
        let six = _mm512_set1_epi8(0x3F);
        let low = _mm512_set1_epi8(0x0F);
        let top = _mm512_set1_epi8(0x30);
        [
            _mm512_and_si512(d0, six),
            _mm512_or_si512(
                _mm512_and_si512(d2, low),
                _mm512_and_si512(_mm512_srli_epi32::<2>(d0), top),
            ),
            _mm512_and_si512(d1, six),
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32::<4>(d2), low),
                _mm512_and_si512(_mm512_srli_epi32::<2>(d1), top),
            ),
        ]
    }
}

/// A Q6_K panel against `T` prepared rows: signed quants `q − 32` against
/// activations `a + 128`; per super-block the sum starts from the rows'
/// `Σ_s scale_s · (−128·Σ(q − 32))`, so it ends as the row kernel's exact
/// `Σ_s scale_s · Σ (q − 32)·a`; then `acc = fma(d_w·d_a, Σ, acc)`.
/// Each super-block's bytes are prefetched `ahead` bytes further on
/// ([`crate::prefetch`]; 0: none).
#[inline(always)]
pub(super) unsafe fn q6_k_panel<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: as for [`legacy_panel`], with Q6_K panel (or stored) and
    // prepared blocks.
    unsafe {
        use crate::panel::{Q6_K_ACT, Q6_K_BLOCK, STORED_Q6_K_BLOCK};
        let block = if STORED {
            STORED_Q6_K_BLOCK
        } else {
            Q6_K_BLOCK
        };
        let mut acc = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            stream_ahead(p, ahead, block);
            let ys: [*const u8; T] = std::array::from_fn(|t| acts.add(t * arow + i * Q6_K_ACT));
            let mut w = [[_mm512_setzero_si512(); 4]; 16];
            let mut sc = [_mm512_setzero_si512(); 16];
            let offset = if STORED {
                stored_q6_k_expand(p, &mut w, &mut sc)
            } else {
                load512(p.add(5120))
            };
            let mut s = [offset; T];
            for sb in 0..16 {
                let (w, sc) = if STORED {
                    (w[sb], sc[sb])
                } else {
                    (
                        std::array::from_fn(|k| load512(p.add(256 * sb + 64 * k))),
                        load512(p.add(4096 + 64 * sb)),
                    )
                };
                for t in 0..T {
                    let y = ys[t].add(Q6_K_ACT_QUANTS + 16 * sb);
                    let mut a = _mm512_setzero_si512();
                    for (k, &w) in w.iter().enumerate() {
                        a = _mm512_dpbusd_epi32(a, bcast(y.add(4 * k)), w);
                    }
                    s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(a, sc));
                }
            }
            let dw = if STORED {
                load16_f16(p.add(3328))
            } else {
                _mm512_loadu_ps(p.add(5184).cast())
            };
            for t in 0..T {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t]), acc[t]);
            }
        }
        for (t, &acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add(16 * t), acc);
        }
    }
}

/// A Q6_K panel pair (`panels`: two panels of `nb` super-blocks back to
/// back) against `T` prepared rows: [`q6_k_panel`]'s sums for both, each
/// broadcast of four activation bytes feeding both panels' `vpdpbusd` (see
/// [`q4_k_pair`]). Writes the first panel's `16·T` outputs, then the
/// second's.
#[inline(always)]
pub(super) unsafe fn q6_k_pair<const T: usize>(
    nb: usize,
    panels: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: as for [`q6_k_panel`], with two Q6_K panels.
    unsafe {
        use crate::panel::{Q6_K_ACT, Q6_K_BLOCK};
        let pb = panels.add(nb * Q6_K_BLOCK);
        let mut acc = [[_mm512_setzero_ps(); T]; 2];
        for i in 0..nb {
            let p = [panels.add(i * Q6_K_BLOCK), pb.add(i * Q6_K_BLOCK)];
            let ys: [*const u8; T] = std::array::from_fn(|t| acts.add(t * arow + i * Q6_K_ACT));
            let mut s = [[load512(p[0].add(5120)); T], [load512(p[1].add(5120)); T]];
            for sb in 0..16 {
                let mut c = [[_mm512_setzero_si512(); T]; 2];
                for k in 0..4 {
                    let w = [
                        load512(p[0].add(256 * sb + 64 * k)),
                        load512(p[1].add(256 * sb + 64 * k)),
                    ];
                    for t in 0..T {
                        let y = bcast(ys[t].add(Q6_K_ACT_QUANTS + 16 * sb + 4 * k));
                        c[0][t] = _mm512_dpbusd_epi32(c[0][t], y, w[0]);
                        c[1][t] = _mm512_dpbusd_epi32(c[1][t], y, w[1]);
                    }
                }
                for h in 0..2 {
                    let sc = load512(p[h].add(4096 + 64 * sb));
                    for t in 0..T {
                        s[h][t] = _mm512_add_epi32(s[h][t], _mm512_mullo_epi32(c[h][t], sc));
                    }
                }
            }
            for h in 0..2 {
                let dw = _mm512_loadu_ps(p[h].add(5184).cast());
                for t in 0..T {
                    let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                    acc[h][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[h][t]), acc[h][t]);
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (t, &acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.add(16 * (T * h + t)), acc);
            }
        }
    }
}

/// Sub-blocks `4m..4m + 4`'s scales of a stored Q6_K super-block, one row
/// per i32 lane.
#[inline(always)]
pub(super) unsafe fn q6_k_scales(p: *const u8, m: usize) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F.
    unsafe {
        let scales = load512(p.add(3072 + 64 * m));
        [
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(scales)),
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(scales)),
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(scales)),
            _mm512_srai_epi32::<24>(scales),
        ]
    }
}

/// The quants `q` (0..64) of values `128h + 32g + 4·k8..+4` of a stored
/// Q6_K super-block's sixteen rows, for `g` in 0..4 (sub-block
/// `8h + 2g + k8/4`, dword `k8 % 4` of the Q6_K panel).
#[inline(always)]
pub(super) unsafe fn q6_k_quants(p: *const u8, h: usize, k8: usize) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F/BW.
    unsafe {
        let (m4, m2) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let at = p.add(192 * (8 * h + k8));
        let qh = load512(at);
        // The high bits of group `g` at bits 4-5 of each byte.
        let high = [
            _mm512_slli_epi16::<4>(qh),
            _mm512_slli_epi16::<2>(qh),
            qh,
            _mm512_srli_epi16::<2>(qh),
        ];
        let (ql0, ql1) = (load512(at.add(64)), load512(at.add(128)));
        let low = [
            ql0,
            ql1,
            _mm512_srli_epi16::<4>(ql0),
            _mm512_srli_epi16::<4>(ql1),
        ];
        // (low & 0x0F) | (high & 0x30) (a loop, not a closure: see
        // `legacy_block`).
        let mut q = [_mm512_setzero_si512(); 4];
        for (g, q) in q.iter_mut().enumerate() {
            *q = _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(low[g], m4), high[g], m2);
        }
        q
    }
}

/// A stored Q6_K super-block expanded into the Q6_K panel's quants `q − 32`
/// (`w[s][k]`: sub-block `s`, dword `k`) and scales as i32 (`sc[s]`);
/// returns the panel's per-row offset `Σ_s scale_s · (−128·Σ(q − 32))`.
#[inline(always)]
pub(crate) unsafe fn stored_q6_k_expand(
    p: *const u8,
    w: &mut [[__m512i; 4]; 16],
    sc: &mut [__m512i; 16],
) -> __m512i {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512
    // F/BW + VNNI are enabled in the callers.
    unsafe {
        let (ones, b32) = (_mm512_set1_epi8(1), _mm512_set1_epi8(32));
        for m in 0..4 {
            sc[4 * m..4 * m + 4].copy_from_slice(&q6_k_scales(p, m));
        }
        let mut offset = _mm512_setzero_si512();
        for h in 0..2 {
            for k8 in 0..8 {
                // Values 128h + 32g + 4·k8.. for g in 0..4: sub-block
                // 8h + 2g + k8 / 4, dword k8 % 4.
                for (g, q) in q6_k_quants(p, h, k8).into_iter().enumerate() {
                    w[8 * h + 2 * g + k8 / 4][k8 % 4] = _mm512_sub_epi8(q, b32);
                }
            }
        }
        for s in 0..16 {
            // Σ(q − 32) per row: four dwords' bytes added first (|Σ| ≤ 4·32).
            let [a, b, c, d] = w[s];
            let bytes = _mm512_add_epi8(_mm512_add_epi8(a, b), _mm512_add_epi8(c, d));
            let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, bytes);
            offset = _mm512_add_epi32(offset, _mm512_mullo_epi32(sc[s], sum));
        }
        // × −128.
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(offset))
    }
}
