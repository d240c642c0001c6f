use sha2::{Digest, Sha256};

use super::*;

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SmolLM2 tokenizer source, or `None` after saying the test is skipped.
fn smollm2_vocab() -> Option<PathBuf> {
    match shapes::find("smollm2-135m").unwrap().vocab {
        shapes::Vocab::Project(name) => lamina_testkit::present(name),
        shapes::Vocab::LlamaCpp(_) => unreachable!("SmolLM2's tokenizer is a project model's"),
    }
}

/// A SmolLM2-135M-shaped Q8_0 file: the same seed writes the same bytes, and
/// lamina loads it, tokenizes with the copied vocabulary and generates finite,
/// non-degenerate logits.
#[test]
fn smollm2_q8_0_is_reproducible_and_runs_in_lamina() {
    let Some(vocab) = smollm2_vocab() else {
        return;
    };
    let shape = find("SmolLM2-135M").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    write_file(shape, SynthType::Q8_0, 5, &vocab, &a, false).unwrap();
    write_file(shape, SynthType::Q8_0, 5, &vocab, &b, false).unwrap();
    assert_eq!(sha256(&a), sha256(&b), "same seed, different bytes");
    let planned = plan(shape, SynthType::Q8_0, 5, &vocab).unwrap();
    assert_eq!(planned.file_bytes, std::fs::metadata(&a).unwrap().len());
    assert_eq!(
        planned.by_type.iter().map(|t| t.0).collect::<Vec<_>>(),
        [GgmlType::Q8_0, GgmlType::F32]
    );

    let file = Gguf::open(&a).unwrap();
    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(file.get_u32("general.file_type").unwrap(), 7);
    assert_eq!(
        file.get_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(file.tensors().len(), 2 + 30 * 9);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.ggml_type, embd.shape.as_slice()),
        (GgmlType::Q8_0, &[576, 49152][..])
    );
    assert!(
        file.tensor("output.weight").is_none(),
        "SmolLM2 ties its LM head"
    );

    let model = lamina_model::Model::open(&a).unwrap();
    let tok = lamina_model::tokenizer::Tokenizer::from_gguf(&model.file).unwrap();
    let tokens = tok.encode("The quick brown fox", true, false);
    assert!(tokens.len() >= 4, "{tokens:?}");
    let hp = &model.hp;
    let mut ws = lamina_model::Workspace::new(hp, tokens.len());
    let mut cache = lamina_model::KvCache::new(hp, 64, lamina_model::KvType::F32);
    let mut logits = vec![0f32; hp.n_vocab];
    let pool = lamina_model::Serial;
    model
        .forward_cached(&mut ws, &mut cache, &tokens, false, &mut logits, &pool)
        .unwrap();
    assert!(logits.iter().all(|v| v.is_finite()), "non-finite logits");
    let (min, max) = logits
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    assert!(max - min > 1.0, "flat logits {min}..{max}");
    // One more token through the cache, as generation continues.
    let next = logits
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.total_cmp(y.1))
        .unwrap()
        .0 as u32;
    model
        .forward_cached(&mut ws, &mut cache, &[next], false, &mut logits, &pool)
        .unwrap();
    assert!(logits.iter().all(|v| v.is_finite()), "non-finite logits");
}

#[test]
fn another_seed_changes_the_weights_not_the_layout() {
    let Some(vocab) = smollm2_vocab() else {
        return;
    };
    let shape = find("smollm2-135m").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    write_file(shape, SynthType::F16, 1, &vocab, &a, false).unwrap();
    write_file(shape, SynthType::F16, 2, &vocab, &b, false).unwrap();
    let (fa, fb) = (Gguf::open(&a).unwrap(), Gguf::open(&b).unwrap());
    assert_eq!(fa.data_offset(), fb.data_offset());
    let (ta, tb) = (fa.tensors(), fb.tensors());
    assert_eq!(ta, tb);
    let q = "blk.0.attn_q.weight";
    assert_ne!(
        fa.tensor_by_name(q).unwrap().1,
        fb.tensor_by_name(q).unwrap().1
    );
    let norm = "blk.0.attn_norm.weight";
    assert_eq!(
        fa.tensor_by_name(norm).unwrap().1,
        fb.tensor_by_name(norm).unwrap().1
    );
}

#[test]
fn vocabularies_are_padded_or_cut_to_the_model_size() {
    let Some(vocab) = smollm2_vocab() else {
        return;
    };
    let src = Gguf::open(&vocab).unwrap();
    for n in [49159u64, 1000] {
        let mut b = GgufBuilder::new();
        copy_tokenizer(&src, n, &mut b).unwrap();
        let get = |k: &str| {
            b.metadata()
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let Some(OwnedValue::Array(_, tokens)) = get("tokenizer.ggml.tokens") else {
            panic!("no tokens");
        };
        let Some(OwnedValue::Array(_, types)) = get("tokenizer.ggml.token_type") else {
            panic!("no token types");
        };
        assert_eq!((tokens.len(), types.len()), (n as usize, n as usize));
        if n > 49152 {
            assert_eq!(tokens[49158], OwnedValue::string("[PAD49158]"));
            assert_eq!(types[49158], OwnedValue::I32(5));
        }
        assert_eq!(tokens[1], OwnedValue::string("<|im_start|>"));
        // Merges are not per token: copied whole.
        let Some(OwnedValue::Array(_, merges)) = get("tokenizer.ggml.merges") else {
            panic!("no merges");
        };
        assert_eq!(merges.len(), 48900);
    }
}

#[test]
fn unknown_shapes_are_refused_with_the_list() {
    let err = find("llama-7b").unwrap_err().to_string();
    assert!(
        err.contains("unknown shape") && err.contains("Qwen2.5-14B"),
        "{err}"
    );
}
