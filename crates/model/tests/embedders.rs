//! Embedder and reranker conformance (gold and how it was made:
//! `testdata/embedders/README.md`).
//!
//! For each checkpoint (`minilm`, `bge`, `nomic`, `xlmr`, `qwen3emb`; the
//! cross-encoders `ms-marco`, `bge-reranker`) the tiny checkpoint is rebuilt
//! bit for bit ([`lamina_testkit::checkpoint`]), converted by
//! `lamina_model::convert` at f32 (the same bytes as the pinned
//! `convert_hf_to_gguf.py`) and quantized to Q8_0 by our requantize (the same
//! bytes as `llama-quantize`), then:
//!
//! * ids: our tokenizer gives HF's ids (where llama.cpp's differ from HF's,
//!   which only the SentencePiece stand-in of `qwen3emb` does on one text,
//!   llama.cpp's, and that text is left out of the vector checks as the
//!   gold's own figures leave it out);
//! * F32: cosine ≥ [`F32_COSINE`] to PyTorch (sentence-transformers) and to
//!   llama.cpp's F32;
//! * Q8_0: cosine ≥ [`Q8_COSINE`] to llama.cpp's Q8_0, and a mean cosine to
//!   PyTorch no worse than llama.cpp's Q8_0 less [`Q8_MEAN_SLACK`];
//! * batch == alone, and (on `minilm`) a Matryoshka dimension;
//! * rerankers: F32 logits within [`F32_LOGIT`] of the reference logits'
//!   spread; Q8_0 within [`Q8_LOGIT`] of it from llama.cpp's Q8_0, and a
//!   mean distance to the F32 reference at most llama.cpp Q8_0's plus
//!   [`Q8_MEAN_LOGIT_SLACK`] of the spread. A pooler-less BERT cross-encoder
//!   (the Python converter's file) is llama.cpp's model: compared with
//!   PyTorch computing what llama.cpp computes (`torch_lcpp_head`); converted
//!   with `bert_pooler` it is PyTorch's, compared with PyTorch itself.
//!
//! Where our conversion fails, the steps run on the Python converter's file
//! if `LAMINA_EMBEDDERS_GGUF` names the folder `make_gold.sh` wrote them to
//! (`/tmp/embedders/gguf`), and the test fails naming the conversion.

mod common;

use std::path::{Path, PathBuf};

use common::sha256;
use lamina_kernels::pool::Rayon;
use lamina_model::ModelError;
use lamina_model::convert::{ConvertOptions, OutType, convert};
use lamina_model::embed::{EmbedOptions, Embedder, Pair, Pooling, cosine};
use lamina_model::requantize::{Target, quantize_file};
use lamina_testkit::checkpoint::{embedders_dir, read_json, write_embedder};
use serde_json::Value as Json;

/// F32 cosine floor against PyTorch and llama.cpp (the bar).
const F32_COSINE: f64 = 0.99999;
/// Q8_0 cosine floor against llama.cpp's Q8_0 (the bar).
const Q8_COSINE: f64 = 0.999;
/// How much lower than llama.cpp's Q8_0 our Q8_0's mean cosine to PyTorch may be.
const Q8_MEAN_SLACK: f64 = 0.0005;
/// F32 logits: |ours − reference| ≤ this × the reference logits' spread
/// (max − min over the pairs, at least 1): well below the gold's 7-digit
/// rounding relative to the spread and far below the gaps that would change
/// a ranking.
const F32_LOGIT: f32 = 1e-3;
/// Q8_0 logits: |ours − llama.cpp's Q8_0| ≤ this × the spread. Both
/// quantize activations to 8 bits per block, and llama.cpp also rounds K
/// and V through f16, so the two differ by about as much as each differs
/// from F32 (the printed figures show it).
const Q8_LOGIT: f32 = 3e-2;
/// Q8_0 logits: our mean |diff| to the F32 reference may exceed llama.cpp
/// Q8_0's by this × the spread (the rerank twin of [`Q8_MEAN_SLACK`]).
const Q8_MEAN_LOGIT_SLACK: f32 = 1e-2;
/// Batch == alone: the same sums in the same order except where the matmul
/// tiles rows differently.
const BATCH_DIFF: f32 = 1e-5;

struct Files {
    _dir: tempfile::TempDir,
    f32: PathBuf,
    q8: PathBuf,
    /// Conversion and quantization steps that failed (the others still run).
    failed: Vec<String>,
}

