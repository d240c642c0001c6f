//! Empty: it exists so Cargo resolves this crate's build-dependencies.

fn main() {}
