//! Llama, Mistral and Granite (`conversion/llama.py`, `granite.py`):
//! defaults, hyper-parameters and Llama 3's `rope_freqs` tensor.

use lamina_gguf::{GgufBuilder, OwnedValue};
use serde_json::{Map, Value};

use super::{Arch, Model, default, default_kv_heads, get_u64, need_f32, need_u32};
use crate::convert::{Error, Result};

pub(super) fn fill_defaults(hf_arch: &str, h: &mut Map<String, Value>) {
    if hf_arch == "MistralForCausalLM" {
        // MistralConfig: head_dim stays None (so no key_length is written).
        default(h, "max_position_embeddings", Value::from(131072));
        default(h, "rms_norm_eps", Value::from(1e-6));
        default(h, "rope_theta", Value::from(10000.0));
        default(h, "num_key_value_heads", Value::from(8));
        default_kv_heads(h);
        default(h, "sliding_window", Value::from(4096));
        return;
    }
    default(h, "max_position_embeddings", Value::from(2048));
    default(h, "rms_norm_eps", Value::from(1e-6));
    default(h, "rope_theta", Value::from(10000.0));
    default(h, "rope_scaling", Value::Null);
    default_kv_heads(h);
    if hf_arch == "GraniteForCausalLM" {
        for key in [
            "embedding_multiplier",
            "residual_multiplier",
            "attention_multiplier",
            "logits_scaling",
        ] {
            default(h, key, Value::from(1.0));
        }
    } else if !h.contains_key("head_dim")
        && let (Some(hid), Some(n)) = (get_u64(h, "hidden_size"), get_u64(h, "num_attention_heads"))
        && n > 0
    {
        h.insert("head_dim".into(), Value::from(hid / n));
    }
}

fn head_dim(m: &Model, use_head_dim: bool) -> Result<u64> {
    let h = &m.hparams;
    if use_head_dim && let Some(v) = h.get("head_dim").filter(|v| !v.is_null()) {
        return need_u32(v, "head_dim").map(u64::from);
    }
    let hidden = get_u64(h, "hidden_size")
        .ok_or_else(|| Error::Config("config.json: no hidden_size".into()))?;
    let heads = get_u64(h, "num_attention_heads")
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::Config("config.json: no num_attention_heads".into()))?;
    Ok(hidden / heads)
}

/// `LlamaModel.set_gguf_parameters` after the base class, and Granite's multipliers.
pub(super) fn write_params(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    let h = &m.hparams;
    let a = m.arch.name();
    let k = |s: &str| format!("{a}.{s}");
    let vs = h
        .get("vocab_size")
        .ok_or_else(|| Error::Config("config.json: no vocab_size".into()))?;
    b.set(
        k("vocab_size"),
        OwnedValue::U32(need_u32(vs, "vocab_size")?),
    )?;
    // Granite ignores head_dim.
    let rope_dim = u32::try_from(head_dim(m, m.arch != Arch::Granite)?)
        .map_err(|_| Error::Config("head size too large".into()))?;
    b.set(k("rope.dimension_count"), OwnedValue::U32(rope_dim))?;
    if m.arch == Arch::Granite {
        // Python skips a multiplier that is 0 (falsy), as here.
        for (hf, key) in [
            ("attention_multiplier", "attention.scale"),
            ("embedding_multiplier", "embedding_scale"),
            ("residual_multiplier", "residual_scale"),
            ("logits_scaling", "logit_scale"),
        ] {
            if let Some(v) = h.get(hf).filter(|v| !v.is_null()) {
                let f = need_f32(v, hf)?;
                if f != 0.0 {
                    b.set(k(key), OwnedValue::F32(f))?;
                }
            }
        }
    }
    Ok(())
}

fn param(p: &Map<String, Value>, key: &str, default: f64) -> Result<f64> {
    match p.get(key).filter(|v| !v.is_null()) {
        None => Ok(default),
        Some(v) => v.as_f64().ok_or_else(|| {
            Error::Config(format!(
                "config.json: rope_scaling.{key} must be a number, got {v}"
            ))
        }),
    }
}

