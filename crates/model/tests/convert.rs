//! `lamina_model::convert` against llama.cpp's Python converter (gold in
//! testdata/convert/) and on small checkpoints the tests build themselves.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::summary::{hex, summarise};
use lamina_gguf::{GgmlType, Gguf};
use lamina_model::convert::{ConvertOptions, OutType, Progress, convert};
use lamina_testkit::models_dir;
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

/// The EmbeddingGemma checkpoint folder; fails (never skips) when missing.
fn embeddinggemma_dir() -> PathBuf {
    let dir = models_dir().join("embeddinggemma-300m");
    assert!(
        dir.join("model.safetensors").is_file() && dir.join("tokenizer.model").is_file(),
        "EmbeddingGemma checkpoint not found at {}: run `cargo xtask models` \
         (or set LAMINA_MODELS to the folder holding embeddinggemma-300m/)",
        dir.display()
    );
    dir
}

fn compare_with_gold(ours: &Json, gold: &Json) {
    let om = ours["metadata"].as_array().unwrap();
    let gm = gold["metadata"].as_array().unwrap();
    let okeys: Vec<&str> = om.iter().map(|m| m["key"].as_str().unwrap()).collect();
    let gkeys: Vec<&str> = gm.iter().map(|m| m["key"].as_str().unwrap()).collect();
    assert_eq!(
        okeys, gkeys,
        "metadata keys (in file order) differ from the Python converter's"
    );
    for (o, g) in om.iter().zip(gm) {
        assert_eq!(o, g, "metadata {} differs", g["key"]);
    }
    let ot = ours["tensors"].as_array().unwrap();
    let gt = gold["tensors"].as_array().unwrap();
    assert_eq!(ot.len(), gt.len(), "tensor count");
    for (o, g) in ot.iter().zip(gt) {
        assert_eq!(o, g, "tensor {} differs", g["name"]);
    }
}

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/convert")
        .join(name)
}

fn opts(input: &Path, output: &Path, out_type: OutType) -> ConvertOptions {
    ConvertOptions {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        out_type,
        dense_modules: true,
        bert_pooler: false,
        model_id: None,
    }
}

#[test]
fn embeddinggemma_f32_matches_python_converter() {
    let dir = embeddinggemma_dir();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eg.gguf");
    let start = std::time::Instant::now();
    let summary = convert(&opts(&dir, &out, OutType::F32), &mut |_| {}).unwrap();
    eprintln!(
        "converted EmbeddingGemma in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(summary.arch, "gemma-embedding");
    assert!(!tmp.path().join("eg.gguf.tmp").exists());
    let gold: Json = serde_json::from_slice(
        &std::fs::read(testdata("embeddinggemma-300m-f32.gold.json")).unwrap(),
    )
    .unwrap();
    compare_with_gold(&summarise(&out), &gold);

    let g = Gguf::open(&out).unwrap();
    assert_eq!(g.get_u32("gemma-embedding.block_count").unwrap(), 24);
    assert_eq!(
        g.get_u32("gemma-embedding.attention.sliding_window")
            .unwrap(),
        512
    );
    assert_eq!(g.get_u32("gemma-embedding.pooling_type").unwrap(), 1);
    assert_eq!(g.tensor("dense_2.weight").unwrap().shape, [768, 3072]);
    assert_eq!(g.tensor("dense_3.weight").unwrap().shape, [3072, 768]);
}

// ---------------------------------------------------------------------------
// Small synthetic checkpoints.

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
}

