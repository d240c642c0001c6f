//! all-MiniLM-L6-v2 end to end: the F32 and Q8_0 files `cargo xtask models`
//! makes (`lamina convert` of the sentence-transformers folder, `lamina
//! quantize`), against sentence-transformers (PyTorch F32) and llama.cpp's
//! `llama-embedding` on the same files, on the texts of
//! `testdata/embed/minilm/` (gold made by its `make_gold.py`).
//!
//! Long texts: sentence-transformers cuts a text at the model's
//! max_seq_length (256 tokens: the first 255 and `[SEP]`); the GGUF's
//! context is the model's 512 positions (`bert.context_length`, as llama.cpp's
//! converter writes it), and lamina, like llama.cpp, embeds the whole text up
//! to that. A text over 256 tokens is therefore compared with PyTorch on the
//! whole text (`pytorch-F32-full`), and once more cut as sentence-transformers
//! cuts it; over the context it is refused, or with `truncate` cut keeping
//! `[SEP]`.
//!
//! llama.cpp tokenizes four of the texts differently from Hugging Face (see
//! [`llama_cpp_tokenizes_four_texts_unlike_hugging_face`]); lamina follows
//! Hugging Face, so llama.cpp is judged only on the others.
//!
//! Without the models the tests skip (fail under `cargo xtask test`); run
//! with `--nocapture` to see the figures.

mod common;
#[path = "../../../testdata/embed/thresholds.rs"]
mod thresholds;

use std::path::PathBuf;

use lamina_kernels::pool::Rayon;
use lamina_model::embed::{EmbedOptions, Embedder, cosine};
use serde_json::Value;
use thresholds::min_mean;

const DIM: usize = 384;
/// sentence-transformers' max_seq_length for this model.
const ST_MAX_SEQ: usize = 256;
const SEP: u32 = 102;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/embed/minilm")
        .join(file)
}

fn json(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(testdata(file)).unwrap()).unwrap()
}

struct Gold {
    ids: Vec<String>,
    texts: Vec<String>,
    hf_ids: Vec<Vec<u32>>,
    llama_like_hf: Vec<bool>,
    index: Value,
}

fn gold() -> Gold {
    let texts = json("texts.json");
    let index = json("gold.json");
    let texts = texts.as_array().expect("texts.json: array");
    let ids: Vec<String> = texts
        .iter()
        .map(|t| t["id"].as_str().unwrap().into())
        .collect();
    let gold_ids: Vec<&str> = index["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(gold_ids, ids, "gold.json is stale: rerun make_gold.py");
    assert!(ids.len() >= 40);
    let hf_ids = common::id_lists(&index["hf_ids"]);
    let llama_ids = common::id_lists(&index["llama_ids"]);
    let llama_like_hf: Vec<bool> = hf_ids.iter().zip(&llama_ids).map(|(h, l)| h == l).collect();
    Gold {
        texts: texts
            .iter()
            .map(|t| t["text"].as_str().unwrap().into())
            .collect(),
        ids,
        hf_ids,
        llama_like_hf,
        index,
    }
}

/// `n_texts × 384` vectors from `<source>.f32`.
fn vectors(source: &str, n: usize) -> Vec<Vec<f32>> {
    common::f32_rows(&testdata(&format!("{source}.f32")), n, DIM)
}

/// `all-MiniLM-L6-v2-{quant}.gguf` if it is the file the gold was made from.
fn model(g: &Gold, quant: &str) -> Option<PathBuf> {
    let source = &g.index["sources"][format!("llamacpp-{quant}")];
    let name = source["file"].as_str().expect("gold.json: file");
    assert_eq!(name, format!("all-MiniLM-L6-v2-{quant}.gguf"));
    let want = source["sha256"].as_str().expect("gold.json: sha256");
    common::pinned_model(name, want, "testdata/embed/minilm/gold.json")
}

/// Every gold text through lamina, all in one call (several per forward),
/// checking its ids are Hugging Face's on the way.
fn embed_all(e: &mut Embedder, g: &Gold) -> Vec<Vec<f32>> {
    let opts = EmbedOptions::default();
    assert!(
        e.n_ctx() >= 512,
        "n_ctx {}: the model has 512 positions",
        e.n_ctx()
    );
    let seqs: Vec<Vec<u32>> = g
        .texts
        .iter()
        .map(|t| e.tokenize(t, &opts).expect("tokenize"))
        .collect();
    for ((id, ours), hf) in g.ids.iter().zip(&seqs).zip(&g.hf_ids) {
        assert_eq!(ours, hf, "{id}: ids differ from Hugging Face's");
    }
    e.embed_ids(&seqs, &opts, &Rayon)
        .expect("embed")
        .into_iter()
        .map(|x| x.vector)
        .collect()
}

fn cosines(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| cosine(x, y)).collect()
}

