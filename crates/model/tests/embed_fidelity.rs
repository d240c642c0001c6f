//! EmbeddingGemma-300M end to end against llama.cpp's `llama-embedding` (same
//! GGUF file) and the PyTorch sentence-transformers F32 reference of the
//! original checkpoint, on the texts of `testdata/embed/` (gold made by
//! `testdata/embed/make_gold.py`; commands in its README).
//!
//! Model files are read from the models directory (`LAMINA_MODELS`); a test
//! whose file is absent says so on stderr and passes without checking.
//! Run with `--nocapture` to see the figures.

use std::path::PathBuf;

use lamina_kernels::pool::Rayon;
use lamina_model::embed::{DOCUMENT_PREFIX, EmbedOptions, Embedder, QUERY_PREFIX, cosine};
use serde_json::Value;

const DIM: usize = 768;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/embed")
        .join(file)
}

/// The model file `embeddinggemma-300m-{quant}.gguf`, or `None` (with a note)
/// when it is not in the models directory.
fn model(quant: &str) -> Option<PathBuf> {
    let path = lamina_gguf::models_dir().join(format!("embeddinggemma-300m-{quant}.gguf"));
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is missing (run `cargo xtask models`, or set LAMINA_MODELS)",
            path.display()
        );
        None
    }
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

fn ids(v: &Value) -> Vec<Vec<u32>> {
    v.as_array()
        .expect("id lists")
        .iter()
        .map(|l| {
            l.as_array()
                .expect("id list")
                .iter()
                .map(|x| x.as_u64().expect("id") as u32)
                .collect()
        })
        .collect()
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
        llama_ids: ids(&gold["llama_ids"]),
        hf_ids: ids(&gold["hf_ids"]),
        texts,
    }
}

/// `n_texts × 768` vectors from `<source>.f32`.
fn vectors(source: &str, n: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(testdata(&format!("{source}.f32"))).unwrap();
    assert_eq!(bytes.len(), n * DIM * 4, "{source}.f32 has the wrong size");
    bytes
        .chunks_exact(DIM * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect()
}

fn min_mean(xs: &[f64]) -> (f64, f64) {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    (min, xs.iter().sum::<f64>() / xs.len() as f64)
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

/// Checks one file against llama.cpp on the same file and against PyTorch.
///
/// `floor`: every text's cosine to llama.cpp is at least this. On quantized
/// files, also: our agreement with llama.cpp (min and mean over the texts) is
/// no worse than llama.cpp's agreement with itself between its two attention
/// paths (flash attention off vs on: `llamacpp-*-fa-off`), less `slack`; and
/// our mean cosine to PyTorch is at most 0.0005 below llama.cpp's.
///
/// It also prints how far llama.cpp moves between its own builds: the same
/// commit and command built on an AVX-512 machine (`llamacpp-*-avx512`)
/// against the gold's AVX2 build, and our cosine to each of llama.cpp's runs.
fn check(quant: &str, floor: f64) {
    let Some(path) = model(quant) else { return };
    let g = gold();
    let n = g.texts.len();
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
        [("FA off", "fa-off"), ("AVX-512 build", "avx512")]
            .into_iter()
            .map(|(name, suffix)| {
                let v = vectors(&format!("llamacpp-{quant}-{suffix}"), n);
                (name, cos(&v, &llama), cos(&ours, &v))
            })
            .collect()
    };
    let mut header = String::new();
    for (name, _, _) in &others {
        header += &format!(", llama.cpp {name}~llama.cpp, ours~llama.cpp {name}");
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
            " llama.cpp {name}~llama.cpp min {s_min:.7} mean {s_mean:.7} | ours~llama.cpp {name} min {o_min:.7} mean {o_mean:.7} |"
        );
    }
    println!();
    let mut failures = Vec::new();
    if let Some((_, fa_spread, _)) = others.iter().find(|(name, ..)| *name == "FA off") {
        let (s_min, s_mean) = min_mean(fa_spread);
        if l_min < s_min - 0.001 {
            failures.push(format!(
                "min cosine to llama.cpp {l_min:.7} is more than 0.001 below llama.cpp's own FA off~on {s_min:.7}"
            ));
        }
        if l_mean < s_mean - 0.0002 {
            failures.push(format!(
                "mean cosine to llama.cpp {l_mean:.7} is more than 0.0002 below llama.cpp's own FA off~on {s_mean:.7}"
            ));
        }
        if t_mean < r_mean - 0.0005 {
            failures.push(format!(
                "mean cosine to PyTorch {t_mean:.7} is more than 0.0005 below llama.cpp's {r_mean:.7}"
            ));
        }
    }
    for (i, t) in g.texts.iter().enumerate() {
        if vs_llama[i] < floor {
            failures.push(format!(
                "{}: cosine to llama.cpp {:.7} < {floor}",
                t.id, vs_llama[i]
            ));
        }
        if quant == "F32" && vs_torch[i] < 0.99999 {
            failures.push(format!(
                "{}: cosine to PyTorch {:.7} < 0.99999",
                t.id, vs_torch[i]
            ));
        }
    }
    assert!(failures.is_empty(), "{quant}:\n{}", failures.join("\n"));
}

#[test]
fn f32_matches_llama_cpp_and_pytorch() {
    check("F32", 0.99999);
}

// The issue asked for every text ≥ 0.999 to llama.cpp on Q8_0 and Q6_K, but
// llama.cpp does not agree with itself that well: on these texts its flash
// attention off and on paths give Q8_0 min 0.99881 (mean 0.99963) and Q6_K min
// 0.99715 (mean 0.99836); the same commit and command built on an AVX-512
// machine gives Q8_0 min 0.99932 and Q6_K min 0.99592 against the AVX2-built
// gold; and batching all texts in one process instead of one per process
// moves it as much. Activation quantization makes the quantized files
// chaotic: one int8 rounding that flips on a last-bit difference cascades
// through the later layers. So the per-text floors sit below that spread,
// and the spread-relative checks in `check` carry the comparison.
#[test]
fn q8_0_matches_llama_cpp_and_pytorch() {
    check("Q8_0", 0.998);
}

#[test]
fn q6_k_matches_llama_cpp_and_pytorch() {
    check("Q6_K", 0.995);
}

#[test]
fn q4_k_m_matches_llama_cpp_and_pytorch() {
    check("Q4_K_M", 0.995);
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
    let Some(path) = model("Q8_0").or_else(|| model("F32")) else {
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
    let Some(path) = model("Q8_0").or_else(|| model("F32")) else {
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
