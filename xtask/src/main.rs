//! Project automation: `cargo xtask <command>`.
fn main() {}