/// Writes `model.safetensors` with random tensors in `dtype`; returns the
/// f32 value of each element.
fn write_safetensors(
    dir: &Path,
    tensors: &[(String, Vec<usize>)],
    dtype: safetensors::Dtype,
) -> HashMap<String, Vec<f32>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut values = HashMap::new();
    let mut bytes: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, shape) in tensors {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| rng.next()).collect();
        let (vals, data): (Vec<f32>, Vec<u8>) = if dtype == safetensors::Dtype::BF16 {
            let v: Vec<f32> = vals
                .iter()
                .map(|&x| half::bf16::from_f32(x).to_f32())
                .collect();
            let d = v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect();
            (v, d)
        } else {
            let d = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
            (vals, d)
        };
        values.insert(name.clone(), vals);
        bytes.push((name.clone(), shape.clone(), data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(dtype, s.clone(), d).unwrap(),
            )
        })
        .collect();
    let data = safetensors::serialize(views, None).unwrap();
    std::fs::write(dir.join("model.safetensors"), data).unwrap();
    values
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn tiny_gemma3_causal_lm() {
    let eg = embeddinggemma_dir();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny-gemma3");
    std::fs::create_dir(&dir).unwrap();
    for f in [
        "tokenizer.model",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        std::fs::copy(eg.join(f), dir.join(f)).unwrap();
    }
    let (hidden, ff, layers, heads, kv, head_dim, vocab) = (32, 48, 2, 2, 1, 16, 262144);
    let config = json!({
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": hidden, "intermediate_size": ff, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "sliding_window": 512, "vocab_size": vocab,
        "final_logit_softcapping": null, "attn_logit_softcapping": null,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, hidden]),
        ("model.norm.weight".into(), vec![hidden]),
    ];
    for l in 0..layers {
        for (n, s) in [
            ("input_layernorm.weight", vec![hidden]),
            ("post_attention_layernorm.weight", vec![hidden]),
            ("pre_feedforward_layernorm.weight", vec![hidden]),
            ("post_feedforward_layernorm.weight", vec![hidden]),
            ("self_attn.q_norm.weight", vec![head_dim]),
            ("self_attn.k_norm.weight", vec![head_dim]),
            ("self_attn.q_proj.weight", vec![heads * head_dim, hidden]),
            ("self_attn.k_proj.weight", vec![kv * head_dim, hidden]),
            ("self_attn.v_proj.weight", vec![kv * head_dim, hidden]),
            ("self_attn.o_proj.weight", vec![hidden, heads * head_dim]),
            ("mlp.gate_proj.weight", vec![ff, hidden]),
            ("mlp.up_proj.weight", vec![ff, hidden]),
            ("mlp.down_proj.weight", vec![hidden, ff]),
        ] {
            tensors.push((format!("model.layers.{l}.{n}"), s));
        }
    }
    let values = write_safetensors(&dir, &tensors, safetensors::Dtype::BF16);
    let out = tmp.path().join("g.gguf");
    convert(&opts(&dir, &out, OutType::F16), &mut |_| {}).unwrap();
    let g = Gguf::open(&out).unwrap();
    assert_eq!(g.architecture().unwrap(), "gemma3");
    assert_eq!(g.get_u32("gemma3.block_count").unwrap(), 2);
    assert_eq!(g.get_u32("gemma3.context_length").unwrap(), 32768);
    assert_eq!(g.get_u32("gemma3.attention.head_count_kv").unwrap(), 1);
    assert_eq!(g.get_u32("gemma3.attention.key_length").unwrap(), 16);
    assert_eq!(g.get_u32("gemma3.attention.sliding_window").unwrap(), 512);
    assert_eq!(g.get_f32("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(g.get_f32("gemma3.rope.freq_base_swa").unwrap(), 1e4);
    assert_eq!(g.get_u32("general.file_type").unwrap(), 1);
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "llama");
    assert_eq!(g.get_array("tokenizer.ggml.tokens").unwrap().len(), vocab);
    assert!(!g.get_bool("tokenizer.ggml.add_space_prefix").unwrap());
    assert_eq!(g.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 2);
    assert_eq!(g.tensors().len(), 2 + 13 * layers);
    // Norms: f32 and 1 + w.
    let (info, data) = g
        .tensor_by_name("blk.1.post_attention_norm.weight")
        .unwrap();
    assert_eq!(info.ggml_type, GgmlType::F32);
    let want: Vec<f32> = values["model.layers.1.post_attention_layernorm.weight"]
        .iter()
        .map(|w| w + 1.0)
        .collect();
    assert_eq!(f32s(data), want);
    // Matrices: f16 of the bf16 source, shape reversed.
    let (info, data) = g.tensor_by_name("blk.0.ffn_gate.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::F16);
    assert_eq!(info.shape, [hidden as u64, ff as u64]);
    let got: Vec<f32> = data
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    let want: Vec<f32> = values["model.layers.0.mlp.gate_proj.weight"]
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32())
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        g.tensor("token_embd.weight").unwrap().shape,
        [hidden as u64, vocab as u64]
    );
}