fn python_gguf(name: &str, quant: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("LAMINA_EMBEDDERS_GGUF")?;
    let p = Path::new(&dir).join(format!("{name}-{quant}.gguf"));
    p.is_file().then_some(p)
}

fn gold(name: &str) -> Json {
    read_json(&embedders_dir().join(name).join("gold.json"))
}

/// Rebuilds, converts and quantizes checkpoint `name`.
fn files(name: &str, bert_pooler: bool) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = write_embedder(name, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let g = gold(name);
    let mut failed = Vec::new();
    let ours = dir.path().join(format!("{name}-F32.gguf"));
    let opts = ConvertOptions {
        input: ckpt,
        output: ours.clone(),
        out_type: OutType::F32,
        dense_modules: false,
        bert_pooler,
        model_id: None,
    };
    let f32 = match convert(&opts, &mut |_| {}) {
        Err(e) => {
            failed.push(format!("convert: {e}"));
            python_gguf(name, "F32").unwrap_or_else(|| panic!("{name}: {failed:?}"))
        }
        Ok(_) => {
            let (got, want) = (sha256(&ours), g["gguf_sha256"]["F32"].as_str().unwrap());
            if !bert_pooler && got != want {
                failed.push(format!(
                    "convert: SHA-256 {got}, the Python converter's {want}"
                ));
            }
            ours
        }
    };
    let q8 = dir.path().join(format!("{name}-Q8_0.gguf"));
    match quantize_file(&f32, &q8, Target::Q8_0, &mut |_, _, _| {}) {
        Err(e) => panic!("{name}: quantize Q8_0: {e}"),
        Ok(_) => {
            let (got, want) = (sha256(&q8), g["gguf_sha256"]["Q8_0"].as_str().unwrap());
            if !bert_pooler && failed.is_empty() && got != want {
                failed.push(format!(
                    "quantize Q8_0: SHA-256 {got}, llama-quantize's {want}"
                ));
            }
        }
    }
    Files {
        _dir: dir,
        f32,
        q8,
        failed,
    }
}

fn floats(v: &Json) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The conformance checks of an embedding checkpoint; panics listing every failure.
fn embedder(name: &str) {
    let f = files(name, false);
    let g = gold(name);
    let mut failed = f.failed.clone();
    let items = g["items"].as_array().unwrap();
    let mut e = Embedder::open(&f.f32).unwrap();
    assert!(!e.is_reranker());
    let mut seqs = Vec::new();
    let mut judged = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let prefix = match it["task"].as_str() {
            None => "",
            Some(t) => e
                .task_prefix(t)
                .unwrap_or_else(|| panic!("{name}: no task {t:?} in {:?}", e.tasks())),
        };
        let text = it["text"].as_str().unwrap();
        assert_eq!(format!("{prefix}{text}"), it["input"].as_str().unwrap());
        let opts = EmbedOptions {
            prefix: prefix.to_string(),
            ..Default::default()
        };
        let ours = e.tokenize(text, &opts).unwrap();
        let (hf, lcpp) = (ids(&it["hf_ids"]), ids(&it["lcpp_ids"]));
        let want = if hf == lcpp { &hf } else { &lcpp };
        if &ours != want {
            failed.push(format!("text {i}: ids {ours:?}, want {want:?}"));
        }
        judged.push(hf == lcpp);
        seqs.push(ours);
    }
    let opts = EmbedOptions::default();
    let v32 = e.embed_ids(&seqs, &opts, &Rayon).unwrap();
    let mut e8 = Embedder::open(&f.q8).unwrap();
    let v8 = e8.embed_ids(&seqs, &opts, &Rayon).unwrap();
    let (mut min32, mut min8, mut sum8, mut n) = (1.0f64, 1.0f64, 0.0f64, 0);
    for (i, it) in items.iter().enumerate() {
        if !judged[i] {
            continue;
        }
        let (torch, lf32, lq8) = (
            floats(&it["torch"]),
            floats(&it["lcpp_f32"]),
            floats(&it["lcpp_q8_0"]),
        );
        let (a, b) = (
            cosine(&v32[i].vector, &torch),
            cosine(&v32[i].vector, &lf32),
        );
        min32 = min32.min(a).min(b);
        if a < F32_COSINE || b < F32_COSINE {
            failed.push(format!(
                "text {i}: F32 cosine {a:.7} to PyTorch, {b:.7} to llama.cpp"
            ));
        }
        let c = cosine(&v8[i].vector, &lq8);
        min8 = min8.min(c);
        if c < Q8_COSINE {
            failed.push(format!("text {i}: Q8_0 cosine {c:.6} to llama.cpp's Q8_0"));
        }
        sum8 += cosine(&v8[i].vector, &torch);
        n += 1;
    }
    let mean8 = sum8 / n as f64;
    let theirs = g["cosine"]["mean_lcpp_q8_0_torch"].as_f64().unwrap();
    if mean8 < theirs - Q8_MEAN_SLACK {
        failed.push(format!(
            "Q8_0 mean cosine to PyTorch {mean8:.6}, llama.cpp's {theirs:.6}"
        ));
    }
    // Batch == alone.
    let mut worst = 0.0f32;
    for (i, s) in seqs.iter().enumerate() {
        let alone = e.embed_ids(std::slice::from_ref(s), &opts, &Rayon).unwrap();
        worst = worst.max(max_abs_diff(&alone[0].vector, &v32[i].vector));
    }
    if worst > BATCH_DIFF {
        failed.push(format!("batch != alone: max |diff| {worst:e}"));
    }
    println!(
        "{name}: {n} texts; F32 min cosine {min32:.8}; Q8_0 min cosine to llama.cpp {min8:.6}, \
         mean to PyTorch {mean8:.6} (llama.cpp {theirs:.6}); batch vs alone {worst:.1e}"
    );
    assert!(failed.is_empty(), "{name}:\n{}", failed.join("\n"));
}

