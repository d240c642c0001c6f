//! AVX-512 VNNI panel kernels ([`crate::panel`]): sixteen weight rows, one per
//! i32 lane, against `T` prepared activation rows; per multiply-add one
//! broadcast of four activation bytes (a load, folded into `vpdpbusd`) and no
//! shuffle.

use super::*;

#[inline(always)]
pub(super) unsafe fn bcast(p: *const u8) -> __m512i {
    // SAFETY: the caller passes four readable bytes.
    unsafe { _mm512_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

#[inline(always)]
pub(crate) unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: the caller passes 64 readable bytes; unaligned load.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// How a legacy panel's blocks are laid out: unpacked per call
/// ([`crate::panel::LEGACY_BLOCK`]), or stored
/// ([`crate::panel::STORED_Q8_0_BLOCK`], [`crate::panel::STORED_Q5_0_BLOCK`],
/// [`crate::panel::STORED_Q4_0_BLOCK`]).
const UNPACKED: u8 = 0;
pub(super) const STORED_Q8_0: u8 = 1;
pub(super) const STORED_Q5_0: u8 = 2;
pub(super) const STORED_Q4_0: u8 = 3;

pub(super) const fn legacy_block_bytes(form: u8) -> usize {
    match form {
        UNPACKED => crate::panel::LEGACY_BLOCK,
        STORED_Q8_0 => crate::panel::STORED_Q8_0_BLOCK,
        STORED_Q5_0 => crate::panel::STORED_Q5_0_BLOCK,
        _ => crate::panel::STORED_Q4_0_BLOCK,
    }
}

/// The eight quant dwords of a stored Q4_0 or Q5_0 block's nibbles (four
/// 64-byte runs at `wb`, low nibbles first): the fifth bits not yet added.
#[inline(always)]
unsafe fn stored_nibbles(wb: *const u8) -> [__m512i; 8] {
    // SAFETY: 256 readable bytes at `wb` (the caller's contract); AVX-512
    // F/BW are enabled in the callers.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let mut w = [_mm512_setzero_si512(); 8];
        for j in 0..4 {
            let p = load512(wb.add(64 * j));
            w[j] = _mm512_and_si512(p, low);
            w[j + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(p), low);
        }
        w
    }
}

/// A legacy panel block's eight quant dwords (`w + 2^shift`, one row per
/// lane) and sixteen scales, from its `FORM`.
#[inline(always)]
pub(super) unsafe fn legacy_block<const FORM: u8>(wb: *const u8) -> ([__m512i; 8], __m512) {
    // SAFETY: a whole block of the form (the caller's contract); AVX-512 F/BW
    // are enabled in the callers.
    unsafe {
        match FORM {
            UNPACKED => (
                std::array::from_fn(|k| load512(wb.add(64 * k))),
                _mm512_loadu_ps(wb.add(512).cast()),
            ),
            STORED_Q8_0 => (
                std::array::from_fn(|k| load512(wb.add(64 * k))),
                load16_f16(wb.add(512)),
            ),
            STORED_Q4_0 => (stored_nibbles(wb), load16_f16(wb.add(256))),
            _ => {
                // Nibbles, then each dword's fifth bits added as 16 per byte.
                let sixteen = _mm512_set1_epi8(0x10);
                let mut w = stored_nibbles(wb);
                // A plain loop: a closure here would not inherit the callers'
                // target features, and one too large to inline is far slower.
                for (k, w) in w.iter_mut().enumerate() {
                    let mask: __mmask64 = wb.add(256 + 8 * k).cast::<u64>().read_unaligned();
                    *w = _mm512_mask_add_epi8(*w, mask, *w, sixteen);
                }
                (w, load16_f16(wb.add(320)))
            }
        }
    }
}

/// One 32-value block of a legacy panel (`wb`, laid out as `FORM`) against
/// `T` prepared rows' blocks (`ys`): the exact sums `Σ(w + o)·a − o·Σa`,
/// then the row kernel's `acc = fma(d_w·d_a, Σ, acc)` per lane.
#[inline(always)]
pub(super) unsafe fn legacy_panel_step<const T: usize, const FORM: u8>(
    wb: *const u8,
    ys: [*const u8; T],
    acc: &mut [__m512; T],
) {
    // SAFETY: a whole panel block and `T` whole prepared blocks (the kernel's
    // contract); AVX-512 F/BW + VNNI are enabled in the callers.
    unsafe {
        let (w, dw) = legacy_block::<FORM>(wb);
        for t in 0..T {
            let y = ys[t];
            // Two chains, so eight tokens keep both `vpdpbusd` ports busy
            // (one chain is latency-bound).
            let mut a0 = bcast(y.add(36));
            let mut a1 = _mm512_setzero_si512();
            for k in (0..8).step_by(2) {
                a0 = _mm512_dpbusd_epi32(a0, w[k], bcast(y.add(4 * k)));
                a1 = _mm512_dpbusd_epi32(a1, w[k + 1], bcast(y.add(4 * k + 4)));
            }
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y.add(32))));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), acc[t]);
        }
    }
}