const LLAMA3_REGEX: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// A byte-level BPE tokenizer.json in the Llama 3 style; returns vocab_size.
fn tiny_bpe_tokenizer(dir: &Path) -> usize {
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["a", "b", "c", "Ġ", "ab", "Ġa", "abc"].iter().enumerate() {
        vocab.insert(t.to_string(), json!(i));
    }
    let tok = json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 7, "content": "<|begin_of_text|>", "special": true, "normalized": false},
            {"id": 8, "content": "<|end_of_text|>", "special": true, "normalized": false}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {}}
        ]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"], ["Ġ", "a"], ["ab", "c"]]}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let tc = json!({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                    "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    10
}

#[test]
fn tiny_llama_permutes_q_and_k() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny-llama");
    std::fs::create_dir(&dir).unwrap();
    let vocab = tiny_bpe_tokenizer(&dir);
    let (hidden, ff, layers, heads, kv) = (16usize, 24usize, 2usize, 4usize, 2usize);
    let head_dim = hidden / heads;
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": ff, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": vocab,
        "tie_word_embeddings": true, "bos_token_id": 7, "eos_token_id": 8
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, hidden]),
        ("model.norm.weight".into(), vec![hidden]),
    ];
    for l in 0..layers {
        for (n, s) in [
            ("input_layernorm.weight", vec![hidden]),
            ("post_attention_layernorm.weight", vec![hidden]),
            ("self_attn.q_proj.weight", vec![heads * head_dim, hidden]),
            ("self_attn.k_proj.weight", vec![kv * head_dim, hidden]),
            ("self_attn.v_proj.weight", vec![kv * head_dim, hidden]),
            ("self_attn.o_proj.weight", vec![hidden, hidden]),
            ("mlp.gate_proj.weight", vec![ff, hidden]),
            ("mlp.up_proj.weight", vec![ff, hidden]),
            ("mlp.down_proj.weight", vec![hidden, ff]),
        ] {
            tensors.push((format!("model.layers.{l}.{n}"), s));
        }
    }
    let values = write_safetensors(&dir, &tensors, safetensors::Dtype::F32);
    let out = tmp.path().join("l.gguf");
    convert(&opts(&dir, &out, OutType::F32), &mut |_| {}).unwrap();
    let g = Gguf::open(&out).unwrap();
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_u32("llama.vocab_size").unwrap(), vocab as u32);
    assert_eq!(
        g.get_u32("llama.rope.dimension_count").unwrap(),
        head_dim as u32
    );
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 500000.0);
    assert_eq!(
        g.get_u32("llama.attention.head_count_kv").unwrap(),
        kv as u32
    );
    assert_eq!(
        g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "llama-bpe");
    assert_eq!(g.get_array("tokenizer.ggml.merges").unwrap().len(), 3);
    let types = g
        .get_array("tokenizer.ggml.token_type")
        .unwrap()
        .to_i64_vec()
        .unwrap();
    assert_eq!(types, [1, 1, 1, 1, 1, 1, 1, 3, 3, 5]);
    let toks: Vec<Vec<u8>> = g
        .get_array("tokenizer.ggml.tokens")
        .unwrap()
        .strings()
        .unwrap()
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(toks[9], b"[PAD9]");
    assert_eq!(g.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 7);
    assert_eq!(g.get_u32("tokenizer.ggml.eos_token_id").unwrap(), 8);
    assert!(g.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert!(!g.get_bool("tokenizer.ggml.add_eos_token").unwrap());
    assert!(
        g.get_str("tokenizer.chat_template")
            .unwrap()
            .contains("messages")
    );
    // Tied embeddings: no output.weight; post_attention_layernorm is ffn_norm.
    assert!(g.tensor("output.weight").is_none());
    assert_eq!(
        g.tensor("blk.0.ffn_norm.weight").unwrap().shape,
        [hidden as u64]
    );
    // Q/K permutation: llama.cpp's `LlamaModel.permute`, applied to this
    // very checkpoint by testdata/convert/make_tiny_llama_gold.py.
    let gold: Json =
        serde_json::from_slice(&std::fs::read(testdata("tiny-llama-qk.gold.json")).unwrap())
            .unwrap();
    let f32_sha = |v: &[f32]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        hex(&bytes)
    };
    let entries = gold["tensors"].as_array().unwrap();
    assert_eq!(entries.len(), 2 * layers, "a q and a k per layer");
    for e in entries {
        let (name, hf) = (e["gguf"].as_str().unwrap(), e["hf"].as_str().unwrap());
        assert_eq!(
            f32_sha(&values[hf]),
            e["source_sha256"].as_str().unwrap(),
            "{hf}: this checkpoint is not the gold's (rerun make_tiny_llama_gold.py)"
        );
        let ours = f32s(g.tensor_by_name(name).unwrap().1);
        assert_ne!(ours, values[hf], "{name}: not permuted");
        assert_eq!(
            f32_sha(&ours),
            e["sha256"].as_str().unwrap(),
            "{name}: differs from convert_hf_to_gguf.py's permutation"
        );
    }
    let v = g.tensor_by_name("blk.1.attn_v.weight").unwrap().1;
    assert_eq!(f32s(v), values["model.layers.1.self_attn.v_proj.weight"]);
}