#[test]
fn minilm() {
    embedder("minilm");
}

#[test]
fn bge() {
    embedder("bge");
}

#[test]
fn nomic() {
    embedder("nomic");
}

#[test]
fn xlmr() {
    embedder("xlmr");
}

#[test]
fn qwen3emb() {
    embedder("qwen3emb");
}

/// The conformance checks of a cross-encoder against gold key `reference`
/// (F32) and llama.cpp's Q8_0 (`q8`); panics listing every failure.
fn reranker(name: &str, bert_pooler: bool, reference: &str, q8: bool) {
    let f = files(name, bert_pooler);
    let g = gold(name);
    let mut failed = f.failed.clone();
    let items = g["items"].as_array().unwrap();
    let mut e = Embedder::open(&f.f32).unwrap();
    assert!(e.is_reranker(), "{name}: pooling {}", e.pooling());
    let opts = EmbedOptions::default();
    let mut pairs = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let (q, d) = (
            it["query"].as_str().unwrap(),
            it["document"].as_str().unwrap(),
        );
        let p = e.tokenize_pair(q, d, &opts).unwrap();
        let hf = ids(&it["hf_ids"]);
        if p.ids != hf {
            failed.push(format!("pair {i}: ids {:?}, HF's {hf:?}", p.ids));
        }
        let types = ids(&it["hf_token_type_ids"]);
        if let Some(b) = types.iter().position(|&t| t == 1)
            && b != p.segment_b
        {
            failed.push(format!(
                "pair {i}: segment B at {}, HF's at {b}",
                p.segment_b
            ));
        }
        pairs.push(p);
    }
    let want: Vec<f32> = items
        .iter()
        .map(|it| it[reference].as_f64().unwrap() as f32)
        .collect();
    let spread = want.iter().copied().fold(f32::MIN, f32::max)
        - want.iter().copied().fold(f32::MAX, f32::min);
    let scale = spread.max(1.0);
    let ours = e.score_pairs(&pairs, &opts, &Rayon).unwrap();
    let d32 = max_abs_diff(&ours, &want);
    if d32 > F32_LOGIT * scale {
        failed.push(format!(
            "F32 logits {ours:?}, {reference} {want:?}: max |diff| {d32}"
        ));
    }
    let mut worst = 0.0f32;
    for (i, p) in pairs.iter().enumerate() {
        let alone = e
            .score_pairs(std::slice::from_ref(p), &opts, &Rayon)
            .unwrap();
        worst = worst.max((alone[0] - ours[i]).abs());
    }
    if worst > BATCH_DIFF * scale {
        failed.push(format!("batch != alone: max |diff| {worst:e}"));
    }
    let (mut d8, mut mean8, mut theirs8) = (f32::NAN, f32::NAN, f32::NAN);
    if q8 {
        let lq8: Vec<f32> = items
            .iter()
            .map(|it| it["lcpp_q8_0"].as_f64().unwrap() as f32)
            .collect();
        let mut e8 = Embedder::open(&f.q8).unwrap();
        let ours8 = e8.score_pairs(&pairs, &opts, &Rayon).unwrap();
        d8 = max_abs_diff(&ours8, &lq8);
        if d8 > Q8_LOGIT * scale {
            failed.push(format!(
                "Q8_0 logits {ours8:?}, llama.cpp's {lq8:?}: max |diff| {d8}"
            ));
        }
        let mean = |v: &[f32]| -> f32 {
            v.iter().zip(&want).map(|(a, b)| (a - b).abs()).sum::<f32>() / v.len() as f32
        };
        (mean8, theirs8) = (mean(&ours8), mean(&lq8));
        if mean8 > theirs8 + Q8_MEAN_LOGIT_SLACK * scale {
            failed.push(format!(
                "Q8_0 mean |diff| to {reference} {mean8}, llama.cpp's Q8_0 {theirs8}"
            ));
        }
    }
    println!(
        "{name} (pooler {bert_pooler}): {} pairs, spread {spread:.3}; F32 max |diff| to {reference} \
         {d32:.2e}; Q8_0 max |diff| to llama.cpp's {d8:.2e}, mean to {reference} {mean8:.2e} \
         (llama.cpp {theirs8:.2e}); batch vs alone {worst:.1e}",
        pairs.len()
    );
    assert!(failed.is_empty(), "{name}:\n{}", failed.join("\n"));
}