/// `LlamaModel.generate_extra_tensors`: `rope_freqs.weight` for `rope_type: llama3`.
pub(super) fn generated_tensors(m: &Model) -> Result<Vec<(String, Vec<f32>)>> {
    let rope = m.full_rope();
    let is_llama3 = rope
        .get("rope_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("llama3"));
    if !is_llama3 {
        return Ok(Vec::new());
    }
    if m.arch == Arch::Granite {
        return Err(Error::Unsupported(
            "Granite with Llama 3 rope scaling (rope_type \"llama3\"): the granite architecture \
             has no rope_freqs tensor"
                .into(),
        ));
    }
    let dim = head_dim(m, true)?;
    if dim == 0 || dim > 1 << 16 {
        return Err(Error::Config(format!(
            "config.json: head size {dim} is not plausible"
        )));
    }
    let factors = llama3_rope_factors(
        param(rope, "rope_theta", 10000.0)?,
        dim as usize,
        param(rope, "factor", 8.0)?,
        param(rope, "low_freq_factor", 1.0)?,
        param(rope, "high_freq_factor", 4.0)?,
        param(rope, "original_max_position_embeddings", 8192.0)?,
    );
    Ok(vec![("rope_freqs.weight".into(), factors)])
}

/// The Llama 3 per-frequency rope factors, step for step in f32 as the
/// Python converter computes them with torch (a Python number divided by a
/// tensor is `tensor.reciprocal() * number` there).
pub(super) fn llama3_rope_factors(
    base: f64,
    dim: usize,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    old_context_len: f64,
) -> Vec<f32> {
    let low_freq_wavelen = old_context_len / low_freq_factor;
    let high_freq_wavelen = old_context_len / high_freq_factor;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    (0..dim)
        .step_by(2)
        .map(|i| {
            let exponent = i as f32 / dim as f32;
            let freq = 1.0 / (base as f32).powf(exponent);
            let wavelen = (1.0 / freq) * two_pi;
            if wavelen < high_freq_wavelen as f32 {
                1.0
            } else if wavelen > low_freq_wavelen as f32 {
                factor as f32
            } else {
                let smooth = ((1.0 / wavelen) * old_context_len as f32 - low_freq_factor as f32)
                    / (high_freq_factor - low_freq_factor) as f32;
                1.0 / ((1.0 - smooth) / factor as f32 + smooth)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::arch::{test_model, written};

    #[test]
    fn llama3_rope_factors_match_python() {
        // LlamaModel.generate_extra_tensors run with torch 2.11 on these
        // (rope_theta, head_dim, factor, low_freq_factor, high_freq_factor,
        // original_max_position_embeddings): factors before `first` are 1,
        // then come the smoothed ones (f32 bits), then `factor`.
        type Config = (f64, usize, f64, f64, f64, f64);
        let cases: [(Config, usize, &[u32]); 4] = [
            (
                (500000.0, 64, 32.0, 1.0, 4.0, 8192.0),
                15,
                &[0x3fd35ec2, 0x4052b46f, 0x411aaaee],
            ),
            (
                (500000.0, 128, 8.0, 1.0, 4.0, 8192.0),
                29,
                &[
                    0x3f9a8ed5, 0x3fc6d64a, 0x4001af1d, 0x402c732e, 0x406bcace, 0x40a83c06,
                ],
            ),
            (
                (10000.0, 32, 4.0, 2.0, 8.0, 1024.0),
                6,
                &[0x3fc6b118, 0x4030aa2c],
            ),
            (
                (1000000.0, 96, 16.0, 1.0, 4.0, 4096.0),
                18,
                &[0x3f8eec13, 0x3fd227cc, 0x4022592f, 0x408948e1, 0x410e841c],
            ),
        ];
        for ((base, dim, factor, low, high, ctx), first, smoothed) in cases {
            let got = llama3_rope_factors(base, dim, factor, low, high, ctx);
            assert_eq!(got.len(), dim / 2);
            for (i, v) in got.iter().enumerate() {
                let want = if i < first {
                    1.0
                } else if i < first + smoothed.len() {
                    f32::from_bits(smoothed[i - first])
                } else {
                    factor as f32
                };
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "dim {dim} base {base}: factor {i}"
                );
            }
        }
    }

    #[test]
    fn rope_freqs_tensor_from_config() {
        let config = serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_attention_heads": 4,
            "num_hidden_layers": 2, "vocab_size": 100, "head_dim": 64, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"}
        });
        let (_dir, m) = test_model(config.clone()).unwrap();
        let t = generated_tensors(&m).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, "rope_freqs.weight");
        assert_eq!(
            t[0].1,
            llama3_rope_factors(500000.0, 64, 32.0, 1.0, 4.0, 8192.0)
        );

        let mut granite = config;
        granite["architectures"] = serde_json::json!(["GraniteForCausalLM"]);
        let (_dir, m) = test_model(granite).unwrap();
        let err = generated_tensors(&m).unwrap_err().to_string();
        assert!(err.contains("llama3"), "{err}");
    }

    #[test]
    fn granite_multipliers_and_mistral_defaults() {
        let (_dir, m) = test_model(serde_json::json!({
            "architectures": ["GraniteForCausalLM"], "hidden_size": 256, "num_attention_heads": 8,
            "num_hidden_layers": 2, "vocab_size": 100, "head_dim": 64,
            "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
            "attention_multiplier": 0.015625, "logits_scaling": 0.0
        }))
        .unwrap();
        let kv = written(|b| write_params(&m, b));
        let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
        // head_dim is ignored (rope dims = 256 / 8) and a zero multiplier is left out.
        assert_eq!(
            keys,
            [
                "granite.vocab_size",
                "granite.rope.dimension_count",
                "granite.attention.scale",
                "granite.embedding_scale",
                "granite.residual_scale"
            ]
        );
        assert_eq!(kv[1].1, OwnedValue::U32(32));
        assert_eq!(kv[4].1, OwnedValue::F32(0.22));

        let (_dir, m) = test_model(serde_json::json!({
            "architectures": ["MistralForCausalLM"], "hidden_size": 256,
            "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 100
        }))
        .unwrap();
        assert_eq!(m.hparams["num_key_value_heads"], 8);
        assert_eq!(m.hparams["max_position_embeddings"], 131072);
        assert!(!m.hparams.contains_key("head_dim"));
    }
}
