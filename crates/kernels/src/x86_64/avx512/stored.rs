//! AVX-512 VNNI kernels over stored panels ([`crate::panel::StoredPanelFns`]):
//! one token against stored panels, and unpacking stored panels.

use super::*;
use crate::x86_64::stored_call::*;

/// `n` stored legacy panels of `nb` blocks against one prepared row, each
/// panel as [`legacy_panel`] for one token, each block's bytes prefetched
/// `ahead` bytes further on ([`crate::prefetch`]; 0: none): whether a
/// software prefetch helps depends on the host, so the distance is chosen
/// there.
#[inline(always)]
unsafe fn stored_single<const FORM: u8>(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::LEGACY_ACT;
    let block = legacy_block_bytes(FORM);
    // SAFETY: `n` panels of `nb` stored blocks, a prepared row of `nb` blocks
    // and `16·n` floats of output (the wrapper's checks); the features are
    // enabled in the callers.
    unsafe {
        for p in 0..n {
            let panel = panels.add(p * nb * block);
            let (mut even, mut odd) = ([_mm512_setzero_ps()], [_mm512_setzero_ps()]);
            for i in 0..nb {
                let wb = panel.add(i * block);
                stream_ahead(wb, ahead, block);
                let acc = if i % 2 == 0 { &mut even } else { &mut odd };
                legacy_panel_step::<1, FORM>(wb, [act.add(i * LEGACY_ACT)], acc);
            }
            _mm512_storeu_ps(out.add(16 * p), _mm512_add_ps(even[0], odd[0]));
        }
    }
}

/// The one-token kernels over stored 32-value panels: each name, the body
/// it runs and the stored form.
macro_rules! stored_single_fns {
    ($($name:ident => $body:ident::<$form:ident>),* $(,)?) => {$(
        target_fns! { avx512:
            unsafe fn $name(
                nb: usize,
                panels: *const u8,
                n: usize,
                act: *const u8,
                out: *mut f32,
                ahead: usize,
            ) {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { $body::<$form>(nb, panels, n, act, out, ahead) }
            }
        }
    )*};
}

stored_single_fns! {
    k_stored_single_q8_0 => stored_single::<STORED_Q8_0>,
    k_stored_single_q5_0 => stored_single::<STORED_Q5_0>,
    k_stored_single_q4_0 => stored_single::<STORED_Q4_0>,
    k_stored_single_q4_1 => stored_single_offset::<STORED_Q4_0>,
    k_stored_single_q5_1 => stored_single_offset::<STORED_Q5_0>,
}

/// `n` stored Q4_1 or Q5_1 panels ([`offset_block_bytes`] of `FORM`)
/// against one prepared row, each as [`offset_panel`] for one token.
#[inline(always)]
unsafe fn stored_single_offset<const FORM: u8>(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    let bytes = nb * offset_block_bytes(FORM);
    // SAFETY: `n` panels of `nb` stored blocks, a prepared row of `nb` blocks
    // and `16·n` floats of output (the wrapper's checks); the features are
    // enabled in the callers.
    unsafe {
        for p in 0..n {
            offset_panel::<1, FORM>(nb, panels.add(p * bytes), act, 0, out.add(16 * p), ahead);
        }
    }
}

/// `nb` stored Q4_1 or Q5_1 blocks of `FORM` → `nb` offset panel blocks.
#[inline(always)]
unsafe fn unpack_stored_offset<const FORM: u8>(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::OFFSET_BLOCK;
    let block = offset_block_bytes(FORM);
    // SAFETY: `nb` stored blocks in and `nb` offset blocks out (the wrapper's
    // checks); the features are enabled.
    unsafe {
        for i in 0..nb {
            let wb = panel.add(i * block);
            let (w, dw) = legacy_block::<FORM>(wb);
            let dst = out.add(i * OFFSET_BLOCK);
            for (k, w) in w.into_iter().enumerate() {
                _mm512_storeu_si512(dst.add(64 * k).cast(), w);
            }
            _mm512_storeu_ps(dst.add(512).cast(), dw);
            _mm512_storeu_ps(
                dst.add(576).cast(),
                load16_f16(wb.add(legacy_block_bytes(FORM))),
            );
        }
    }
}

/// `nb` stored legacy blocks of `FORM` → `nb` legacy panel blocks.
#[inline(always)]
unsafe fn unpack_stored_legacy<const FORM: u8>(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::LEGACY_BLOCK;
    let block = legacy_block_bytes(FORM);
    // SAFETY: `nb` stored blocks in and `nb` legacy blocks out (the wrapper's
    // checks); the features are enabled.
    unsafe {
        for i in 0..nb {
            let (w, dw) = legacy_block::<FORM>(panel.add(i * block));
            let dst = out.add(i * LEGACY_BLOCK);
            for (k, w) in w.into_iter().enumerate() {
                _mm512_storeu_si512(dst.add(64 * k).cast(), w);
            }
            _mm512_storeu_ps(dst.add(512).cast(), dw);
        }
    }
}