/// Per-text shortfalls of `cos` (over the texts `keep` selects) below `floor`.
fn below(
    what: &str,
    cos: &[f64],
    g: &Gold,
    keep: impl Fn(usize) -> bool,
    floor: f64,
) -> Vec<String> {
    let picked: Vec<(f64, &str)> = (0..cos.len())
        .filter(|&i| keep(i))
        .map(|i| (cos[i], g.ids[i].as_str()))
        .collect();
    assert!(!picked.is_empty(), "{what}: no texts to judge");
    let (c, ids): (Vec<f64>, Vec<&str>) = picked.into_iter().unzip();
    let (min, mean) = min_mean(&c);
    println!("  {what}: {} texts, min {min:.7}, mean {mean:.7}", c.len());
    thresholds::Floor {
        min: floor,
        mean: floor,
    }
    .shortfalls(what, &c, &ids)
}

#[test]
fn f32_matches_pytorch_and_llama_cpp() {
    let g = gold();
    let Some(path) = model(&g, "F32") else { return };
    let n = g.texts.len();
    let ours = embed_all(&mut Embedder::open(&path).unwrap(), &g);
    let len = |i: usize| g.hf_ids[i].len();
    let vs_st = cosines(&ours, &vectors("pytorch-F32", n));
    let vs_full = cosines(&ours, &vectors("pytorch-F32-full", n));
    let vs_llama = cosines(&ours, &vectors("llamacpp-F32", n));
    println!("F32: ours~sentence-transformers, ours~PyTorch whole text, ours~llama.cpp per text");
    for i in 0..n {
        println!(
            "  {:<20} {:>4} tokens  {:.7}  {:.7}  {:.7}{}",
            g.ids[i],
            len(i),
            vs_st[i],
            vs_full[i],
            vs_llama[i],
            if g.llama_like_hf[i] {
                ""
            } else {
                "  (llama.cpp tokenizes it differently)"
            }
        );
    }
    let mut fails = below(
        "vs sentence-transformers, texts it does not truncate",
        &vs_st,
        &g,
        |i| len(i) <= ST_MAX_SEQ,
        thresholds::F32_VS_PYTORCH,
    );
    fails.extend(below(
        "vs PyTorch on the whole text, texts over 256 tokens",
        &vs_full,
        &g,
        |i| len(i) > ST_MAX_SEQ,
        thresholds::F32_VS_PYTORCH,
    ));
    fails.extend(below(
        "vs llama.cpp F32, texts it tokenizes like Hugging Face",
        &vs_llama,
        &g,
        |i| g.llama_like_hf[i],
        thresholds::F32_VS_LLAMA,
    ));
    assert!(fails.is_empty(), "F32:\n{}", fails.join("\n"));
}

#[test]
fn q8_0_matches_llama_cpp_and_pytorch() {
    let g = gold();
    let Some(path) = model(&g, "Q8_0") else {
        return;
    };
    let n = g.texts.len();
    let ours = embed_all(&mut Embedder::open(&path).unwrap(), &g);
    let llama = vectors("llamacpp-Q8_0", n);
    let torch = vectors("pytorch-F32-full", n);
    let vs_llama = cosines(&ours, &llama);
    let vs_torch = cosines(&ours, &torch);
    let llama_vs_torch = cosines(&llama, &torch);
    println!("Q8_0: ours~llama.cpp, ours~PyTorch, llama.cpp~PyTorch per text");
    for i in 0..n {
        println!(
            "  {:<20} {:.7}  {:.7}  {:.7}",
            g.ids[i], vs_llama[i], vs_torch[i], llama_vs_torch[i]
        );
    }
    let mut fails = below(
        "vs llama.cpp Q8_0, texts it tokenizes like Hugging Face",
        &vs_llama,
        &g,
        |i| g.llama_like_hf[i],
        thresholds::MINILM_Q8_0_VS_LLAMA,
    );
    // Both means over the texts llama.cpp reads as Hugging Face does, so
    // its tokenizer's departures do not lower the bar.
    let same: Vec<usize> = (0..n).filter(|&i| g.llama_like_hf[i]).collect();
    let pick = |c: &[f64]| same.iter().map(|&i| c[i]).collect::<Vec<f64>>();
    let floor = thresholds::vs_pytorch("Q8_0", &pick(&llama_vs_torch));
    let (_, mean) = min_mean(&pick(&vs_torch));
    println!(
        "  vs PyTorch, {} texts: mean {mean:.7}, {}",
        same.len(),
        floor.describe()
    );
    let ids: Vec<&str> = same.iter().map(|&i| g.ids[i].as_str()).collect();
    fails.extend(floor.shortfalls("vs PyTorch", &pick(&vs_torch), &ids));
    assert!(fails.is_empty(), "Q8_0:\n{}", fails.join("\n"));
}

