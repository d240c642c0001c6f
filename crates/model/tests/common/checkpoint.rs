//! The family conformance checkpoints of `testdata/families/`, rebuilt
//! bit for bit by [`lamina_testkit::checkpoint`] (the Rust twin of
//! `testdata/families/make_checkpoints.py`), and the comparison of GGUF
//! summaries with the gold's.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

pub use super::summary::{hex, summarise};

/// `testdata/families/`.
pub fn families_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/families")
}

pub use lamina_testkit::checkpoint::{Manifest, Tensor, TensorSpec, Xorshift, read_json};

pub fn manifest(family: &str) -> Manifest {
    lamina_testkit::checkpoint::manifest(&families_dir().join(family))
}

/// The tensors of `family` in manifest order; an error names the first
/// whose bytes differ from the Python generator's.
pub fn tensors(family: &str) -> Result<Vec<Tensor>, String> {
    lamina_testkit::checkpoint::tensors(family, &manifest(family))
}

/// Writes `parent/FAMILY/` (config.json, tokenizer files, model.safetensors)
/// and returns it. The folder is named after the family because the
/// converter derives `general.name` from it, as the gold's conversion did.
pub fn write_checkpoint(family: &str, parent: &Path) -> Result<PathBuf, String> {
    let src = families_dir().join(family);
    let dir = parent.join(family);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (from, name) in [
        (src.join("config.json"), "config.json"),
        (src.join("tokenizer_config.json"), "tokenizer_config.json"),
        (
            families_dir().join("tokenizer/tokenizer.model"),
            "tokenizer.model",
        ),
    ] {
        std::fs::copy(&from, dir.join(name)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    lamina_testkit::checkpoint::write_safetensors(
        &dir.join("model.safetensors"),
        &tensors(family)?,
    )?;
    Ok(dir)
}

/// The first difference between a summary and the gold's, in words.
pub fn first_difference(ours: &Json, gold: &Json) -> Option<String> {
    let (om, gm) = (
        ours["metadata"].as_array().unwrap(),
        gold["metadata"].as_array().unwrap(),
    );
    for i in 0..om.len().max(gm.len()) {
        match (om.get(i), gm.get(i)) {
            (Some(o), Some(g)) if o == g => {}
            (o, g) => {
                return Some(format!(
                    "metadata entry {i}: ours {}, Python's {}",
                    o.map_or("(none)".into(), Json::to_string),
                    g.map_or("(none)".into(), Json::to_string)
                ));
            }
        }
    }
    let (ot, gt) = (
        ours["tensors"].as_array().unwrap(),
        gold["tensors"].as_array().unwrap(),
    );
    for i in 0..ot.len().max(gt.len()) {
        match (ot.get(i), gt.get(i)) {
            (Some(o), Some(g)) if o == g => {}
            (o, g) => {
                return Some(format!(
                    "tensor {i}: ours {}, Python's {}",
                    o.map_or("(none)".into(), Json::to_string),
                    g.map_or("(none)".into(), Json::to_string)
                ));
            }
        }
    }
    None
}
