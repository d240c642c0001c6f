//! How a model file becomes a [`Model`]: [`LoadOptions`] gathers the choices
//! (how the bytes come into memory, whether matrices are stored as panels)
//! and opens a path or a parsed [`Gguf`] with them.
//!
//! ```no_run
//! use lamina_model::{Load, LoadOptions, Model};
//!
//! // Defaults: mapped, panels for generation models only.
//! let model = Model::open("model.gguf")?;
//! // Read into memory and stored as panels whatever the architecture.
//! let served = LoadOptions::new().load(Load::Read).panels(true).open("model.gguf")?;
//! # Ok::<(), lamina_model::ModelError>(())
//! ```

use std::path::{Path, PathBuf};

use lamina_gguf::Gguf;

use crate::ModelError;
use crate::hparams::HParams;
use crate::transformer::Model;

/// How a model file's bytes come into memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Load {
    /// Mapped ([`Gguf::open`]): nothing is read until used, and processes
    /// share the page cache.
    #[default]
    Map,
    /// Read into anonymous memory on 2 MiB pages ([`Gguf::read`]): decoding,
    /// which streams every weight once a token, then runs at the same speed
    /// whatever pages the file's page cache happens to hold (a file just
    /// written or downloaded stays in 4 KiB pages however it is mapped).
    Read,
}

/// The choices made when loading a model; [`LoadOptions::new`] gives the
/// defaults that [`Model::open`] uses.
///
/// Storing matrices as panels rewrites them once at load into the layout the
/// batched kernels read fastest (where the ISA has such kernels); results are
/// the same bit for bit either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    load: Load,
    /// `None`: decided by the architecture ([`LoadOptions::panels`]).
    panels: Option<bool>,
}

impl LoadOptions {
    /// The defaults: [`Load::Map`], and panels for generation models only.
    pub fn new() -> LoadOptions {
        LoadOptions::default()
    }

    /// How the file's bytes come into memory (default [`Load::Map`]).
    pub fn load(mut self, load: Load) -> LoadOptions {
        self.load = load;
        self
    }

    /// Stores every matrix as panels (`true`) or keeps the file's rows
    /// (`false`), whatever the architecture. Unset, a generation model is
    /// stored as panels, since generation streams every matrix once a token,
    /// and an embedding model keeps its rows, since a one-shot embedding
    /// would pay the rewrite at every start. A process that loads an
    /// embedding model once and serves it should pass `true`.
    pub fn panels(mut self, panels: bool) -> LoadOptions {
        self.panels = Some(panels);
        self
    }

    /// Opens the GGUF file at `path` and checks every tensor the
    /// architecture needs.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Model, ModelError> {
        let file = match self.load {
            Load::Map => Gguf::open(path)?,
            Load::Read => Gguf::read(path)?,
        };
        self.open_gguf(file)
    }

    /// Builds a model from an already parsed file ([`LoadOptions::load`]
    /// does not apply: the file's bytes are already where they are).
    pub fn open_gguf(&self, file: Gguf) -> Result<Model, ModelError> {
        let panels = self.panels;
        Model::load_with(file, |hp: &HParams| panels.unwrap_or(!hp.is_embedding()))
    }
}

/// The directory holding model files by name: `$LAMINA_MODELS` when set and
/// not empty, else `~/.cache/lamina/models` (where `cargo xtask models`
/// puts them).
pub fn models_dir() -> PathBuf {
    match std::env::var_os("LAMINA_MODELS") {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/lamina/models")
        }
    }
}

/// A model named `name` (with or without `.gguf`) in [`models_dir`].
pub fn find_model(name: &str) -> Option<PathBuf> {
    let dir = models_dir();
    [dir.join(name), dir.join(format!("{name}.gguf"))]
        .into_iter()
        .find(|p| p.is_file())
}