/// A legacy panel of `nb` blocks against `T` prepared rows `arow` bytes
/// apart: even and odd blocks in two chains, added at the end (the row
/// kernels' order). Each pair of blocks is prefetched `ahead` bytes
/// further on ([`crate::prefetch`]; 0: none).
#[inline(always)]
unsafe fn legacy_panel<const T: usize, const FORM: u8>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows of `nb` blocks and `16·T`
    // floats of output (the wrapper's checks); features enabled in the callers.
    unsafe {
        use crate::panel::LEGACY_ACT;
        let block = legacy_block_bytes(FORM);
        let (mut even, mut odd) = ([_mm512_setzero_ps(); T], [_mm512_setzero_ps(); T]);
        let ys = |i: usize| std::array::from_fn(|t| acts.add(t * arow + i * LEGACY_ACT));
        let mut i = 0;
        while i + 2 <= nb {
            stream_ahead(panel.add(i * block), ahead, 2 * block);
            legacy_panel_step::<T, FORM>(panel.add(i * block), ys(i), &mut even);
            legacy_panel_step::<T, FORM>(panel.add((i + 1) * block), ys(i + 1), &mut odd);
            i += 2;
        }
        if i < nb {
            legacy_panel_step::<T, FORM>(panel.add(i * block), ys(i), &mut even);
        }
        for t in 0..T {
            _mm512_storeu_ps(out.add(16 * t), _mm512_add_ps(even[t], odd[t]));
        }
    }
}

/// How a Q4_1 or Q5_1 panel's blocks are laid out: unpacked per call
/// ([`crate::panel::OFFSET_BLOCK`]), or stored
/// ([`crate::panel::STORED_Q4_1_BLOCK`], [`crate::panel::STORED_Q5_1_BLOCK`]):
/// a stored Q4_0 or Q5_0 block (the quants and `d`) and then the rows' `m`
/// as f16, so the stored forms are named by those legacy forms.
pub(super) const fn offset_block_bytes(form: u8) -> usize {
    match form {
        UNPACKED => crate::panel::OFFSET_BLOCK,
        _ => legacy_block_bytes(form) + 32,
    }
}

/// An offset panel block's quant dwords and `d`, and its `m`, from its
/// `FORM` ([`offset_block_bytes`]).
#[inline(always)]
unsafe fn offset_block<const FORM: u8>(wb: *const u8) -> ([__m512i; 8], __m512) {
    // SAFETY: a whole block of the form (the caller's contract); AVX-512 F/BW
    // are enabled in the callers.
    unsafe {
        match FORM {
            UNPACKED => (
                std::array::from_fn(|k| load512(wb.add(64 * k))),
                _mm512_loadu_ps(wb.add(512).cast()),
            ),
            _ => legacy_block::<FORM>(wb),
        }
    }
}

/// An offset panel block's sixteen `m`, from its `FORM`.
#[inline(always)]
unsafe fn offset_mins<const FORM: u8>(wb: *const u8) -> __m512 {
    // SAFETY: as for [`offset_block`].
    unsafe {
        match FORM {
            UNPACKED => _mm512_loadu_ps(wb.add(576).cast()),
            _ => load16_f16(wb.add(legacy_block_bytes(FORM))),
        }
    }
}

/// A Q4_1 or Q5_1 panel of `nb` blocks laid out as `FORM`
/// ([`offset_block_bytes`]) against `T` prepared Q8_1 rows `arow` bytes
/// apart, with the row kernel's four chains: `d_w·d_a·Σ q·a` and
/// `m_w·s_a`, each over even and odd blocks, then `(even + odd) + (even
/// mins + odd mins)`. The minimum terms run in a pass of their own, so
/// neither pass spills registers. Each block's bytes are prefetched
/// `ahead` bytes further on ([`crate::prefetch`]; 0: none).
#[inline(always)]
pub(super) unsafe fn offset_panel<const T: usize, const FORM: u8>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows of `nb` blocks and `16·T`
    // floats of output (the wrapper's checks); features enabled in the callers.
    unsafe {
        use crate::panel::LEGACY_ACT;
        let block = offset_block_bytes(FORM);
        let y = |t: usize, i: usize| acts.add(t * arow + i * LEGACY_ACT);
        let mut sums = [[_mm512_setzero_ps(); T]; 2];
        for i in 0..nb {
            let wb = panel.add(i * block);
            stream_ahead(wb, ahead, block);
            let (w, dw) = offset_block::<FORM>(wb);
            for (t, sum) in sums[i % 2].iter_mut().enumerate() {
                let y = y(t, i);
                // Two chains, so the tokens keep both `vpdpbusd` ports busy.
                let mut a0 = _mm512_setzero_si512();
                let mut a1 = _mm512_setzero_si512();
                for k in (0..8).step_by(2) {
                    a0 = _mm512_dpbusd_epi32(a0, w[k], bcast(y.add(4 * k)));
                    a1 = _mm512_dpbusd_epi32(a1, w[k + 1], bcast(y.add(4 * k + 4)));
                }
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y.add(32))));
                let s = _mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1));
                *sum = _mm512_fmadd_ps(d, s, *sum);
            }
        }
        let mut mins = [[_mm512_setzero_ps(); T]; 2];
        for i in 0..nb {
            let mw = offset_mins::<FORM>(panel.add(i * block));
            for (t, min) in mins[i % 2].iter_mut().enumerate() {
                let s = _mm512_set1_ps(f32_at(y(t, i).add(36)));
                *min = _mm512_fmadd_ps(mw, s, *min);
            }
        }
        for t in 0..T {
            let sum = _mm512_add_ps(sums[0][t], sums[1][t]);
            let min = _mm512_add_ps(mins[0][t], mins[1][t]);
            _mm512_storeu_ps(out.add(16 * t), _mm512_add_ps(sum, min));
        }
    }
}

