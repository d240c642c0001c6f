//! EmbeddingGemma-300M end to end against llama.cpp's `llama-embedding` (same
//! GGUF file) and the PyTorch sentence-transformers F32 reference of the
//! original checkpoint, on the texts of `testdata/embed/` (gold made by
//! `testdata/embed/make_gold.py`; commands in its README).
//!
//! Model files are read from the models directory (`LAMINA_MODELS`) and must
//! be the files the gold was made from (their SHA-256s are in `gold.json`):
//! under `cargo xtask test` a missing or different file fails the test; a
//! plain `cargo test` skips it, saying so. Run with `--nocapture` to see the
//! figures.

mod common;
#[path = "../../../testdata/embed/thresholds.rs"]
mod thresholds;

use std::path::PathBuf;

use lamina_kernels::pool::Rayon;
use lamina_model::embed::{DOCUMENT_PREFIX, EmbedOptions, Embedder, QUERY_PREFIX, cosine};
use serde_json::Value;
use thresholds::min_mean;

const DIM: usize = 768;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/embed")
        .join(file)
}

/// `embeddinggemma-300m-{quant}.gguf` if it is the file llama.cpp's gold was
/// made from (the SHA-256 `testdata/embed/gold.json` records for
/// `llamacpp-{quant}`); else `None` after `common::skip_or_fail`.
fn gold_file(quant: &str) -> Option<PathBuf> {
    let gold: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gold.json")).unwrap()).unwrap();
    let source = &gold["sources"][format!("llamacpp-{quant}")];
    let want = source["sha256"]
        .as_str()
        .unwrap_or_else(|| panic!("gold.json has no sha256 for llamacpp-{quant}"));
    let name = source["file"].as_str().expect("gold.json: file");
    assert_eq!(name, format!("embeddinggemma-300m-{quant}.gguf"));
    common::pinned_model(name, want, "testdata/embed/gold.json")
}

struct Text {
    id: String,
    prefix: String,
    text: String,
}

struct Gold {
    texts: Vec<Text>,
    llama_ids: Vec<Vec<u32>>,
    hf_ids: Vec<Vec<u32>>,
}

fn gold() -> Gold {
    let texts: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("texts.json")).unwrap()).unwrap();
    let gold: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("gold.json")).unwrap()).unwrap();
    let texts: Vec<Text> = texts
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Text {
            id: t["id"].as_str().unwrap().to_string(),
            prefix: t["prefix"].as_str().unwrap().to_string(),
            text: t["text"].as_str().unwrap().to_string(),
        })
        .collect();
    let gold_ids: Vec<&str> = gold["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let text_ids: Vec<&str> = texts.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(gold_ids, text_ids, "gold.json is stale: rerun make_gold.py");
    assert!(texts.len() >= 20);
    Gold {
        llama_ids: common::id_lists(&gold["llama_ids"]),
        hf_ids: common::id_lists(&gold["hf_ids"]),
        texts,
    }
}

/// `n_texts × 768` vectors from `<source>.f32`.
fn vectors(source: &str, n: usize) -> Vec<Vec<f32>> {
    common::f32_rows(&testdata(&format!("{source}.f32")), n, DIM)
}

/// Embeds every gold text with `quant`'s file (all in one call, several texts
/// per forward) and returns the vectors.
fn embed_all(path: &PathBuf, g: &Gold) -> Vec<Vec<f32>> {
    let mut e = Embedder::open(path).expect("load model");
    let opts = EmbedOptions::default();
    let seqs: Vec<Vec<u32>> = g
        .texts
        .iter()
        .map(|t| {
            let o = EmbedOptions {
                prefix: t.prefix.clone(),
                ..opts.clone()
            };
            e.tokenize(&t.text, &o).expect("tokenize")
        })
        .collect();
    for ((t, ours), theirs) in g.texts.iter().zip(&seqs).zip(&g.llama_ids) {
        assert_eq!(
            ours, theirs,
            "{}: token ids differ from llama-tokenize",
            t.id
        );
    }
    e.embed_ids(&seqs, &opts, &Rayon)
        .expect("embed")
        .into_iter()
        .map(|x| x.vector)
        .collect()
}

