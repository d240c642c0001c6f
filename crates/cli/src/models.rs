//! Finding model files: a path, or a name in the models directory.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use lamina_model::{Load, LoadOptions};

use lamina_model::load::models_dir;

/// Resolves a model argument: an existing path, or a file name (with or
/// without `.gguf`) inside the models directory.
pub fn resolve(model: &str) -> Result<PathBuf> {
    let direct = Path::new(model);
    if direct.exists() {
        return Ok(direct.to_path_buf());
    }
    if let Some(found) = lamina_model::load::find_model(model) {
        return Ok(found);
    }
    let dir = models_dir();
    bail!(
        "model {model:?} not found: it is neither a file nor a name in {} \
         (run `cargo xtask models` to fetch the project's models)",
        dir.display()
    )
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