target_fns! { avx512:
    unsafe fn k_unpack_stored_q5_0(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_stored_legacy::<STORED_Q5_0>(nb, panel, out) }
    }

    unsafe fn k_unpack_stored_q4_0(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_stored_legacy::<STORED_Q4_0>(nb, panel, out) }
    }

    unsafe fn k_unpack_stored_q4_1(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_stored_offset::<STORED_Q4_0>(nb, panel, out) }
    }

    unsafe fn k_unpack_stored_q5_1(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_stored_offset::<STORED_Q5_0>(nb, panel, out) }
    }
}

#[inline(always)]
unsafe fn stored_single_q4_k_body(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::STORED_Q4_K_BLOCK;
    // SAFETY: `n` panels of `nb` stored super-blocks, a prepared row and `16·n`
    // outputs (the wrapper's checks); the features are enabled.
    unsafe {
        for p in 0..n {
            let panel = panels.add(p * nb * STORED_Q4_K_BLOCK);
            q4_k_panel_ahead::<1, true>(nb, panel, act, 0, out.add(16 * p), ahead);
        }
    }
}

target_fns! { avx512:
    unsafe fn k_stored_single_q4_k(
        nb: usize,
        panels: *const u8,
        n: usize,
        act: *const u8,
        out: *mut f32,
        ahead: usize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { stored_single_q4_k_body(nb, panels, n, act, out, ahead) }
    }
}

/// Super-blocks of the activation row whose sub-block sums
/// [`k_stored_single_q6_k`] widens at a time (on the stack).
const Q6_K_SINGLE_CHUNK: usize = 16;

/// One token over stored Q6_K panels, against the Q8_K row itself: each 64
/// bytes of quants rebuilt as unsigned `q` (0..64) and multiplied at once
/// with the signed activations (`vpdpbusd` takes them in that order), half
/// a super-block at a time; each sub-block's sum then takes `32·Σa` from
/// the row's own sub-block sums, so it is the row kernel's exact
/// `Σ (q − 32)·a` with neither the `− 32` per quant byte nor the quants'
/// byte sums the prepared (`a + 128`) form needs: about a third fewer
/// vector instructions, where this kernel is compute-bound. The activation's
/// sums are widened to `32·Σa` as i32 once per call for up to
/// [`Q6_K_SINGLE_CHUNK`] super-blocks, then broadcast from memory; longer
/// rows go in chunks, each panel's accumulator kept in `out` between
/// them (the same additions in the same order).
#[inline(always)]
unsafe fn stored_single_q6_k_body(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::{Q8_K_BYTES, STORED_Q6_K_BLOCK};
    // SAFETY: `n` panels of `nb` stored super-blocks, `nb` Q8_K blocks and
    // `16·n` outputs (the wrapper's checks); the features are enabled; the
    // stack buffer holds the sums of the chunk's super-blocks only.
    unsafe {
        let mut sums = [0i32; 16 * Q6_K_SINGLE_CHUNK];
        for c0 in (0..nb).step_by(Q6_K_SINGLE_CHUNK) {
            let c1 = nb.min(c0 + Q6_K_SINGLE_CHUNK);
            for i in c0..c1 {
                // Q8_K: the scale (f32), 256 quants, then 16 i16 sums.
                let bsums = _mm256_loadu_si256(act.add(i * Q8_K_BYTES + 260).cast());
                let wide = _mm512_slli_epi32::<5>(_mm512_cvtepi16_epi32(bsums));
                _mm512_storeu_si512(sums.as_mut_ptr().add(16 * (i - c0)).cast(), wide);
            }
            for panel in 0..n {
                let mut acc = if c0 == 0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(out.add(16 * panel))
                };
                for i in c0..c1 {
                    let p = panels.add((panel * nb + i) * STORED_Q6_K_BLOCK);
                    let y = act.add(i * Q8_K_BYTES);
                    let b = sums.as_ptr().add(16 * (i - c0));
                    let mut s = _mm512_setzero_si512();
                    for h in 0..2 {
                        // Sub-block 8h + j's Σ q·a: sub-blocks 8h + 2g (values
                        // 128h + 32g..+16), then 8h + 2g + 1.
                        let first = q6_k_single_sums(p, y, h, 0, ahead);
                        let second = q6_k_single_sums(p, y, h, 1, ahead);
                        let mut a = [_mm512_setzero_si512(); 8];
                        for g in 0..4 {
                            a[2 * g] = first[g];
                            a[2 * g + 1] = second[g];
                        }
                        for m in 0..2 {
                            for (c, sc) in q6_k_scales(p, 2 * h + m).into_iter().enumerate() {
                                let j = 4 * m + c;
                                let t =
                                    _mm512_sub_epi32(a[j], _mm512_set1_epi32(*b.add(8 * h + j)));
                                s = _mm512_add_epi32(s, _mm512_mullo_epi32(t, sc));
                            }
                        }
                    }
                    let d = _mm512_mul_ps(load16_f16(p.add(3328)), _mm512_set1_ps(f32_at(y)));
                    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
                }
                _mm512_storeu_ps(out.add(16 * panel), acc);
            }
        }
    }
}

