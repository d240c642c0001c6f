//! What both benches share: finding a model.

use std::path::PathBuf;

/// `name` in the models directory, or `None` after a skip line: a bench
/// without its model measures nothing rather than failing the run.
pub fn model(name: &str, bench: &str) -> Option<PathBuf> {
    let found = lamina_testkit::find_first(&[name]);
    if found.is_none() {
        lamina_testkit::say_skipped(&format!(
            "bench {bench}: {name} is not in {} (`cargo xtask models` fetches it; LAMINA_MODELS overrides the folder)",
            lamina_testkit::models_dir().display()
        ));
    }
    found
}
