//! Phi-3 (`Phi3MiniModel` in `conversion/phi.py`): hyper-parameters and the
//! LongRoPE factor tensors of the 128k variants.

use lamina_gguf::{GgufBuilder, OwnedValue};
use serde_json::{Map, Value};

use super::{Model, default, default_kv_heads, find, need_f32, need_u32};
use crate::convert::{Error, Result};

pub(super) fn fill_defaults(h: &mut Map<String, Value>) {
    // Phi3Config's defaults.
    default(h, "max_position_embeddings", Value::from(4096));
    default(h, "original_max_position_embeddings", Value::from(4096));
    default(h, "rms_norm_eps", Value::from(1e-5));
    default(h, "rope_theta", Value::from(10000.0));
    default(h, "partial_rotary_factor", Value::from(1.0));
    default(h, "rope_scaling", Value::Null);
    default(h, "sliding_window", Value::Null);
    default_kv_heads(h);
}

fn rope_type(m: &Model) -> Option<String> {
    m.rope
        .get("rope_type")
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase)
}

fn long_factors(m: &Model) -> Option<&Vec<Value>> {
    m.rope
        .get("long_factor")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
}

/// Only LongRoPE (or no scaling) is supported: the Python converter ignores
/// other rope_scaling types for Phi-3, which would run silently wrong.
pub(super) fn check_supported(m: &Model) -> Result<()> {
    match rope_type(m).as_deref() {
        None | Some("default") | Some("longrope") | Some("su") => Ok(()),
        Some(t) => Err(Error::Unsupported(format!(
            "config.json: Phi-3 rope scaling type {t:?} is not supported (LongRoPE is)"
        ))),
    }
}

fn get_u64(m: &Model, keys: &[&str]) -> Result<u64> {
    let v = find(&m.hparams, keys)
        .ok_or_else(|| Error::Config(format!("config.json: no {}", keys[0])))?;
    need_u32(v, keys[0]).map(u64::from)
}

fn orig_ctx(m: &Model) -> Result<u64> {
    let v = m
        .rope
        .get("original_max_position_embeddings")
        .filter(|v| !v.is_null())
        .ok_or_else(|| Error::Config("config.json: no original_max_position_embeddings".into()))?;
    need_u32(v, "original_max_position_embeddings").map(u64::from)
}

/// `int(partial_rotary_factor * n_embd) // n_head`.
fn rope_dims(m: &Model) -> Result<u64> {
    let n_embd = get_u64(m, &["hidden_size", "n_embd"])?;
    let n_head = get_u64(m, &["num_attention_heads", "n_head"])?;
    if n_head == 0 {
        return Err(Error::Config(
            "config.json: num_attention_heads is 0".into(),
        ));
    }
    let pct = match m.rope.get("partial_rotary_factor").filter(|v| !v.is_null()) {
        None => 1.0,
        Some(v) => v.as_f64().ok_or_else(|| {
            Error::Config(format!(
                "config.json: partial_rotary_factor must be a number, got {v}"
            ))
        })?,
    };
    if !(0.0..=1.0).contains(&pct) {
        return Err(Error::Config(format!(
            "config.json: partial_rotary_factor {pct} is not in [0, 1]"
        )));
    }
    Ok((pct * n_embd as f64) as u64 / n_head)
}

/// `rope.scaling.attn_factor`, written while the LongRoPE tensors are generated.
pub(super) fn write_early_params(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    if long_factors(m).is_none() {
        return Ok(());
    }
    let max_pos = get_u64(m, &["n_positions", "max_position_embeddings"])? as f64;
    let orig = orig_ctx(m)? as f64;
    let scale = max_pos / orig;
    let attn_factor = if scale > 1.0 {
        (1.0 + scale.ln() / orig.ln()).sqrt()
    } else {
        1.0
    };
    b.set(
        "phi3.rope.scaling.attn_factor",
        OwnedValue::F32(attn_factor as f32),
    )?;
    Ok(())
}

/// `rope_factors_long.weight` and `rope_factors_short.weight`.
pub(super) fn generated_tensors(m: &Model) -> Result<Vec<(String, Vec<f32>)>> {
    let Some(long) = long_factors(m) else {
        return Ok(Vec::new());
    };
    if rope_type(m).is_none() {
        return Err(Error::Config(
            "config.json: rope_scaling has long_factor but no type".into(),
        ));
    }
    let short = m
        .rope
        .get("short_factor")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            Error::Config("config.json: rope_scaling has long_factor but no short_factor".into())
        })?;
    let half = rope_dims(m)? as usize / 2;
    if long.len() != short.len() || long.len() != half || rope_dims(m)? % 2 != 0 {
        return Err(Error::Config(format!(
            "config.json: rope_scaling long_factor and short_factor must each have {half} values \
             (rope dimensions / 2), got {} and {}",
            long.len(),
            short.len()
        )));
    }
    let floats = |what: &str, list: &[Value]| -> Result<Vec<f32>> {
        list.iter().map(|v| need_f32(v, what)).collect()
    };
    Ok(vec![
        (
            "rope_factors_long.weight".into(),
            floats("long_factor", long)?,
        ),
        (
            "rope_factors_short.weight".into(),
            floats("short_factor", short)?,
        ),
    ])
}

