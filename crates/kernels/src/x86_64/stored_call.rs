//! The checked entry points of the kernels over stored panels
//! ([`crate::panel::StoredPanelFns`]) on every x86-64 ISA: each stored
//! type's sizes, and the checks a call passes before its kernel runs.

/// A stored type's sizes, for the checked entry points below.
pub(super) struct StoredShape {
    pub(super) ty: &'static str,
    /// Values per block.
    pub(super) values: usize,
    /// Bytes of a stored block (sixteen rows).
    pub(super) block: usize,
    /// Bytes of a block of the activation row the one-token kernel reads
    /// ([`crate::panel::StoredPanelFns::single_reads_quantized`]).
    pub(super) act_block: usize,
    /// Bytes of a block of the panel a stored block unpacks to.
    pub(super) panel_block: usize,
}

pub(super) const SHAPE_Q8_0: StoredShape = StoredShape {
    ty: "Q8_0",
    values: 32,
    block: crate::panel::STORED_Q8_0_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::LEGACY_BLOCK,
};
pub(super) const SHAPE_Q5_0: StoredShape = StoredShape {
    ty: "Q5_0",
    values: 32,
    block: crate::panel::STORED_Q5_0_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::LEGACY_BLOCK,
};
pub(super) const SHAPE_Q4_0: StoredShape = StoredShape {
    ty: "Q4_0",
    values: 32,
    block: crate::panel::STORED_Q4_0_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::LEGACY_BLOCK,
};
pub(super) const SHAPE_Q4_1: StoredShape = StoredShape {
    ty: "Q4_1",
    values: 32,
    block: crate::panel::STORED_Q4_1_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::OFFSET_BLOCK,
};
pub(super) const SHAPE_Q5_1: StoredShape = StoredShape {
    ty: "Q5_1",
    values: 32,
    block: crate::panel::STORED_Q5_1_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::OFFSET_BLOCK,
};
pub(super) const SHAPE_Q4_K: StoredShape = StoredShape {
    ty: "Q4_K",
    values: 256,
    block: crate::panel::STORED_Q4_K_BLOCK,
    act_block: crate::panel::Q4_K_ACT,
    panel_block: crate::panel::Q4_K_BLOCK,
};
pub(super) const SHAPE_Q6_K: StoredShape = StoredShape {
    ty: "Q6_K",
    values: 256,
    block: crate::panel::STORED_Q6_K_BLOCK,
    // Its one-token kernel reads the Q8_K row itself.
    act_block: crate::panel::Q8_K_BYTES,
    panel_block: crate::panel::Q6_K_BLOCK,
};

/// A one-token stored kernel: (blocks per row, panels, panel count,
/// activation row, outputs, prefetch distance).
pub(super) type StoredSingleKernel = unsafe fn(usize, *const u8, usize, *const u8, *mut f32, usize);
/// A stored-panel unpacker: (blocks per row, stored panel, panel out).
pub(super) type UnpackStoredKernel = unsafe fn(usize, *const u8, *mut u8);

/// Checks a one-token call over stored panels of `shape` (whole blocks,
/// whole panels, the activation row's and the output's sizes), then runs
/// `kernel` on it.
pub(super) fn stored_single_call(
    shape: &StoredShape,
    kernel: StoredSingleKernel,
    cols: usize,
    panels: &[u8],
    act: &[u8],
    out: &mut [f32],
) {
    let StoredShape { ty, values, .. } = *shape;
    assert!(
        cols > 0 && cols.is_multiple_of(values),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / values;
    let pbytes = nb * shape.block;
    assert!(
        panels.len().is_multiple_of(pbytes),
        "stored {ty}: {} bytes is not whole panels",
        panels.len()
    );
    let n = panels.len() / pbytes;
    assert_eq!(act.len(), nb * shape.act_block, "{ty} activation row size");
    assert_eq!(out.len(), 16 * n, "stored panel output size");
    // SAFETY: `n` whole panels of `nb` stored blocks, an activation row of
    // `nb` blocks and `16·n` outputs (checked above), as every kernel passed here
    // reads and writes; each reachable only through the table of the ISA
    // whose features it enables, handed out after they were detected.
    unsafe {
        kernel(
            nb,
            panels.as_ptr(),
            n,
            act.as_ptr(),
            out.as_mut_ptr(),
            crate::prefetch::ahead(),
        )
    }
}

/// Checks an unpacking call of one stored panel of `shape` (whole blocks,
/// both sizes), then runs `kernel` on it.
pub(super) fn unpack_stored_call(
    shape: &StoredShape,
    kernel: UnpackStoredKernel,
    cols: usize,
    panel: &[u8],
    out: &mut [u8],
) {
    let StoredShape { ty, values, .. } = *shape;
    assert!(
        cols.is_multiple_of(values),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / values;
    assert_eq!(panel.len(), nb * shape.block, "stored {ty} panel size");
    assert_eq!(out.len(), nb * shape.panel_block, "{ty} panel size");
    // SAFETY: `nb` blocks each way (checked above), as every unpacker passed
    // here reads and writes; each reachable only through the table of the
    // ISA whose features it enables, handed out after they were detected.
    unsafe { kernel(nb, panel.as_ptr(), out.as_mut_ptr()) }
}

/// The safe entry points of one ISA's stored kernels: each one-token
/// wrapper's name, its type's shape and its kernel (checked by
/// [`stored_single_call`]), then each unpacker's (by [`unpack_stored_call`]).
macro_rules! stored_entry_points {
    (single { $($s:ident => $ss:ident, $sk:ident;)* }
     unpack { $($u:ident => $us:ident, $uk:ident;)* }) => {
        $(pub(crate) fn $s(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]) {
            stored_single_call(&$ss, $sk, cols, panels, act, out)
        })*
        $(pub(crate) fn $u(cols: usize, panel: &[u8], out: &mut [u8]) {
            unpack_stored_call(&$us, $uk, cols, panel, out)
        })*
    };
}
pub(super) use stored_entry_points;
