//! BERT-family encoders (`conversion/bert.py`): `BertModel`,
//! `BertForMaskedLM`, `BertForSequenceClassification`, `XLMRobertaModel`,
//! `XLMRobertaForSequenceClassification` (all the `bert` architecture) and
//! `NomicBertModel` (`nomic-bert`).

use lamina_gguf::{GgufBuilder, OwnedValue};
use serde_json::{Map, Value};

use super::{Arch, Model, default, gemma, get_u64};
use crate::convert::{Error, Result};

/// The XLM-RoBERTa classes (SentencePiece Unigram vocabulary, offset positions).
pub(super) fn is_xlmr(hf_arch: &str) -> bool {
    hf_arch.starts_with("XLMRoberta")
}

fn is_classifier(hf_arch: &str) -> bool {
    hf_arch.ends_with("ForSequenceClassification")
}

/// `BertConfig`'s / `XLMRobertaConfig`'s defaults (the Python converter reads
/// `AutoConfig.to_dict()`); NomicBertModel's config is remote code, so the
/// Python converter falls back to config.json as written.
pub(super) fn fill_defaults(arch: Arch, hf_arch: &str, h: &mut Map<String, Value>) {
    if arch != Arch::Bert {
        return;
    }
    let xlmr = is_xlmr(hf_arch);
    default(h, "vocab_size", Value::from(30522));
    default(h, "hidden_size", Value::from(768));
    default(h, "num_hidden_layers", Value::from(12));
    default(h, "num_attention_heads", Value::from(12));
    default(h, "intermediate_size", Value::from(3072));
    default(h, "hidden_act", Value::from("gelu"));
    default(h, "max_position_embeddings", Value::from(512));
    default(h, "type_vocab_size", Value::from(2));
    default(h, "layer_norm_eps", Value::from(1e-12));
    default(h, "pad_token_id", Value::from(if xlmr { 1 } else { 0 }));
    default(h, "position_embedding_type", Value::from("absolute"));
}

/// The classifier's labels as `BertModel.__init__` keeps them: `id2label`
/// sorted by id, or None for transformers' two dummy labels.
fn classifier_labels(m: &Model) -> Result<Option<Vec<String>>> {
    let h = &m.hparams;
    let mut labels: Vec<(u64, String)> = match h.get("id2label") {
        Some(Value::Object(o)) => {
            let mut v = Vec::with_capacity(o.len());
            for (k, l) in o {
                let id = k.parse::<u64>().map_err(|_| {
                    Error::Config(format!("config.json: id2label key {k:?} is not an integer"))
                })?;
                let l = l.as_str().ok_or_else(|| {
                    Error::Config(format!("config.json: id2label[{k}] is not a string"))
                })?;
                v.push((id, l.to_string()));
            }
            v
        }
        Some(Value::Null) | None if m.arch == Arch::NomicBert => return Ok(None),
        Some(Value::Null) | None => {
            // PretrainedConfig makes num_labels (default 2) dummy labels.
            let n = get_u64(h, "num_labels").unwrap_or(2).min(1 << 16);
            (0..n).map(|i| (i, format!("LABEL_{i}"))).collect()
        }
        Some(v) => {
            return Err(Error::Config(format!(
                "config.json: id2label must be an object, got {v}"
            )));
        }
    };
    labels.sort_by_key(|(id, _)| *id);
    if labels.is_empty() || (labels.len() == 2 && labels[0] == (0, "LABEL_0".into())) {
        return Ok(None);
    }
    Ok(Some(labels.into_iter().map(|(_, l)| l).collect()))
}