/// The exact `Σ q·a` of sub-blocks `8h + 2g + half` (g in 0..4) of the
/// stored Q6_K super-block at `p`, against the Q8_K block `y`: dwords
/// `4·half..4·half + 4` of each, in four chains kept in registers (the
/// sub-block index of `k8 / 4` made constant, so no chain goes through
/// memory), each sixteenth of the block prefetched `ahead` further on.
#[inline(always)]
unsafe fn q6_k_single_sums(
    p: *const u8,
    y: *const u8,
    h: usize,
    half: usize,
    ahead: usize,
) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block and Q8_K block (the caller's
    // contract); AVX-512F/BW + VNNI are enabled in the callers.
    unsafe {
        let part = crate::panel::STORED_Q6_K_BLOCK / 16;
        let mut a = [_mm512_setzero_si512(); 4];
        for k8 in 4 * half..4 * half + 4 {
            stream_ahead(p.add(part * (8 * h + k8)), ahead, part);
            for (g, w) in q6_k_quants(p, h, k8).into_iter().enumerate() {
                // Values 128h + 32g + 4·k8..: quants 4 + that.
                let x = bcast(y.add(4 + 128 * h + 32 * g + 4 * k8));
                a[g] = _mm512_dpbusd_epi32(a[g], w, x);
            }
        }
        a
    }
}

target_fns! { avx512:
    unsafe fn k_stored_single_q6_k(
        nb: usize,
        panels: *const u8,
        n: usize,
        act: *const u8,
        out: *mut f32,
        ahead: usize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { stored_single_q6_k_body(nb, panels, n, act, out, ahead) }
    }
}

#[inline(always)]
unsafe fn unpack_stored_q6_k_body(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::{Q6_K_BLOCK, STORED_Q6_K_BLOCK};
    // SAFETY: `nb` stored super-blocks in and `nb` panel super-blocks out (the
    // wrapper's checks); the features are enabled.
    unsafe {
        for i in 0..nb {
            let p = panel.add(i * STORED_Q6_K_BLOCK);
            let dst = out.add(i * Q6_K_BLOCK);
            let mut w = [[_mm512_setzero_si512(); 4]; 16];
            let mut sc = [_mm512_setzero_si512(); 16];
            let offset = stored_q6_k_expand(p, &mut w, &mut sc);
            for (s, (w, &sc)) in w.iter().zip(&sc).enumerate() {
                for (k, &w) in w.iter().enumerate() {
                    store512(dst.add(256 * s + 64 * k), w);
                }
                store512(dst.add(4096 + 64 * s), sc);
            }
            store512(dst.add(5120), offset);
            _mm512_storeu_ps(dst.add(5184).cast(), load16_f16(p.add(3328)));
        }
    }
}

target_fns! { avx512:
    unsafe fn k_unpack_stored_q6_k(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_stored_q6_k_body(nb, panel, out) }
    }
}

// The safe wrappers the tables hold, each checking its call.
stored_entry_points! {
    single {
        stored_single_q8_0 => SHAPE_Q8_0, k_stored_single_q8_0;
        stored_single_q5_0 => SHAPE_Q5_0, k_stored_single_q5_0;
        stored_single_q4_0 => SHAPE_Q4_0, k_stored_single_q4_0;
        stored_single_q4_1 => SHAPE_Q4_1, k_stored_single_q4_1;
        stored_single_q5_1 => SHAPE_Q5_1, k_stored_single_q5_1;
        stored_single_q4_k => SHAPE_Q4_K, k_stored_single_q4_k;
        stored_single_q6_k => SHAPE_Q6_K, k_stored_single_q6_k;
    }
    unpack {
        unpack_stored_q5_0 => SHAPE_Q5_0, k_unpack_stored_q5_0;
        unpack_stored_q4_0 => SHAPE_Q4_0, k_unpack_stored_q4_0;
        unpack_stored_q4_1 => SHAPE_Q4_1, k_unpack_stored_q4_1;
        unpack_stored_q5_1 => SHAPE_Q5_1, k_unpack_stored_q5_1;
        unpack_stored_q6_k => SHAPE_Q6_K, k_unpack_stored_q6_k;
    }
}