#[test]
fn ms_marco_as_llama_cpp_converts_it() {
    reranker("ms-marco", false, "torch_lcpp_head", true);
}

#[test]
fn ms_marco_with_its_pooler_matches_pytorch() {
    reranker("ms-marco", true, "torch", false);
}

#[test]
fn bge_reranker() {
    reranker("bge-reranker", false, "torch", true);
}

#[test]
fn minilm_matryoshka_and_per_token_output() {
    let f = files("minilm", false);
    let g = gold("minilm");
    let it = &g["items"][0];
    let mut e = Embedder::open(&f.f32).unwrap();
    let seq = ids(&it["hf_ids"]);
    let torch = floats(&it["torch"]);
    let dim = 48;
    let opts = EmbedOptions {
        dim: Some(dim),
        ..Default::default()
    };
    let v = e
        .embed_ids(std::slice::from_ref(&seq), &opts, &Rayon)
        .unwrap();
    assert_eq!(v[0].vector.len(), dim);
    let norm: f64 = v[0].vector.iter().map(|&x| x as f64 * x as f64).sum();
    assert!((norm - 1.0).abs() < 1e-6);
    let c = cosine(&v[0].vector, &torch[..dim]);
    assert!(
        c >= F32_COSINE,
        "Matryoshka {dim}: cosine {c} to PyTorch's first {dim}"
    );
    // Pooling none: one normalised vector per token, whose mean before
    // normalisation is the mean-pooled vector; here they are checked to be
    // unit vectors that average (with the hidden norms unknown) in the
    // pooled vector's direction only through the per-token output's shape.
    let none = EmbedOptions {
        pooling: Some(Pooling::None),
        ..Default::default()
    };
    let v = e
        .embed_ids(std::slice::from_ref(&seq), &none, &Rayon)
        .unwrap();
    let d = e.dim();
    assert_eq!(v[0].vector.len(), seq.len() * d);
    for row in v[0].vector.chunks_exact(d) {
        let n: f64 = row.iter().map(|&x| x as f64 * x as f64).sum();
        assert!((n - 1.0).abs() < 1e-5);
    }
    // Stored as panels (as `lamina serve` loads it), Q8_0 gives the rows' bits.
    let rows = Embedder::open(&f.q8)
        .unwrap()
        .embed_ids(std::slice::from_ref(&seq), &EmbedOptions::default(), &Rayon)
        .unwrap();
    let model = lamina_model::LoadOptions::new()
        .panels(true)
        .open(&f.q8)
        .unwrap();
    let panels = Embedder::new(model)
        .unwrap()
        .embed_ids(std::slice::from_ref(&seq), &EmbedOptions::default(), &Rayon)
        .unwrap();
    assert_eq!(rows, panels);
    // CLS and last-token pooling are those rows.
    for (pooling, row) in [(Pooling::Cls, 0), (Pooling::Last, seq.len() - 1)] {
        let o = EmbedOptions {
            pooling: Some(pooling),
            ..Default::default()
        };
        let p = e.embed_ids(std::slice::from_ref(&seq), &o, &Rayon).unwrap();
        assert_eq!(p[0].vector, v[0].vector[row * d..(row + 1) * d]);
    }
}

