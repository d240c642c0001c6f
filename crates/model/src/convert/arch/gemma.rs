//! Gemma 2 and Gemma 3 (`conversion/gemma.py`): hyper-parameters, defaults
//! and the Gemma 2 feature checks.

use std::path::Path;

use lamina_gguf::{GgufBuilder, OwnedValue};
use serde_json::{Map, Value};

use super::{Arch, Model, default, get_u64, need_f32, need_u32, read_json};
use crate::convert::{Error, Result};

pub(super) fn fill_defaults(arch: Arch, h: &mut Map<String, Value>) {
    if arch == Arch::Gemma2 {
        // Gemma2Config's defaults.
        default(h, "max_position_embeddings", Value::from(8192));
        default(h, "rms_norm_eps", Value::from(1e-6));
        default(h, "rope_theta", Value::from(10000.0));
        default(h, "head_dim", Value::from(256));
        default(h, "num_key_value_heads", Value::from(4));
        default(h, "sliding_window", Value::from(4096));
        default(h, "query_pre_attn_scalar", Value::from(256));
        default(h, "attn_logit_softcapping", Value::from(50.0));
        default(h, "final_logit_softcapping", Value::from(30.0));
        return;
    }
    default(h, "max_position_embeddings", Value::from(131072));
    default(h, "rms_norm_eps", Value::from(1e-6));
    default(h, "rope_theta", Value::from(1_000_000.0));
    default(h, "rope_local_base_freq", Value::from(10000.0));
    default(h, "head_dim", Value::from(256));
    default(h, "sliding_window", Value::from(4096));
    default(h, "rope_scaling", Value::Null);
    // Gemma3TextConfig halves the sliding window of bidirectional models
    // (transformers#40700); the EmbeddingGemma path writes the original back.
    if h.get("use_bidirectional_attention") == Some(&Value::Bool(true))
        && let Some(sw) = get_u64(h, "sliding_window")
    {
        h.insert("sliding_window".into(), Value::from(sw / 2 + 1));
    }
}

/// The GGUF has no field for Gemma 2's window pattern or query scale:
/// llama.cpp (and Lamina) assume every other layer, starting with the first,
/// is sliding, and scale queries by 1/sqrt(head_dim) (1/sqrt(hidden/heads)
/// for the 46-layer 27B), so a checkpoint that differs is refused.
pub(super) fn check_gemma2(m: &Model) -> Result<()> {
    let h = &m.hparams;
    if let Some(Value::Array(types)) = h.get("layer_types") {
        for (i, t) in types.iter().enumerate() {
            let want = if i % 2 == 0 {
                "sliding_attention"
            } else {
                "full_attention"
            };
            if t.as_str() != Some(want) {
                return Err(Error::Unsupported(format!(
                    "config.json: Gemma 2 layer_types[{i}] is {t}; only the alternating \
                     sliding/full window pattern starting with a sliding layer is supported"
                )));
            }
        }
    }
    let scalar = h.get("query_pre_attn_scalar").and_then(Value::as_f64);
    let head_dim = get_u64(h, "head_dim").map(|d| d as f64);
    let per_head = match (get_u64(h, "hidden_size"), get_u64(h, "num_attention_heads")) {
        (Some(hid), Some(n)) if n > 0 => Some((hid / n) as f64),
        _ => None,
    };
    let expected = if m.block_count == 46 {
        per_head
    } else {
        head_dim
    };
    if scalar.is_some() && scalar != expected {
        return Err(Error::Unsupported(format!(
            "config.json: Gemma 2 query_pre_attn_scalar {} is not supported: the GGUF cannot \
             carry it and the attention scale is derived from head_dim ({})",
            h["query_pre_attn_scalar"],
            expected.map_or("unknown".into(), |e| e.to_string())
        )));
    }
    Ok(())
}

/// `Gemma2Model.set_gguf_parameters` (which does not call the base class).
pub(super) fn write_gemma2_params(m: &Model, b: &mut GgufBuilder, file_type: u32) -> Result<()> {
    let h = &m.hparams;
    let k = |s: &str| format!("gemma2.{s}");
    let get = |key: &str| {
        h.get(key)
            .filter(|v| !v.is_null())
            .ok_or_else(|| Error::Config(format!("config.json: Gemma 2 needs {key}")))
    };
    let u32_of = |key: &str| get(key).and_then(|v| need_u32(v, key));
    let f32_of = |key: &str| get(key).and_then(|v| need_f32(v, key));
    let block_count = u32::try_from(m.block_count)
        .map_err(|_| Error::Config("num_hidden_layers is too large".into()))?;
    b.set(
        k("context_length"),
        OwnedValue::U32(u32_of("max_position_embeddings")?),
    )?;
    b.set(
        k("embedding_length"),
        OwnedValue::U32(u32_of("hidden_size")?),
    )?;
    b.set(k("block_count"), OwnedValue::U32(block_count))?;
    b.set(
        k("feed_forward_length"),
        OwnedValue::U32(u32_of("intermediate_size")?),
    )?;
    b.set(
        k("attention.head_count"),
        OwnedValue::U32(u32_of("num_attention_heads")?),
    )?;
    b.set(
        k("attention.head_count_kv"),
        OwnedValue::U32(u32_of("num_key_value_heads")?),
    )?;
    b.set(
        k("attention.layer_norm_rms_epsilon"),
        OwnedValue::F32(f32_of("rms_norm_eps")?),
    )?;
    b.set(
        k("attention.key_length"),
        OwnedValue::U32(u32_of("head_dim")?),
    )?;
    b.set(
        k("attention.value_length"),
        OwnedValue::U32(u32_of("head_dim")?),
    )?;
    b.set("general.file_type", OwnedValue::U32(file_type))?;
    b.set(
        k("attn_logit_softcapping"),
        OwnedValue::F32(f32_of("attn_logit_softcapping")?),
    )?;
    b.set(
        k("final_logit_softcapping"),
        OwnedValue::F32(f32_of("final_logit_softcapping")?),
    )?;
    b.set(
        k("attention.sliding_window"),
        OwnedValue::U32(u32_of("sliding_window")?),
    )?;
    Ok(())
}

