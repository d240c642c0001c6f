//! Finding model files: a path, or a name in the models directory.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// Resolves a model argument: an existing path, or a file name (with or
/// without `.gguf`) inside the models directory.
pub fn resolve(model: &str) -> Result<PathBuf> {
    let direct = Path::new(model);
    if direct.exists() {
        return Ok(direct.to_path_buf());
    }
    let dir = lamina_gguf::models_dir();
    for candidate in [dir.join(model), dir.join(format!("{model}.gguf"))] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "model {model:?} not found: it is neither a file nor a name in {} \
         (run `cargo xtask models` to fetch the project's models)",
        dir.display()
    )
}