#[test]
fn embedders_and_rerankers_refuse_each_others_work() {
    let m = files("minilm", false);
    let r = files("ms-marco", false);
    let mut e = Embedder::open(&m.f32).unwrap();
    let mut x = Embedder::open(&r.f32).unwrap();
    let opts = EmbedOptions::default();
    let err = x.embed(&["text"], &opts, &Rayon).unwrap_err();
    assert!(
        matches!(err, ModelError::Input(_)) && err.to_string().contains("reranker"),
        "{err}"
    );
    let pair = e.tokenize_pair("q", "d", &opts).unwrap();
    let err = e.score_pairs(&[pair], &opts, &Rayon).unwrap_err();
    assert!(
        matches!(err, ModelError::Input(_)) && err.is_input(),
        "{err}"
    );
    let err = e.rerank("q", &["d"], &opts, &Rayon).unwrap_err();
    assert!(err.is_input(), "{err}");
    let bad = Pair {
        ids: vec![101, 102],
        segment_b: 5,
    };
    assert!(x.score_pairs(&[bad], &opts, &Rayon).unwrap_err().is_input());
    // An over-long pair: an error, or the document cut with `truncate`.
    let long = "word ".repeat(600);
    let err = x.tokenize_pair("query", &long, &opts).unwrap_err();
    assert!(matches!(err, ModelError::ContextExceeded { .. }), "{err}");
    let cut = EmbedOptions {
        truncate: true,
        ..Default::default()
    };
    let p = x.tokenize_pair("query", &long, &cut).unwrap();
    assert_eq!(p.ids.len(), x.n_ctx());
    assert_eq!(p.ids.last(), Some(&102), "the closing [SEP] stays");
    assert_eq!(&p.ids[..3], &[101, 23032, 102]);
    assert!(x.score_pairs(&[p], &cut, &Rayon).unwrap()[0].is_finite());
    // XLM-R's pairs (`<s> q </s></s> d </s>`, all type 0) cut the same way.
    let r = files("bge-reranker", false);
    let mut x = Embedder::open(&r.f32).unwrap();
    let long = "the river ".repeat(400);
    let p = x.tokenize_pair("query", &long, &cut).unwrap();
    assert_eq!((p.ids.len(), p.segment_b), (x.n_ctx(), x.n_ctx()));
    assert_eq!(p.ids.last(), x.tokenizer.special_tokens().eos.as_ref());
    assert!(x.score_pairs(&[p], &cut, &Rayon).unwrap()[0].is_finite());
}

/// A copy of the GGUF `src` at `dst` with metadata `set`, tensors `drop`
/// left out, tensors `shape`d anew (their data cut or cycled to fit) and
/// tensors `add`ed (F32, filled with a small pattern).
fn mutate(
    src: &Path,
    dst: &Path,
    set: &[(&str, lamina_gguf::OwnedValue)],
    drop: &[&str],
    shape: &[(&str, Vec<u64>)],
    add: &[(&str, Vec<u64>)],
) {
    use lamina_gguf::{GgmlType, Gguf, GgufBuilder};
    let g = Gguf::open(src).unwrap();
    let mut b = GgufBuilder::new();
    for (k, v) in g.metadata() {
        b.set(k, v.to_owned_value()).unwrap();
    }
    for (k, v) in set {
        b.set(*k, v.clone()).unwrap();
    }
    let mut data: Vec<Vec<u8>> = Vec::new();
    for t in g
        .tensors()
        .iter()
        .filter(|t| !drop.contains(&t.name.as_str()))
    {
        let dims = match shape.iter().find(|(n, _)| *n == t.name) {
            Some((_, s)) => s.clone(),
            None => t.shape.clone(),
        };
        let spec = b.add_tensor(t.name.clone(), t.ggml_type, &dims).unwrap();
        let src = g.tensor_data(t);
        data.push(
            src.iter()
                .copied()
                .cycle()
                .take(spec.n_bytes as usize)
                .collect(),
        );
    }
    for (n, s) in add {
        let spec = b.add_tensor(*n, GgmlType::F32, s).unwrap();
        let k = spec.n_bytes as usize / 4;
        data.push(
            (0..k)
                .flat_map(|i| ((i % 5) as f32 * 0.01).to_le_bytes())
                .collect(),
        );
    }
    let file = std::io::BufWriter::new(std::fs::File::create(dst).unwrap());
    let mut w = b.write_header(file).unwrap();
    for d in &data {
        w.write_tensor(d).unwrap();
    }
    use std::io::Write;
    w.finish().unwrap().flush().unwrap();
}