/// Reads what the Python classes compute in `__init__`: the classifier
/// labels, XLM-R's position offset and nomic-bert's trained context.
pub(super) fn prepare(m: &mut Model) -> Result<()> {
    m.cls_labels = classifier_labels(m)?;
    let h = &mut m.hparams;
    if m.arch == Arch::NomicBert {
        if h.get("moe_every_n_layers")
            .is_some_and(|v| v.as_u64().unwrap_or(1) != 0)
        {
            return Err(Error::Unsupported(
                "nomic-bert mixture-of-experts models (nomic-embed-text-v2-moe) are not supported"
                    .into(),
            ));
        }
        let npos = get_u64(h, "n_positions")
            .ok_or_else(|| Error::Config("config.json: NomicBertModel needs n_positions".into()))?;
        let mtp = get_u64(h, "max_trained_positions").unwrap_or(2048);
        let n_ctx = match (npos, mtp) {
            (8192, 2048) => 2048,
            (2048, 2048) => 512,
            _ => {
                return Err(Error::Unsupported(format!(
                    "config.json: unrecognized parameters n_positions={npos}, \
                     max_trained_positions={mtp} (nomic-embed-text v1/v1.5 have 8192/2048)"
                )));
            }
        };
        h.insert("n_positions".into(), Value::from(n_ctx));
        return Ok(());
    }
    if is_xlmr(&m.hf_arch)
        && let Some(pad) = h.get("pad_token_id").filter(|v| !v.is_null())
    {
        let pad = pad.as_u64().ok_or_else(|| {
            Error::Config(format!(
                "config.json: pad_token_id must be a non-negative integer, got {pad}"
            ))
        })?;
        let offset = pad + 1;
        if let Some(n) = h.get("max_position_embeddings") {
            let n = n.as_u64().filter(|&n| n > offset).ok_or_else(|| {
                Error::Config(format!(
                    "config.json: max_position_embeddings {n} must exceed pad_token_id + 1 = {offset}"
                ))
            })?;
            h.insert("max_position_embeddings".into(), Value::from(n - offset));
        }
        m.position_offset = offset;
    }
    Ok(())
}

/// Refuses what the `bert`/`nomic-bert` graphs would compute differently
/// from the checkpoint (the Python converter asserts most of these).
pub(super) fn check_supported(m: &Model) -> Result<()> {
    let h = &m.hparams;
    let unsupported = |what: String| Err(Error::Unsupported(format!("config.json: {what}")));
    if h.get("classifier_pooling").is_some_and(|v| !v.is_null()) {
        return unsupported(
            "classifier_pooling (pooling before the classifier) is not supported".into(),
        );
    }
    if m.arch == Arch::NomicBert {
        let expect = |key: &str, want: Value| -> Result<()> {
            match h.get(key) {
                Some(v) if *v == want => Ok(()),
                v => Err(Error::Unsupported(format!(
                    "config.json: NomicBertModel needs {key} = {want}, got {}",
                    v.map_or("nothing".to_string(), Value::to_string)
                ))),
            }
        };
        expect("activation_function", Value::from("swiglu"))?;
        expect("causal", Value::Bool(false))?;
        expect("qkv_proj_bias", Value::Bool(false))?;
        expect("mlp_fc1_bias", Value::Bool(false))?;
        expect("mlp_fc2_bias", Value::Bool(false))?;
        expect("prenorm", Value::Bool(false))?;
        expect("rotary_emb_interleaved", Value::Bool(false))?;
        expect("rotary_emb_scale_base", Value::Null)?;
        if h.get("rotary_emb_fraction").and_then(Value::as_f64) != Some(1.0) {
            return unsupported(
                "NomicBertModel needs rotary_emb_fraction = 1.0 (full rotary)".into(),
            );
        }
        if m.cls_labels.is_some() {
            return unsupported("a NomicBertModel with id2label labels is not supported".into());
        }
        return Ok(());
    }
    match h.get("position_embedding_type").and_then(Value::as_str) {
        Some("absolute") => {}
        other => {
            return unsupported(format!(
                "position_embedding_type {other:?} is not supported (only \"absolute\" is)"
            ));
        }
    }
    match h.get("hidden_act").and_then(Value::as_str) {
        Some("gelu") => {}
        other => {
            return unsupported(format!(
                "hidden_act {other:?} is not supported (the bert graph uses exact GELU, \"gelu\")"
            ));
        }
    }
    if h.get("is_decoder") == Some(&Value::Bool(true)) {
        return unsupported("is_decoder is true; only bidirectional encoders are supported".into());
    }
    if is_classifier(&m.hf_arch) {
        match &m.cls_labels {
            Some(l) if l.len() == 1 => {}
            Some(l) => {
                return unsupported(format!(
                    "{} has {} labels; Lamina reranks with a single relevance logit (num_labels = 1)",
                    m.hf_arch,
                    l.len()
                ));
            }
            None => {
                return unsupported(format!(
                    "{} has transformers' two default labels; Lamina reranks with a single \
                     relevance logit (num_labels = 1)",
                    m.hf_arch
                ));
            }
        }
    }
    Ok(())
}

/// `BertModel.set_gguf_parameters` after the base class.
pub(super) fn write_params(m: &Model, b: &mut GgufBuilder) -> Result<()> {
    let a = m.arch.name();
    b.set(format!("{a}.attention.causal"), OwnedValue::Bool(false))?;
    gemma::write_pooling(m, b)?;
    if let Some(labels) = &m.cls_labels {
        b.set(
            format!("{a}.classifier.output_labels"),
            OwnedValue::string_array(labels),
        )?;
    }
    Ok(())
}