// One legacy kernel serves Q8_0, Q4_0 and Q5_0: their panels differ only
// in how they were unpacked.
kernel_fns! { panels avx512;
    "legacy", 32, crate::panel::LEGACY_BLOCK, crate::panel::LEGACY_ACT
        => panel8_legacy, panel4_legacy
        = |nb, panel, acts, arow, out| legacy_panel::<T, UNPACKED>(nb, panel, acts, arow, out, 0);
    "Q4_1/Q5_1", 32, crate::panel::OFFSET_BLOCK, crate::panel::LEGACY_ACT
        => panel8_offset, panel4_offset
        = |nb, panel, acts, arow, out| offset_panel::<T, UNPACKED>(nb, panel, acts, arow, out, 0);
    "stored Q8_0", 32, crate::panel::STORED_Q8_0_BLOCK, crate::panel::LEGACY_ACT
        => panel8_stored_q8_0, panel4_stored_q8_0
        = |nb, panel, acts, arow, out| legacy_panel::<T, STORED_Q8_0>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "stored Q5_0", 32, crate::panel::STORED_Q5_0_BLOCK, crate::panel::LEGACY_ACT
        => panel8_stored_q5_0, panel4_stored_q5_0
        = |nb, panel, acts, arow, out| legacy_panel::<T, STORED_Q5_0>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "stored Q4_0", 32, crate::panel::STORED_Q4_0_BLOCK, crate::panel::LEGACY_ACT
        => panel8_stored_q4_0, panel4_stored_q4_0
        = |nb, panel, acts, arow, out| legacy_panel::<T, STORED_Q4_0>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "stored Q4_1", 32, crate::panel::STORED_Q4_1_BLOCK, crate::panel::LEGACY_ACT
        => panel8_stored_q4_1, panel4_stored_q4_1
        = |nb, panel, acts, arow, out| offset_panel::<T, STORED_Q4_0>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "stored Q5_1", 32, crate::panel::STORED_Q5_1_BLOCK, crate::panel::LEGACY_ACT
        => panel8_stored_q5_1, panel4_stored_q5_1
        = |nb, panel, acts, arow, out| offset_panel::<T, STORED_Q5_0>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "Q2_K", 256, crate::panel::Q2_K_BLOCK, crate::panel::Q4_K_ACT
        => panel8_q2_k, panel4_q2_k
        = |nb, panel, acts, arow, out| q2_k_panel::<T>(nb, panel, acts, arow, out);
    "Q4_K", 256, crate::panel::Q4_K_BLOCK, crate::panel::Q4_K_ACT
        => panel8_q4_k, panel4_q4_k
        = |nb, panel, acts, arow, out| q4_k_panel::<T, false>(nb, panel, acts, arow, out);
    "stored Q4_K", 256, crate::panel::STORED_Q4_K_BLOCK, crate::panel::Q4_K_ACT
        => panel8_stored_q4_k, panel4_stored_q4_k
        = |nb, panel, acts, arow, out| q4_k_panel_ahead::<T, true>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
    "Q6_K", 256, crate::panel::Q6_K_BLOCK, crate::panel::Q6_K_ACT
        => panel8_q6_k, panel4_q6_k
        = |nb, panel, acts, arow, out| q6_k_panel::<T, false>(nb, panel, acts, arow, out, 0);
    "stored Q6_K", 256, crate::panel::STORED_Q6_K_BLOCK, crate::panel::Q6_K_ACT
        => panel8_stored_q6_k, panel4_stored_q6_k
        = |nb, panel, acts, arow, out| q6_k_panel::<T, true>(nb, panel, acts, arow, out, crate::prefetch::batch_ahead());
}

kernel_fns! { pairs avx512;
    "Q4_K", 256, crate::panel::Q4_K_BLOCK, crate::panel::Q4_K_ACT => panel8_pair_q4_k
        = |nb, panels, acts, arow, out| q4_k_pair::<T, false>(nb, panels, acts, arow, out);
    "stored Q4_K", 256, crate::panel::STORED_Q4_K_BLOCK, crate::panel::Q4_K_ACT => panel8_pair_stored_q4_k
        = |nb, panels, acts, arow, out| q4_k_pair::<T, true>(nb, panels, acts, arow, out);
    "Q6_K", 256, crate::panel::Q6_K_BLOCK, crate::panel::Q6_K_ACT => panel8_pair_q6_k
        = |nb, panels, acts, arow, out| q6_k_pair::<T>(nb, panels, acts, arow, out);
}