/// The texts over 256 tokens, cut as sentence-transformers cuts them (first
/// 255 ids and `[SEP]`), give sentence-transformers' vectors; a text over
/// the context is refused, or with `truncate` cut the same way at 512.
#[test]
fn long_texts_are_whole_up_to_the_context_and_cut_only_when_asked() {
    let g = gold();
    let Some(path) = model(&g, "F32") else { return };
    let n = g.texts.len();
    let mut e = Embedder::open(&path).unwrap();
    let st = vectors("pytorch-F32", n);
    let long: Vec<usize> = (0..n).filter(|&i| g.hf_ids[i].len() > ST_MAX_SEQ).collect();
    assert!(!long.is_empty(), "the gold has a text over 256 tokens");
    let opts = EmbedOptions::default();
    for &i in &long {
        let mut ids = e.tokenize(&g.texts[i], &opts).unwrap();
        ids.truncate(ST_MAX_SEQ - 1);
        ids.push(SEP);
        let v = e.embed_ids(&[ids], &opts, &Rayon).unwrap().remove(0).vector;
        let c = cosine(&v, &st[i]);
        println!("  {} cut at 256: {c:.7} to sentence-transformers", g.ids[i]);
        assert!(c >= thresholds::F32_VS_PYTORCH, "{}: {c}", g.ids[i]);
    }
    let text = g.texts[long[0]].repeat(2);
    let n_ctx = e.n_ctx();
    let whole = e.tokenize(
        &text,
        &EmbedOptions {
            truncate: true,
            ..opts.clone()
        },
    );
    assert!(
        e.tokenize(&text, &opts).is_err(),
        "over {n_ctx} tokens without truncate"
    );
    let whole = whole.unwrap();
    assert_eq!(whole.len(), n_ctx);
    assert_eq!(whole.last(), Some(&SEP));
    let mut all = e.tokenizer.encode(&text, true, true);
    assert!(all.len() > n_ctx);
    all.truncate(n_ctx - 1);
    assert_eq!(&whole[..n_ctx - 1], &all[..]);
    let cut = e
        .embed(
            &[text.as_str()],
            &EmbedOptions {
                truncate: true,
                ..opts
            },
            &Rayon,
        )
        .unwrap();
    assert_eq!(cut[0].n_tokens, n_ctx);
}

/// Where llama.cpp's WordPiece departs from Hugging Face's on these texts
/// (recorded by make_gold.py from llama-tokenize and the checkpoint's
/// tokenizer): Korean (HF decomposes Hangul syllables into jamo when it
/// strips accents), Hindi (llama.cpp drops the Devanagari vowel signs HF
/// keeps), keycap emoji (HF maps `1` + U+FE0F + U+20E3 to [UNK], llama.cpp
/// keeps the digit) and a 120-letter word (HF's 100-character word limit
/// makes it [UNK]; llama.cpp splits it into pieces). Details in
/// testdata/embed/minilm/README.md.
#[test]
fn llama_cpp_tokenizes_four_texts_unlike_hugging_face() {
    let g = gold();
    let differ: Vec<&str> = g
        .ids
        .iter()
        .zip(&g.llama_like_hf)
        .filter(|(_, like)| !**like)
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(differ, ["ko", "hi", "keycap", "very-long-word"]);
    let recorded: Vec<bool> = g.index["llama_tokenizes_like_hf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_bool().unwrap())
        .collect();
    assert_eq!(recorded, g.llama_like_hf);
    let long = g.ids.iter().position(|id| id == "very-long-word").unwrap();
    assert!(g.hf_ids[long].contains(&100), "HF: [UNK] for the long word");
}

/// llama.cpp's F32 vectors agree with PyTorch's wherever both see the same
/// ids and the whole text, so the gold measures lamina against one model.
#[test]
fn llama_cpp_f32_agrees_with_pytorch_in_the_gold() {
    let g = gold();
    let n = g.texts.len();
    let c = cosines(&vectors("llamacpp-F32", n), &vectors("pytorch-F32-full", n));
    let fails = below(
        "llama.cpp F32 vs PyTorch",
        &c,
        &g,
        |i| g.llama_like_hf[i],
        thresholds::F32_VS_PYTORCH,
    );
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
