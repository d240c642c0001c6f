//! Shared by the model tests: model files and the llama.cpp gold.
#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::path::{Path, PathBuf};

use lamina_model::Model;
use lamina_model::tokenizer::Tokenizer;
use sha2::{Digest, Sha256};

pub use lamina_testkit::{embedding_model, present, required, say_skipped, skip_or_fail};

pub mod checkpoint;
pub mod summary;

/// `testdata/chat`: real chat templates and llama.cpp's renderings of them.
pub fn chat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/chat")
}

/// A JSON file, parsed (the test fails naming the file if it cannot).
pub fn read_json(path: PathBuf) -> serde_json::Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The time the chat gold was rendered at (2025-03-14 09:30:00 UTC).
pub const CHAT_GOLD_TIME: u64 = 1_741_944_600;

/// Template `name` of `testdata/chat/templates/`, with the BOS/EOS texts
/// and clock llama.cpp rendered `gold` with.
pub fn gold_template(name: &str, gold: &serde_json::Value) -> lamina_model::chat::ChatTemplate {
    use lamina_model::chat::{ChatTemplate, TemplateSource};
    let path = chat_dir().join(format!("templates/{name}.jinja"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ChatTemplate::with_tokens(
        &src,
        TemplateSource::Custom,
        gold["bos_token"].as_str().unwrap(),
        gold["eos_token"].as_str().unwrap(),
        gold["add_bos"].as_bool().unwrap(),
    )
    .expect("template compiles")
    .strip_eos(gold["add_eos"].as_bool().unwrap())
    .at_time(CHAT_GOLD_TIME)
}

pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/generate")
        .join(rel)
}

/// `n` rows of `dim` little-endian f32 from a gold vector file.
pub fn f32_rows(path: &Path, n: usize, dim: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        bytes.len(),
        n * dim * 4,
        "{} has the wrong size",
        path.display()
    );
    bytes
        .chunks_exact(dim * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect()
}

/// Lists of token ids from a gold JSON array of arrays.
pub fn id_lists(v: &serde_json::Value) -> Vec<Vec<u32>> {
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

/// The hex SHA-256 of a file.
pub fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::io::copy(&mut f, &mut h).unwrap();
    format!("{:x}", h.finalize())
}

/// `name` from the models directory if it is the very file a gold was made
/// from (SHA-256 `want`, recorded in `pinned_in`); otherwise `None` after
/// [`skip_or_fail`] saying what is wrong and what remakes it.
pub fn pinned_model(name: &str, want: &str, pinned_in: &str) -> Option<PathBuf> {
    let p = present(name)?;
    let got = sha256(&p);
    if got != want {
        skip_or_fail(&format!(
            "{} is not the file the gold was made from (SHA-256 {got}, {pinned_in} pins {want}); \
             `cargo xtask models` rebuilds it",
            p.display()
        ));
        return None;
    }
    Some(p)
}

/// A model the generation gold was made from (its SHA-256 is in
/// `testdata/generate/models.sha256`), see [`pinned_model`].
pub fn gold_model(name: &str) -> Option<PathBuf> {
    let sums = std::fs::read_to_string(testdata("models.sha256")).unwrap();
    let want = sums
        .lines()
        .find_map(|l| l.strip_suffix(name).map(|h| h.trim().to_string()))
        .unwrap_or_else(|| panic!("{name} has no line in models.sha256"));
    pinned_model(name, &want, "testdata/generate/models.sha256")
}

pub fn load(path: &Path) -> (Model, Tokenizer) {
    let model = Model::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    (model, tok)
}

/// One llama.cpp run of `lcpp_gold`: the prompt, the continuation, and the
/// top-5 `(id, logit)` before each continuation token.
pub struct Gold {
    pub prompt_ids: Vec<u32>,
    pub ids: Vec<u32>,
    pub top: Vec<Vec<(u32, f32)>>,
}

pub fn gold(model: &str, file: &str) -> Gold {
    gold_at(&testdata(&format!("{model}/{file}.json")))
}

/// A gold file `lcpp_gold` wrote.
pub fn gold_at(path: &Path) -> Gold {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let top = v["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step.as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                .collect()
        })
        .collect();
    Gold {
        prompt_ids: ids("prompt_ids"),
        ids: ids("ids"),
        top,
    }
}

pub fn prompt_text(name: &str) -> String {
    std::fs::read_to_string(testdata(&format!("prompts/{name}.txt"))).unwrap()
}

/// The prompts of a model's gold (the chat prompt is in its own format).
pub fn prompts(model: &str) -> [&'static str; 7] {
    let chat = if model.starts_with("gemma") {
        "chat-gemma3"
    } else {
        "chat-smollm2"
    };
    [
        "factual",
        "code",
        "list",
        "multilingual",
        chat,
        "long",
        "window",
    ]
}

/// Whether this CPU's selected kernels store matrices of `ty` as panels: a
/// test comparing stored panels with rows checks nothing where it is false,
/// so it says it skipped instead.
pub fn panels_stored_here(ty: lamina_kernels::GgmlType, test: &str) -> bool {
    let stored = lamina_kernels::kernels(ty).is_ok_and(|k| k.stored.is_some());
    if !stored {
        say_skipped(&format!(
            "{test}: the selected ISA ({}) stores no {ty} panels, so there is nothing to compare",
            lamina_kernels::Isa::selected().map_or("?", |i| i.name())
        ));
    }
    stored
}
