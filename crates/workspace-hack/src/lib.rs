//! No code: this crate's dependencies align the features of the CLI's and
//! the Python module's builds (see its `Cargo.toml`).