/// `Gemma3Model.set_gguf_parameters` after the base class (and EmbeddingGemma's additions).
pub(super) fn write_gemma3_params(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    let h = &m.hparams;
    let a = m.arch.name();
    let k = |s: &str| format!("{a}.{s}");
    let get = |key: &str| h.get(key).filter(|v| !v.is_null());
    b.set(
        k("context_length"),
        OwnedValue::U32(
            get("max_position_embeddings")
                .map_or(Ok(131072), |v| need_u32(v, "max_position_embeddings"))?,
        ),
    )?;
    b.set(
        k("attention.head_count"),
        OwnedValue::U32(
            get("num_attention_heads").map_or(Ok(8), |v| need_u32(v, "num_attention_heads"))?,
        ),
    )?;
    b.set(
        k("attention.layer_norm_rms_epsilon"),
        OwnedValue::F32(get("rms_norm_eps").map_or(Ok(1e-6), |v| need_f32(v, "rms_norm_eps"))?),
    )?;
    let hd = get("head_dim").map_or(Ok(256), |v| need_u32(v, "head_dim"))?;
    b.set(k("attention.key_length"), OwnedValue::U32(hd))?;
    b.set(k("attention.value_length"), OwnedValue::U32(hd))?;
    let theta = m
        .full_rope()
        .get("rope_theta")
        .filter(|v| !v.is_null())
        .map_or(Ok(1_000_000.0), |v| need_f32(v, "rope_theta"))?;
    b.set(k("rope.freq_base"), OwnedValue::F32(theta))?;
    if get("attn_logit_softcapping").is_some() {
        return Err(Error::Config(
            "config.json: Gemma 3 has no attn_logit_softcapping".into(),
        ));
    }
    if let Some(v) = get("final_logit_softcapping").filter(|v| v.as_f64().is_some_and(|f| f != 0.0))
    {
        b.set(
            k("final_logit_softcapping"),
            OwnedValue::F32(need_f32(v, "final_logit_softcapping")?),
        )?;
    }
    if get("sliding_window_pattern").and_then(Value::as_u64) != Some(1) {
        let sw = get("sliding_window")
            .ok_or_else(|| Error::Config("config.json: no sliding_window".into()))?;
        b.set(
            k("attention.sliding_window"),
            OwnedValue::U32(need_u32(sw, "sliding_window")?),
        )?;
    }
    b.set(
        k("attention.head_count_kv"),
        OwnedValue::U32(
            get("num_key_value_heads").map_or(Ok(4), |v| need_u32(v, "num_key_value_heads"))?,
        ),
    )?;
    if m.arch == Arch::GemmaEmbedding {
        let sw = m
            .raw_config
            .get("sliding_window")
            .filter(|v| !v.is_null())
            .ok_or_else(|| {
                Error::Config(
                    "config.json: sliding_window not found; EmbeddingGemma needs it".into(),
                )
            })?;
        b.set(
            k("attention.sliding_window"),
            OwnedValue::U32(need_u32(sw, "sliding_window")?),
        )?;
        for (prefix, i, o) in &m.dense_dims {
            let conv = |n: u64| {
                u32::try_from(n)
                    .map_err(|_| Error::Config(format!("{prefix}: feature count {n} too large")))
            };
            b.set(k(&format!("{prefix}_feat_in")), OwnedValue::U32(conv(*i)?))?;
            b.set(k(&format!("{prefix}_feat_out")), OwnedValue::U32(conv(*o)?))?;
        }
        write_pooling(m, b)?;
    }
    Ok(())
}

/// (module folder, tensor prefix) of each sentence-transformers Dense module.
type DenseModules = Vec<(String, String)>;
/// (prefix, in, out) of each Dense module.
type DenseDims = Vec<(String, u64, u64)>;