/// The renames and skips of the `filter_tensors` overrides (None: skip).
pub(super) fn filter_name(m: &Model, name: &str) -> Option<String> {
    let mut name = name;
    if m.arch == Arch::NomicBert && name.contains("mlp.experts.bias") {
        return None;
    }
    if is_xlmr(&m.hf_arch) {
        name = name.strip_prefix("roberta.").unwrap_or(name);
    }
    name = name.strip_prefix("bert.").unwrap_or(name);
    let mut name = name.to_string();
    if let Some(b) = name.strip_suffix(".gamma") {
        name = format!("{b}.weight");
    }
    if let Some(b) = name.strip_suffix(".beta") {
        name = format!("{b}.bias");
    }
    let pooler = matches!(name.as_str(), "pooler.dense.weight" | "pooler.dense.bias");
    if pooler && m.keep_pooler {
        return Some(name);
    }
    if pooler
        || name == "embeddings.position_ids"
        || name.starts_with("cls.predictions")
        || name.starts_with("cls.seq_relationship")
    {
        return None;
    }
    Some(name)
}

/// gguf-py's `TensorNameMap` for the `bert` and `nomic-bert` tensors.
pub(super) fn map_name(m: &Model, name: &str) -> Option<String> {
    let (base, suffix) = match name.strip_suffix(".weight") {
        Some(b) => (b, ".weight"),
        None => (name.strip_suffix(".bias")?, ".bias"),
    };
    let bert = m.arch == Arch::Bert;
    let mapped = match base {
        "embeddings.word_embeddings" => "token_embd".to_string(),
        "embeddings.token_type_embeddings" => "token_types".into(),
        "embeddings.position_embeddings" => "position_embd".into(),
        "embeddings.LayerNorm" | "emb_ln" => "token_embd_norm".into(),
        // BertForSequenceClassification's single projection (`modify_tensors`).
        "classifier" if bert && m.cls_labels.is_some() => "cls.output".into(),
        "classifier" | "classifier.dense" if bert => "cls".into(),
        "classifier.out_proj" if bert => "cls.output".into(),
        "pooler.dense" if bert && m.keep_pooler => "cls".into(),
        _ => {
            let rest = base
                .strip_prefix("encoder.layer.")
                .or_else(|| base.strip_prefix("encoder.layers."))?;
            let (bid, leaf) = rest.split_once('.')?;
            let bid: u64 = bid.parse().ok()?;
            if bid >= m.block_count {
                return None;
            }
            let leaf = match leaf {
                "attention.self.query" if bert => "attn_q",
                "attention.self.key" if bert => "attn_k",
                "attention.self.value" if bert => "attn_v",
                "attn.Wqkv" => "attn_qkv",
                "attention.output.dense" | "attn.out_proj" => "attn_output",
                "attention.output.LayerNorm" | "norm1" => "attn_output_norm",
                "intermediate.dense" | "mlp.fc11" => "ffn_up",
                "mlp.fc12" if !bert => "ffn_gate",
                "output.dense" | "mlp.fc2" => "ffn_down",
                "output.LayerNorm" | "norm2" => "layer_output_norm",
                _ => return None,
            };
            format!("blk.{bid}.{leaf}")
        }
    };
    Some(format!("{mapped}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::arch::{test_model, written};

    fn config(arch: &str) -> Value {
        serde_json::json!({
            "architectures": [arch], "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 400
        })
    }

    fn nomic() -> Value {
        serde_json::json!({
            "architectures": ["NomicBertModel"], "activation_function": "swiglu", "causal": false,
            "n_embd": 64, "n_head": 4, "n_inner": 96, "n_layer": 2, "n_positions": 8192,
            "max_trained_positions": 2048, "qkv_proj_bias": false, "mlp_fc1_bias": false,
            "mlp_fc2_bias": false, "prenorm": false, "rotary_emb_fraction": 1.0,
            "rotary_emb_interleaved": false, "rotary_emb_scale_base": null,
            "rotary_emb_base": 1000, "layer_norm_epsilon": 1e-12, "type_vocab_size": 2
        })
    }

    #[test]
    fn labels_follow_autoconfig() {
        // No id2label: transformers' two dummy labels, dropped.
        let (_d, m) = test_model(config("BertModel")).unwrap();
        assert_eq!(m.cls_labels, None);
        let mut c = config("BertForSequenceClassification");
        c["id2label"] = serde_json::json!({"0": "LABEL_0"});
        let (_d, m) = test_model(c).unwrap();
        assert_eq!(m.cls_labels.as_deref(), Some(&["LABEL_0".to_string()][..]));
        let kv = written(|b| write_params(&m, b));
        assert_eq!(
            kv[0],
            ("bert.attention.causal".into(), OwnedValue::Bool(false))
        );
        assert_eq!(
            kv[1],
            (
                "bert.classifier.output_labels".into(),
                OwnedValue::string_array(["LABEL_0"])
            )
        );
        // num_labels alone makes LABEL_i names; ids sort numerically.
        let mut c = config("BertModel");
        c["num_labels"] = 1.into();
        assert_eq!(test_model(c).unwrap().1.cls_labels.unwrap(), ["LABEL_0"]);
        let mut c = config("BertModel");
        c["id2label"] = serde_json::json!({"10": "b", "2": "a", "0": "z"});
        assert_eq!(
            test_model(c).unwrap().1.cls_labels.unwrap(),
            ["z", "a", "b"]
        );
    }

    #[test]
    fn unsupported_variants_are_refused() {
        let refused = |c: Value, what: &str| {
            let err = test_model(c).err().expect("refused").to_string();
            assert!(err.contains(what), "{err}");
        };
        let mut c = config("BertModel");
        c["position_embedding_type"] = "relative_key".into();
        refused(c, "position_embedding_type");
        let mut c = config("BertModel");
        c["hidden_act"] = "relu".into();
        refused(c, "hidden_act");
        refused(
            config("BertForSequenceClassification"),
            "two default labels",
        );
        let mut c = config("XLMRobertaForSequenceClassification");
        c["id2label"] = serde_json::json!({"0": "neg", "1": "pos", "2": "neutral"});
        refused(c, "3 labels");
        let mut c = nomic();
        c["rotary_emb_fraction"] = 0.5.into();
        refused(c, "rotary_emb_fraction");
        let mut c = nomic();
        c.as_object_mut().unwrap().remove("causal");
        refused(c, "causal");
        let mut c = nomic();
        c["n_positions"] = 4096.into();
        refused(c, "n_positions=4096");
        let mut c = nomic();
        c["moe_every_n_layers"] = 2.into();
        refused(c, "mixture-of-experts");
    }

    #[test]
    fn xlmr_positions_start_after_padding() {
        let mut c = config("XLMRobertaModel");
        c["max_position_embeddings"] = 514.into();
        let (_d, m) = test_model(c).unwrap();
        // XLMRobertaConfig's pad_token_id is 1: two rows dropped.
        assert_eq!(m.position_offset, 2);
        assert_eq!(m.hparams["max_position_embeddings"], 512);
        let kv = written(|b| m.write_base_params(b, 0));
        assert!(kv.contains(&("bert.context_length".into(), OwnedValue::U32(512))));
        let (_d, m) = test_model(config("BertModel")).unwrap();
        assert_eq!(m.position_offset, 0);
        assert_eq!(m.hparams["type_vocab_size"], 2);
    }

    #[test]
    fn nomic_context_is_the_trained_one() {
        let (_d, m) = test_model(nomic()).unwrap();
        assert_eq!(m.arch.name(), "nomic-bert");
        let kv = written(|b| m.write_params(b, 0));
        assert!(kv.contains(&("nomic-bert.context_length".into(), OwnedValue::U32(2048))));
        assert!(kv.contains(&("nomic-bert.rope.freq_base".into(), OwnedValue::F32(1000.0))));
        assert!(kv.contains(&(
            "nomic-bert.attention.causal".into(),
            OwnedValue::Bool(false)
        )));
    }

    #[test]
    fn tensor_names() {
        let (_d, m) = test_model(config("BertModel")).unwrap();
        let f = |n: &str| m.filter_name(n);
        assert_eq!(
            f("bert.embeddings.LayerNorm.gamma").as_deref(),
            Some("embeddings.LayerNorm.weight")
        );
        assert_eq!(f("embeddings.position_ids"), None);
        assert_eq!(f("bert.pooler.dense.weight"), None);
        assert_eq!(f("cls.predictions.bias"), None);
        let map = |n: &str| m.map_name(n).unwrap();
        assert_eq!(map("embeddings.LayerNorm.bias"), "token_embd_norm.bias");
        assert_eq!(
            map("embeddings.token_type_embeddings.weight"),
            "token_types.weight"
        );
        assert_eq!(
            map("encoder.layer.1.attention.self.key.bias"),
            "blk.1.attn_k.bias"
        );
        assert_eq!(
            map("encoder.layer.0.attention.output.LayerNorm.weight"),
            "blk.0.attn_output_norm.weight"
        );
        assert_eq!(
            map("encoder.layer.0.output.LayerNorm.weight"),
            "blk.0.layer_output_norm.weight"
        );
        assert_eq!(
            map("encoder.layer.1.intermediate.dense.weight"),
            "blk.1.ffn_up.weight"
        );
        assert!(m.map_name("encoder.layer.2.output.dense.weight").is_err());
        assert!(m.map_name("encoder.layer.0.mlp.fc12.weight").is_err());

        // A one-label BERT classifier is the direct projection cls.output;
        // `bert_pooler` keeps the pooler as cls.
        let mut c = config("BertForSequenceClassification");
        c["num_labels"] = 1.into();
        let (_d, mut m) = test_model(c).unwrap();
        assert_eq!(
            m.map_name("classifier.weight").unwrap(),
            "cls.output.weight"
        );
        assert_eq!(m.filter_name("bert.pooler.dense.bias"), None);
        m.keep_pooler = true;
        assert_eq!(
            m.filter_name("bert.pooler.dense.bias").as_deref(),
            Some("pooler.dense.bias")
        );
        assert_eq!(m.map_name("pooler.dense.bias").unwrap(), "cls.bias");

        let mut c = config("XLMRobertaForSequenceClassification");
        c["num_labels"] = 1.into();
        let (_d, m) = test_model(c).unwrap();
        assert_eq!(
            m.filter_name("roberta.encoder.layer.0.output.dense.weight")
                .as_deref(),
            Some("encoder.layer.0.output.dense.weight")
        );
        assert_eq!(m.map_name("classifier.dense.weight").unwrap(), "cls.weight");
        assert_eq!(
            m.map_name("classifier.out_proj.bias").unwrap(),
            "cls.output.bias"
        );

        let (_d, m) = test_model(nomic()).unwrap();
        let map = |n: &str| m.map_name(n).unwrap();
        assert_eq!(map("emb_ln.weight"), "token_embd_norm.weight");
        assert_eq!(
            map("encoder.layers.1.attn.Wqkv.weight"),
            "blk.1.attn_qkv.weight"
        );
        assert_eq!(
            map("encoder.layers.0.mlp.fc11.weight"),
            "blk.0.ffn_up.weight"
        );
        assert_eq!(
            map("encoder.layers.0.mlp.fc12.weight"),
            "blk.0.ffn_gate.weight"
        );
        assert_eq!(
            map("encoder.layers.0.mlp.fc2.weight"),
            "blk.0.ffn_down.weight"
        );
        assert_eq!(
            map("encoder.layers.0.norm1.bias"),
            "blk.0.attn_output_norm.bias"
        );
        assert_eq!(
            map("encoder.layers.0.norm2.weight"),
            "blk.0.layer_output_norm.weight"
        );
        assert!(
            m.map_name("encoder.layers.0.attention.self.query.weight")
                .is_err()
        );
    }

    #[test]
    fn pooling_from_the_sentence_transformers_folder() {
        let (dir, m) = test_model(config("BertModel")).unwrap();
        // No modules.json: no pooling type, as the Python converter.
        assert!(
            !written(|b| write_params(&m, b))
                .iter()
                .any(|(k, _)| k.contains("pooling"))
        );
        std::fs::write(
            dir.path().join("modules.json"),
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#,
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        let pooling = |cfg: &str| {
            std::fs::write(dir.path().join("1_Pooling/config.json"), cfg).unwrap();
            let mut b = GgufBuilder::new();
            write_params(&m, &mut b).map(|()| b.metadata().to_vec())
        };
        let kv = pooling(r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#)
            .unwrap();
        assert!(kv.contains(&("bert.pooling_type".into(), OwnedValue::U32(2))));
        let kv = pooling(r#"{"pooling_mode_mean_tokens": true}"#).unwrap();
        assert!(kv.contains(&("bert.pooling_type".into(), OwnedValue::U32(1))));
        let kv = pooling(r#"{"pooling_mode": "lasttoken"}"#).unwrap();
        assert!(kv.contains(&("bert.pooling_type".into(), OwnedValue::U32(3))));
        let err = pooling(r#"{"pooling_mode_max_tokens": true}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("only mean, CLS and last-token"), "{err}");
    }
}
