//! Qwen 2 and Qwen 3 (`Qwen2Model`, `Qwen3Model` in `conversion/qwen.py`).

use lamina_gguf::GgufBuilder;
use serde_json::{Map, Value};

use super::{Arch, Model, default, default_kv_heads, gemma};
use crate::convert::{Error, Result};

pub(super) fn fill_defaults(arch: Arch, h: &mut Map<String, Value>) {
    // Qwen2Config's / Qwen3Config's defaults.
    default(h, "max_position_embeddings", Value::from(32768));
    default(h, "rms_norm_eps", Value::from(1e-6));
    default(h, "rope_theta", Value::from(10000.0));
    default(h, "rope_scaling", Value::Null);
    default(h, "use_sliding_window", Value::Bool(false));
    if arch == Arch::Qwen3 {
        default(h, "head_dim", Value::from(128));
    }
    // An absent num_key_value_heads is the class default (32); only null means "= heads".
    default(h, "num_key_value_heads", Value::from(32));
    default_kv_heads(h);
}

/// Refuses what the qwen2/qwen3 GGUF architectures cannot express: the
/// Python converter drops a sliding window silently, and Qwen3 rerankers
/// need a classification head.
pub(super) fn check_supported(m: &Model) -> Result<()> {
    let h = &m.hparams;
    if h.get("use_sliding_window") == Some(&Value::Bool(true)) {
        return Err(Error::Unsupported(
            "config.json: use_sliding_window is true; Qwen sliding-window attention \
             (max_window_layers) is not supported"
                .into(),
        ));
    }
    if h.get("classifier_pooling").is_some_and(|v| !v.is_null()) {
        return Err(Error::Unsupported(
            "config.json: classifier_pooling (a classification head) is not supported".into(),
        ));
    }
    if m.arch == Arch::Qwen3 {
        let readme = std::fs::read_to_string(m.dir.join("README.md"))
            .unwrap_or_default()
            .to_lowercase();
        let dir_name = m
            .dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let hints = [
            dir_name.as_str(),
            h.get("_name_or_path").and_then(Value::as_str).unwrap_or(""),
            h.get("model_type").and_then(Value::as_str).unwrap_or(""),
            m.hf_arch.as_str(),
        ];
        let reranker = readme.contains("# qwen3-reranker")
            || readme.contains("# qwen3-vl-reranker")
            || hints.iter().any(|s| {
                let s = s.to_lowercase();
                s.contains("qwen3-reranker") || s.contains("qwen3-vl-reranker")
            });
        if reranker {
            return Err(Error::Unsupported(
                "Qwen3 rerankers (a yes/no classification head) are not supported".into(),
            ));
        }
    }
    Ok(())
}

/// `Qwen2Model.set_gguf_parameters` after the base class: the pooling type
/// of sentence-transformers exports (Qwen3-Embedding).
pub(super) fn write_params(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    gemma::write_pooling(m, b)
}

#[cfg(test)]
mod tests {
    use crate::convert::arch::{test_model, written};

    fn config(arch: &str) -> serde_json::Value {
        serde_json::json!({
            "architectures": [arch], "hidden_size": 128, "num_attention_heads": 4,
            "num_hidden_layers": 2, "vocab_size": 400, "intermediate_size": 384
        })
    }

    #[test]
    fn defaults_follow_the_config_classes() {
        let (_dir, m) = test_model(config("Qwen3ForCausalLM")).unwrap();
        // Qwen3Config: head_dim 128 and 32 KV heads, whatever the other sizes.
        assert_eq!(m.hparams["head_dim"], 128);
        assert_eq!(m.hparams["num_key_value_heads"], 32);
        let mut c = config("Qwen2ForCausalLM");
        c["num_key_value_heads"] = serde_json::Value::Null;
        let (_dir, m) = test_model(c).unwrap();
        assert_eq!(m.hparams["num_key_value_heads"], 4);
        assert!(!m.hparams.contains_key("head_dim"));
        let kv = written(|b| m.write_params(b, 0));
        assert!(kv.iter().any(|(k, _)| k == "qwen2.attention.head_count_kv"));
        assert!(!kv.iter().any(|(k, _)| k.contains("key_length")));
    }

    #[test]
    fn sliding_window_and_rerankers_are_refused() {
        let mut c = config("Qwen2ForCausalLM");
        c["use_sliding_window"] = serde_json::Value::Bool(true);
        let err = test_model(c).err().expect("refused").to_string();
        assert!(err.contains("use_sliding_window"), "{err}");
        let mut c = config("Qwen3ForCausalLM");
        c["_name_or_path"] = "Qwen/Qwen3-Reranker-0.6B".into();
        let err = test_model(c).err().expect("refused").to_string();
        assert!(err.contains("reranker"), "{err}");
    }

    #[test]
    fn qwen3_maps_qk_norms_and_qwen2_biases() {
        let (_dir, m) = test_model(config("Qwen3ForCausalLM")).unwrap();
        assert_eq!(
            m.map_name("model.layers.1.self_attn.q_norm.weight")
                .unwrap(),
            "blk.1.attn_q_norm.weight"
        );
        let (_dir, m) = test_model(config("Qwen2ForCausalLM")).unwrap();
        assert_eq!(
            m.map_name("model.layers.0.self_attn.k_proj.bias").unwrap(),
            "blk.0.attn_k.bias"
        );
        // The qwen2 architecture has no Q/K norms.
        assert!(
            m.map_name("model.layers.1.self_attn.q_norm.weight")
                .is_err()
        );
    }
}