/// EmbeddingGemma's sentence-transformers Dense modules listed in modules.json.
pub(super) fn dense_modules(dir: &Path) -> Result<(DenseModules, DenseDims)> {
    let mut dense_modules = Vec::new();
    let mut dense_dims = Vec::new();
    let modules_file = dir.join("modules.json");
    if modules_file.is_file() {
        let mods = read_json(&modules_file)?;
        for m in mods.as_array().into_iter().flatten() {
            let (Some(ty), Some(path)) = (
                m.get("type").and_then(Value::as_str),
                m.get("path").and_then(Value::as_str),
            ) else {
                continue;
            };
            if !ty.ends_with("Dense") || !dir.join(path).join("model.safetensors").is_file() {
                continue;
            }
            let prefix = if path == "2_Dense" {
                "dense_2"
            } else {
                "dense_3"
            };
            dense_modules.push((path.to_string(), prefix.to_string()));
            let conf = dir.join(path).join("config.json");
            if conf.is_file() {
                let c = read_json(&conf)?;
                if let (Some(i), Some(o)) = (
                    c.get("in_features").and_then(Value::as_u64),
                    c.get("out_features").and_then(Value::as_u64),
                ) {
                    dense_dims.retain(|(p, _, _): &(String, u64, u64)| p != prefix);
                    dense_dims.push((prefix.to_string(), i, o));
                }
            }
        }
    }
    Ok((dense_modules, dense_dims))
}

/// `_try_set_pooling_type`: the sentence-transformers pooling module, if any.
pub(super) fn write_pooling(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    let modules_file = m.dir.join("modules.json");
    if !modules_file.is_file() {
        return Ok(());
    }
    let mods = read_json(&modules_file)?;
    let Some(path) = mods
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| {
            m.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("Pooling"))
        })
        .and_then(|m| m.get("path").and_then(Value::as_str))
    else {
        return Ok(());
    };
    let p = read_json(&m.dir.join(path).join("config.json"))?;
    let on = |key: &str| p.get(key).and_then(Value::as_bool).unwrap_or(false);
    let ty = if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match p.get("pooling_mode").and_then(Value::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(Error::Unsupported(format!(
                    "{path}/config.json: only mean, CLS and last-token pooling are supported"
                )));
            }
        }
    };
    b.set(
        format!("{}.pooling_type", m.arch.name()),
        OwnedValue::U32(ty),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::arch::{test_model, written};

    fn config() -> Value {
        serde_json::json!({
            "architectures": ["Gemma2ForCausalLM"], "hidden_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "query_pre_attn_scalar": 32,
            "num_hidden_layers": 4, "vocab_size": 400, "intermediate_size": 256,
            "sliding_window": 16
        })
    }

    #[test]
    fn gemma2_keys_in_python_order() {
        let (_dir, m) = test_model(config()).unwrap();
        let kv = written(|b| m.write_params(b, 0));
        let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "gemma2.context_length",
                "gemma2.embedding_length",
                "gemma2.block_count",
                "gemma2.feed_forward_length",
                "gemma2.attention.head_count",
                "gemma2.attention.head_count_kv",
                "gemma2.attention.layer_norm_rms_epsilon",
                "gemma2.attention.key_length",
                "gemma2.attention.value_length",
                "general.file_type",
                "gemma2.attn_logit_softcapping",
                "gemma2.final_logit_softcapping",
                "gemma2.attention.sliding_window",
            ]
        );
        // Gemma2Config's defaults fill what config.json leaves out.
        assert_eq!(kv[0].1, OwnedValue::U32(8192));
        assert_eq!(kv[10].1, OwnedValue::F32(50.0));
        assert_eq!(kv[11].1, OwnedValue::F32(30.0));
        assert_eq!(kv[12].1, OwnedValue::U32(16));
    }

    #[test]
    fn gemma2_names_and_skips() {
        let (_dir, m) = test_model(config()).unwrap();
        assert_eq!(m.filter_name("lm_head.weight"), None);
        let map = |n: &str| m.map_name(n).unwrap();
        assert_eq!(
            map("model.layers.3.post_attention_layernorm.weight"),
            "blk.3.post_attention_norm.weight"
        );
        assert_eq!(
            map("model.layers.3.pre_feedforward_layernorm.weight"),
            "blk.3.ffn_norm.weight"
        );
        assert_eq!(
            map("model.layers.3.post_feedforward_layernorm.weight"),
            "blk.3.post_ffw_norm.weight"
        );
        assert!(
            m.map_name("model.layers.0.self_attn.q_norm.weight")
                .is_err()
        );
    }

    #[test]
    fn gemma2_window_pattern_and_query_scale_are_checked() {
        let mut c = config();
        c["layer_types"] = serde_json::json!([
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention"
        ]);
        let err = test_model(c).err().expect("refused").to_string();
        assert!(err.contains("layer_types[0]"), "{err}");
        let mut c = config();
        c["query_pre_attn_scalar"] = 256.into();
        let err = test_model(c).err().expect("refused").to_string();
        assert!(err.contains("query_pre_attn_scalar"), "{err}");
        let mut c = config();
        c["layer_types"] = serde_json::json!([
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention"
        ]);
        assert!(test_model(c).is_ok());
    }
}