/// Checks one file against llama.cpp on the same file and against PyTorch,
/// with the thresholds of `testdata/embed/thresholds.rs` (which `cargo xtask
/// validate` uses too): on F32 every text matches both; on a quantized file
/// our min and mean cosine to llama.cpp are no worse than llama.cpp's own
/// between its runs (flash attention off, the AVX-512 build) less a slack,
/// and our mean cosine to PyTorch no worse than llama.cpp's less a slack.
fn check(quant: &str) {
    let Some(path) = gold_file(quant) else { return };
    let g = gold();
    let n = g.texts.len();
    let ids: Vec<&str> = g.texts.iter().map(|t| t.id.as_str()).collect();
    let ours = embed_all(&path, &g);
    let llama = vectors(&format!("llamacpp-{quant}"), n);
    let torch = vectors("pytorch-F32", n);
    let cos = |a: &[Vec<f32>], b: &[Vec<f32>]| -> Vec<f64> {
        a.iter().zip(b).map(|(x, y)| cosine(x, y)).collect()
    };

    let vs_llama = cos(&ours, &llama);
    let vs_torch = cos(&ours, &torch);
    let llama_vs_torch = cos(&llama, &torch);
    // llama.cpp's other runs of a quantized file: (name, its cosine to the
    // gold run, ours to it), per text.
    let others: Vec<(&str, Vec<f64>, Vec<f64>)> = if quant == "F32" {
        Vec::new()
    } else {
        thresholds::SPREAD_RUNS
            .into_iter()
            .map(|(suffix, name)| {
                let v = vectors(&format!("llamacpp-{quant}-{suffix}"), n);
                (name, cos(&v, &llama), cos(&ours, &v))
            })
            .collect()
    };
    let mut header = String::new();
    for (name, _, _) in &others {
        header += &format!(", {name}~llama.cpp, ours~{name}");
    }
    println!("{quant}: per text cosine: ours~llama.cpp, ours~PyTorch, llama.cpp~PyTorch{header}");
    for (i, t) in g.texts.iter().enumerate() {
        let mut row = format!(
            "  {:<18} {:>4} tokens  {:.7}  {:.7}  {:.7}",
            t.id,
            g.llama_ids[i].len(),
            vs_llama[i],
            vs_torch[i],
            llama_vs_torch[i]
        );
        for (_, theirs, ours) in &others {
            row += &format!("  {:.7}  {:.7}", theirs[i], ours[i]);
        }
        println!("{row}");
    }
    let (l_min, l_mean) = min_mean(&vs_llama);
    let (t_min, t_mean) = min_mean(&vs_torch);
    let (r_min, r_mean) = min_mean(&llama_vs_torch);
    print!(
        "FIGURES | {quant:<6} | ours~llama.cpp min {l_min:.7} mean {l_mean:.7} | ours~PyTorch min {t_min:.7} mean {t_mean:.7} | llama.cpp~PyTorch min {r_min:.7} mean {r_mean:.7} |"
    );
    for (name, theirs, ours) in &others {
        let (s_min, s_mean) = min_mean(theirs);
        let (o_min, o_mean) = min_mean(ours);
        print!(
            " {name}~llama.cpp min {s_min:.7} mean {s_mean:.7} | ours~{name} min {o_min:.7} mean {o_mean:.7} |"
        );
    }
    println!();
    let spreads: Vec<Vec<f64>> = others.iter().map(|(_, s, _)| s.clone()).collect();
    let floor_llama = thresholds::vs_llama(quant, &spreads).unwrap();
    let floor_torch = thresholds::vs_pytorch(quant, &llama_vs_torch);
    println!(
        "{quant}: thresholds: to llama.cpp {}; to PyTorch {}",
        floor_llama.describe(),
        floor_torch.describe()
    );
    let mut failures = floor_llama.shortfalls("cosine to llama.cpp", &vs_llama, &ids);
    failures.extend(floor_torch.shortfalls("cosine to PyTorch", &vs_torch, &ids));
    assert!(failures.is_empty(), "{quant}:\n{}", failures.join("\n"));
}

#[test]
fn f32_matches_llama_cpp_and_pytorch() {
    check("F32");
}

#[test]
fn q8_0_matches_llama_cpp_and_pytorch() {
    check("Q8_0");
}

#[test]
fn q6_k_matches_llama_cpp_and_pytorch() {
    check("Q6_K");
}

#[test]
fn q4_k_m_matches_llama_cpp_and_pytorch() {
    check("Q4_K_M");
}