/// `Phi3MiniModel.set_gguf_parameters` (which does not call the base class).
pub(super) fn write_params(m: &Model, b: &mut GgufBuilder, file_type: u32) -> Result<()> {
    let h = &m.hparams;
    let k = |s: &str| format!("phi3.{s}");
    let u = |keys: &[&str]| -> Result<OwnedValue> {
        let n = get_u64(m, keys)?;
        Ok(OwnedValue::U32(n as u32))
    };
    b.set(
        k("context_length"),
        u(&["n_positions", "max_position_embeddings"])?,
    )?;
    b.set(
        k("rope.scaling.original_context_length"),
        OwnedValue::U32(orig_ctx(m)? as u32),
    )?;
    b.set(k("embedding_length"), u(&["hidden_size", "n_embd"])?)?;
    b.set(k("feed_forward_length"), u(&["intermediate_size"])?)?;
    b.set(
        k("block_count"),
        OwnedValue::U32(
            u32::try_from(m.block_count)
                .map_err(|_| Error::Config("num_hidden_layers is too large".into()))?,
        ),
    )?;
    b.set(
        k("attention.head_count"),
        u(&["num_attention_heads", "n_head"])?,
    )?;
    b.set(
        k("attention.head_count_kv"),
        u(&["num_key_value_heads", "n_head_kv"])?,
    )?;
    let eps = find(h, &["rms_norm_eps"])
        .ok_or_else(|| Error::Config("config.json: no rms_norm_eps".into()))?;
    b.set(
        k("attention.layer_norm_rms_epsilon"),
        OwnedValue::F32(need_f32(eps, "rms_norm_eps")?),
    )?;
    b.set(
        k("rope.dimension_count"),
        OwnedValue::U32(rope_dims(m)? as u32),
    )?;
    let theta = m
        .full_rope()
        .get("rope_theta")
        .filter(|v| !v.is_null())
        .ok_or_else(|| Error::Config("config.json: no rope_theta".into()))?;
    b.set(
        k("rope.freq_base"),
        OwnedValue::F32(need_f32(theta, "rope_theta")?),
    )?;
    b.set("general.file_type", OwnedValue::U32(file_type))?;
    // 0 marks "no sliding window" (Phi-4) for llama.cpp.
    let sw = match h.get("sliding_window").filter(|v| !v.is_null()) {
        Some(v) => need_u32(v, "sliding_window")?,
        None => 0,
    };
    b.set(k("attention.sliding_window"), OwnedValue::U32(sw))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::arch::{test_model, written};

    fn longrope(n_factors: usize) -> Value {
        let long: Vec<f64> = (0..n_factors).map(|i| 1.0 + 0.37 * i as f64).collect();
        let short: Vec<f64> = (0..n_factors)
            .map(|i| 1.0 + 0.01 * (i * i) as f64)
            .collect();
        serde_json::json!({
            "architectures": ["Phi3ForCausalLM"], "hidden_size": 256, "num_attention_heads": 8,
            "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 400,
            "intermediate_size": 512, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096, "sliding_window": 262144,
            "rope_scaling": {"type": "longrope", "long_factor": long, "short_factor": short}
        })
    }

    #[test]
    fn fused_qkv_and_gate_up_keep_their_names() {
        let (_dir, m) = test_model(longrope(16)).unwrap();
        let map = |n: &str| m.map_name(n);
        assert_eq!(
            map("model.layers.1.self_attn.qkv_proj.weight").unwrap(),
            "blk.1.attn_qkv.weight"
        );
        assert_eq!(
            map("model.layers.0.mlp.gate_up_proj.weight").unwrap(),
            "blk.0.ffn_up.weight"
        );
        assert_eq!(
            map("model.layers.0.mlp.down_proj.weight").unwrap(),
            "blk.0.ffn_down.weight"
        );
        assert_eq!(
            map("model.layers.0.post_attention_layernorm.weight").unwrap(),
            "blk.0.ffn_norm.weight"
        );
        // The phi3 architecture has no separate gate tensor.
        assert!(map("model.layers.0.mlp.gate_proj.weight").is_err());
    }

    #[test]
    fn longrope_factors_and_attn_factor_match_python() {
        let (_dir, m) = test_model(longrope(16)).unwrap();
        let t = generated_tensors(&m).unwrap();
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["rope_factors_long.weight", "rope_factors_short.weight"]
        );
        assert_eq!(t[0].1[3], (1.0 + 0.37 * 3.0) as f32);
        // sqrt(1 + ln(131072 / 4096) / ln(4096)) as the Python converter wrote it.
        let kv = written(|b| write_early_params(&m, b));
        assert_eq!(kv[0].0, "phi3.rope.scaling.attn_factor");
        assert_eq!(kv[0].1, OwnedValue::F32(f32::from_bits(0x3f9859b9)));
        let kv = written(|b| write_params(&m, b, 0));
        assert_eq!(kv[1].0, "phi3.rope.scaling.original_context_length");
        assert_eq!(kv.last().unwrap().1, OwnedValue::U32(262144));

        // 16 factors are rope dims / 2; 12 are not.
        let (_dir, m) = test_model(longrope(12)).unwrap();
        assert!(
            generated_tensors(&m)
                .unwrap_err()
                .to_string()
                .contains("16 values")
        );
    }

    #[test]
    fn other_rope_scaling_is_refused() {
        let mut config = longrope(16);
        config["rope_scaling"] = serde_json::json!({"type": "yarn", "factor": 4.0});
        let err = test_model(config).err().expect("refused").to_string();
        assert!(err.contains("\"yarn\""), "{err}");
    }
}
