//! Finding model files: a path, a name in the models directory, or a model
//! on the Hugging Face Hub (`hf://ORG/REPO[:QUANT]`).

use std::path::PathBuf;

use anyhow::Result;
use lamina_model::{Load, LoadOptions};

/// Resolves a model argument ([`lamina_hub::resolve`]): `hf://` names are
/// pulled into the cache on first use.
pub fn resolve(model: &str) -> Result<PathBuf> {
    Ok(lamina_hub::resolve(model)?)
}

/// Whether `LAMINA_PANELS=0` asks to keep every model's matrices as the
/// file's rows (for A/B timings of the panel kernels).
fn panels_off() -> bool {
    std::env::var_os("LAMINA_PANELS").is_some_and(|v| v == "0")
}

/// How to load a model: `load`, and matrices stored as panels if `panels`
/// (`None`: the library's per-architecture default), unless
/// `LAMINA_PANELS=0` keeps the rows.
pub fn load_options(load: Load, panels: Option<bool>) -> LoadOptions {
    let opts = LoadOptions::new().load(load);
    match panels {
        _ if panels_off() => opts.panels(false),
        Some(p) => opts.panels(p),
        None => opts,
    }
}