#[test]
fn helpful_errors_and_no_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.gguf");
    let run = |dir: &Path| {
        convert(&opts(dir, &out, OutType::F32), &mut |_| {})
            .unwrap_err()
            .to_string()
    };
    let dir = tmp.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    assert!(run(&dir).contains("no config.json"));
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["MambaForCausalLM"], "num_hidden_layers": 1}"#,
    )
    .unwrap();
    assert!(run(&dir).contains("MambaForCausalLM"));
    std::fs::write(dir.join("config.json"), "{not json").unwrap();
    assert!(run(&dir).contains("invalid JSON"));
    std::fs::write(
        dir.join("config.json"),
        json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "hidden_size": 8,
               "num_attention_heads": 2, "vocab_size": 10})
        .to_string(),
    )
    .unwrap();
    assert!(run(&dir).contains("no model*.safetensors"));
    std::fs::write(
        dir.join("model.safetensors"),
        b"\xff\xff\xff\xff\xff\xff\xff\xffjunk",
    )
    .unwrap();
    assert!(run(&dir).contains("not a valid safetensors"));
    tiny_bpe_tokenizer(&dir);
    write_safetensors(
        &dir,
        &[
            ("model.embed_tokens.weight".into(), vec![10, 8]),
            ("model.layers.0.mystery.weight".into(), vec![8]),
        ],
        safetensors::Dtype::F32,
    );
    let e = run(&dir);
    assert!(
        e.contains("cannot map tensor") && e.contains("mystery"),
        "{e}"
    );
    assert!(!out.exists() && !tmp.path().join("x.gguf.tmp").exists());
    let q = opts(&dir, &out, OutType::parse("q8_0").unwrap());
    let e = convert(&q, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("mystery"), "{e}");
    assert!(!out.exists() && !tmp.path().join("x.gguf.tmp").exists());
    let e = OutType::parse("q9_k").unwrap_err().to_string();
    assert!(e.contains("q9_k") && e.contains("q4_k_m"), "{e}");
}

/// `--type q4_k_m` is conversion to f32 then `lamina quantize`, so the file
/// is the one llama-quantize makes from the f32 conversion (gold in
/// testdata/quantize), and no intermediate file is left behind.
#[test]
fn embeddinggemma_to_a_quantize_target_equals_llama_quantize() {
    let gold = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/quantize/llama-quantize.sha256"),
    )
    .unwrap();
    let want = gold
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 3 && f[0] == "embeddinggemma-300m-F32.gguf" && f[1] == "Q4_K_M")
        .map(|f| f[2].to_string())
        .expect("a Q4_K_M line for EmbeddingGemma in llama-quantize.sha256");
    let dir = embeddinggemma_dir();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eg.gguf");
    let mut quantized = 0;
    convert(
        &opts(&dir, &out, OutType::parse("Q4_K_M").unwrap()),
        &mut |p| {
            if let Progress::Quantize { .. } = p {
                quantized += 1;
            }
        },
    )
    .unwrap();
    assert!(quantized > 300, "{quantized} quantize progress reports");
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(&out).unwrap(), &mut h).unwrap();
    let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got, want, "bytes differ from llama-quantize's");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("eg.gguf")]);
}