#[test]
fn bad_encoder_files_are_clear_errors() {
    use lamina_gguf::OwnedValue;
    use lamina_model::Model;
    let f = files("minilm", false);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    let open = |set: &[(&str, OwnedValue)],
                drop: &[&str],
                shape: &[(&str, Vec<u64>)],
                add: &[(&str, Vec<u64>)]| {
        mutate(&f.f32, &p, set, drop, shape, add);
        Model::open(&p).map(|_| ())
    };
    let err = open(&[("bert.pooling_type", OwnedValue::U32(9))], &[], &[], &[]).unwrap_err();
    assert!(
        matches!(&err, ModelError::BadKey(k) if k == "bert.pooling_type"),
        "{err}"
    );
    let err = open(&[], &["blk.1.layer_output_norm.bias"], &[], &[]).unwrap_err();
    assert!(matches!(&err, ModelError::MissingTensor(t) if t.contains("layer_output_norm.bias")));
    // Fewer position rows than the context: refused before any lookup.
    let err = open(&[], &[], &[("position_embd.weight", vec![128, 100])], &[]).unwrap_err();
    assert!(matches!(&err, ModelError::Shape { tensor, .. } if tensor == "position_embd.weight"));
    let err = open(
        &[("bert.context_length", OwnedValue::U32(1 << 20))],
        &[],
        &[],
        &[],
    )
    .unwrap_err();
    assert!(matches!(&err, ModelError::Shape { tensor, .. } if tensor == "position_embd.weight"));
    let err = open(&[], &[], &[("token_types.weight", vec![128, 4000])], &[]).unwrap_err();
    assert!(matches!(err, ModelError::Unsupported(_)), "{err}");
    let err = open(&[], &["token_embd_norm.weight"], &[], &[]).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor(_)), "{err}");
    // Rank pooling without a classification head.
    let err = open(&[("bert.pooling_type", OwnedValue::U32(4))], &[], &[], &[]).unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingTensor(t) if t.contains("cls.output")),
        "{err}"
    );
    let err = open(
        &[(
            "bert.attention.layer_norm_epsilon",
            OwnedValue::F32(f32::NAN),
        )],
        &[],
        &[],
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, ModelError::BadKey(_)), "{err}");
    // Pooling none cannot feed a dense head, from the file or per request.
    let dense = [
        ("dense_2.weight", vec![128, 64]),
        ("dense_3.weight", vec![64, 128]),
    ];
    for (pooling, per_request) in [(1, Some(Pooling::None)), (0, None)] {
        mutate(
            &f.f32,
            &p,
            &[("bert.pooling_type", OwnedValue::U32(pooling))],
            &[],
            &[],
            &dense,
        );
        let mut e = Embedder::open(&p).unwrap();
        assert_eq!(
            e.model.weight_types().iter().map(|t| t.1).sum::<usize>(),
            12 + 1 + 2
        );
        let opts = EmbedOptions {
            pooling: per_request,
            ..Default::default()
        };
        let err = e.embed(&["text"], &opts, &Rayon).unwrap_err();
        assert!(
            err.is_input() && err.to_string().contains("dense head"),
            "{err}"
        );
    }
    // Out-of-vocabulary ids and empty texts are input errors, not panics.
    let mut e = Embedder::open(&f.f32).unwrap();
    let opts = EmbedOptions::default();
    let err = e
        .embed_ids(&[vec![101, 40000, 102]], &opts, &Rayon)
        .unwrap_err();
    assert!(matches!(err, ModelError::BadToken { .. }), "{err}");
    assert!(
        e.embed_ids(&[vec![]], &opts, &Rayon)
            .unwrap_err()
            .is_input()
    );
}
