//! Memory a generation session needs, checked before anything is
//! allocated: a hostile `context_length` or a huge `--ctx` gets an error
//! naming the context, not an arithmetic overflow or an aborting allocation.

use crate::ModelError;
use crate::hparams::HParams;
use crate::transformer::KvType;

/// Bytes of the KV cache, the batch workspace and the per-token buffers of
/// a session (`None` only if the count overflows 128 bits, which it cannot).
pub fn session_bytes(hp: &HParams, n_ctx: usize, kv: KvType, batch: usize) -> Option<u128> {
    let u = |x: usize| x as u128;
    let kv_cache = u(hp.n_layer)
        .checked_mul(u(n_ctx))?
        .checked_mul(u(kv.row_bytes(hp.kv_dim())))?;
    // Workspace::ensure: x, xn, o, q, att, k, v, gate, up, rope and the
    // quantized-activation scratch, all f32, plus positions and sequences.
    let widest = hp.n_embd.max(hp.n_ff).max(hp.q_dim());
    let per_token = 3 * u(hp.n_embd)
        + 2 * u(hp.q_dim())
        + 2 * u(hp.kv_dim())
        + 2 * u(hp.n_ff)
        + 2 * u(hp.rope_dims)
        + u(widest);
    let workspace = u(batch).checked_mul(per_token.checked_mul(4)? + 24)?;
    // The token list and the logits.
    let rest = u(n_ctx) * 4 + u(hp.n_vocab) * 4;
    kv_cache.checked_add(workspace)?.checked_add(rest)
}

/// The machine's memory and swap in bytes (Linux), if known.
pub fn machine_bytes() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u128> {
        let line = info.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
}

/// Refuses a session that cannot fit: more bytes than `usize` addresses, or
/// than the machine has in memory and swap.
pub fn check_session(
    hp: &HParams,
    n_ctx: usize,
    kv: KvType,
    batch: usize,
) -> Result<(), ModelError> {
    check_against(hp, n_ctx, kv, batch, machine_bytes())
}

/// Refuses a batch scheduler that cannot fit: the KV cache of all
/// `slots × n_ctx` positions, the workspace of `budget` tokens, and a row of
/// logits per slot.
pub fn check_scheduler(
    hp: &HParams,
    n_ctx: usize,
    slots: usize,
    kv: KvType,
    budget: usize,
) -> Result<(), ModelError> {
    check_kv_type(hp, kv)?;
    // A saturated product needs more than any machine has: refused below.
    let total = n_ctx.saturating_mul(slots);
    let logits = (slots as u128) * (hp.n_vocab as u128) * 4;
    let need = session_bytes(hp, total, kv, budget).and_then(|b| b.checked_add(logits));
    refuse_over(total, need, machine_bytes())
}

fn check_against(
    hp: &HParams,
    n_ctx: usize,
    kv: KvType,
    batch: usize,
    limit: Option<u128>,
) -> Result<(), ModelError> {
    check_kv_type(hp, kv)?;
    refuse_over(n_ctx, session_bytes(hp, n_ctx, kv, batch), limit)
}

/// Refuses a q8_0 cache for heads that are not whole Q8_0 blocks.
fn check_kv_type(hp: &HParams, kv: KvType) -> Result<(), ModelError> {
    if kv.has_q8_0() && !hp.head_dim.is_multiple_of(32) {
        return Err(ModelError::Input(format!(
            "a q8_0 KV cache needs heads of a multiple of 32 values, and this model's have {}; \
             use an f16 cache",
            hp.head_dim
        )));
    }
    Ok(())
}

/// `ContextTooLarge` when `need` (`None`: past 128 bits) exceeds `limit`
/// (`None`: unknown) or what `usize` addresses.
fn refuse_over(n_ctx: usize, need: Option<u128>, limit: Option<u128>) -> Result<(), ModelError> {
    let need = need.unwrap_or(u128::MAX);
    let addressable = u128::from(isize::MAX as u64);
    let limit = limit.unwrap_or(addressable).min(addressable);
    if need > limit {
        return Err(ModelError::ContextTooLarge { n_ctx, need, limit });
    }
    Ok(())
}
