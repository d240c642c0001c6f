//! Models by name: `hf://ORG/REPO[:QUANT]` on the Hugging Face Hub, or a
//! file name in lamina's models directory.
//!
//! A GGUF repo gives the file of the asked quantization (Q4_K_M when none
//! is asked for, as llama.cpp picks). A safetensors checkpoint is converted
//! with [`lamina_model::convert`] on first use, to f16 or to the asked
//! type, and kept under `$LAMINA_MODELS/hf/`. Downloads go to the Hugging
//! Face cache (`HF_HUB_CACHE`, `HF_HOME`), so Python tools share them;
//! each is checked against the hub's checksum, and a broken one resumes.
//! Once pulled, a model loads without the network.
//!
//! The hub (or the mirror `HF_ENDPOINT` names) is trusted as far as its
//! answers name cache paths: hf-hub builds them from response headers.
//! Listed file names are checked before use.

#![forbid(unsafe_code)]

mod error;
mod hub;
pub mod progress;
mod select;
mod spec;
mod verify;

use std::path::{Path, PathBuf};

pub use error::HubError;
pub use hub::{DEFAULT_ENDPOINT, Hub, Pulled};
pub use select::DEFAULT_QUANT;
pub use spec::{HubModel, SCHEME};

/// Resolves a model argument as every lamina tool does: `hf://ORG/REPO[:QUANT]`
/// from the hub ([`Hub::from_env`], pulled on first use), else an existing
/// path, else a file name (with or without `.gguf`) in
/// [`lamina_model::load::models_dir`].
pub fn resolve(arg: &str) -> Result<PathBuf, HubError> {
    if let Some(model) = HubModel::from_uri(arg) {
        return Hub::from_env().resolve(&model?).map(|p| p.path);
    }
    let direct = Path::new(arg);
    if direct.exists() {
        return Ok(direct.to_path_buf());
    }
    lamina_model::load::find_model(arg).ok_or_else(|| HubError::NoSuchModel {
        arg: arg.to_string(),
        dir: lamina_model::load::models_dir(),
    })
}