/// The thresholds the gold gives, as `testdata/embed/thresholds.rs` derives
/// them from llama.cpp's own runs: every figure here is computed from the
/// committed gold vectors, no model needed.
#[test]
fn quantized_thresholds_come_from_llama_cpp_s_own_spread() {
    let n = gold().texts.len();
    for quant in ["Q8_0", "Q6_K", "Q4_K_M"] {
        let gold_run = vectors(&format!("llamacpp-{quant}"), n);
        let spreads: Vec<Vec<f64>> = thresholds::SPREAD_RUNS
            .iter()
            .map(|(suffix, _)| {
                let other = vectors(&format!("llamacpp-{quant}-{suffix}"), n);
                other
                    .iter()
                    .zip(&gold_run)
                    .map(|(a, b)| cosine(a, b))
                    .collect()
            })
            .collect();
        let f = thresholds::vs_llama(quant, &spreads).unwrap();
        let lowest = spreads
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        assert_eq!(f.min, lowest - thresholds::MIN_SLACK, "{quant}");
        // llama.cpp's runs disagree with each other beyond any float noise,
        // yet stay close: the floors sit between 0.99 and 1.
        assert!(f.min > 0.99 && f.min < 0.999, "{quant}: {f:?}");
        assert!(f.mean > f.min && f.mean < 0.9999, "{quant}: {f:?}");
    }
    assert!(thresholds::vs_llama("Q8_0", &[]).is_err());
    assert_eq!(
        thresholds::vs_llama("F32", &[]).unwrap().min,
        thresholds::F32_VS_LLAMA
    );
}

/// The original tokenizer (Hugging Face, as sentence-transformers runs it)
/// gives the same ids as llama.cpp on every gold text, so the PyTorch
/// comparison is of the same input.
#[test]
fn gold_tokens_agree_between_llama_cpp_and_hugging_face() {
    let g = gold();
    for (i, t) in g.texts.iter().enumerate() {
        assert_eq!(g.llama_ids[i], g.hf_ids[i], "{}", t.id);
    }
}

/// `dim` keeps the first values of the full vector, re-normalised.
#[test]
fn matryoshka_dim_is_truncated_full_vector_renormalised() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    let mut e = Embedder::open(&path).unwrap();
    let texts = [
        "The quick brown fox jumps over the lazy dog.",
        "机器学习是人工智能的一个分支。",
        "fn main() { println!(\"hi\"); }",
    ];
    let full = e.embed(&texts, &EmbedOptions::default(), &Rayon).unwrap();
    for dim in [512, 256, 128] {
        let opts = EmbedOptions {
            dim: Some(dim),
            ..Default::default()
        };
        let cut = e.embed(&texts, &opts, &Rayon).unwrap();
        for (f, c) in full.iter().zip(&cut) {
            assert_eq!(c.vector.len(), dim);
            assert_eq!(c.n_tokens, f.n_tokens);
            let head = &f.vector[..dim];
            let norm = head
                .iter()
                .map(|&x| x as f64 * x as f64)
                .sum::<f64>()
                .sqrt();
            let norm_c = c.vector.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
            assert!((norm_c - 1.0).abs() < 1e-5, "dim {dim}: |v|² = {norm_c}");
            for (a, b) in head.iter().zip(&c.vector) {
                assert!(
                    ((*a as f64 / norm) - *b as f64).abs() < 1e-6,
                    "dim {dim}: {a}/{norm} vs {b}"
                );
            }
        }
    }
    for bad in [0, DIM + 1] {
        let opts = EmbedOptions {
            dim: Some(bad),
            ..Default::default()
        };
        assert!(e.embed(&texts[..1], &opts, &Rayon).is_err(), "dim {bad}");
    }
}

/// The task prompts give the token prefixes llama-tokenize gives the same
/// strings (`llama-tokenize -m embeddinggemma-300m-Q8_0.gguf -f P --no-escape
/// --ids --log-disable` on "task: search result | query: hello" and
/// "title: none | text: hello").
#[test]
fn task_prefixes_give_the_documented_tokens() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    let e = Embedder::open(&path).unwrap();
    let with = |prefix: &str| EmbedOptions {
        prefix: prefix.to_string(),
        ..Default::default()
    };
    assert_eq!(QUERY_PREFIX, "task: search result | query: ");
    assert_eq!(DOCUMENT_PREFIX, "title: none | text: ");
    assert_eq!(
        e.tokenize("hello", &with(QUERY_PREFIX)).unwrap(),
        [2, 8071, 236787, 3927, 1354, 1109, 7609, 236787, 29104, 1]
    );
    assert_eq!(
        e.tokenize("hello", &with(DOCUMENT_PREFIX)).unwrap(),
        [2, 3250, 236787, 7293, 1109, 1816, 236787, 29104, 1]
    );
    assert_eq!(
        e.tokenize("hello", &with("")).unwrap(),
        [2, 23391, 1],
        "no task: BOS, text, EOS"
    );
    // A custom prefix is plain text in front of the input.
    let custom = "task: classification | query: ";
    assert_eq!(
        e.tokenize("hello", &with(custom)).unwrap(),
        e.tokenize(&format!("{custom}hello"), &with("")).unwrap()
    );
}
