//! docs/DEPLOY.md's Kubernetes manifest runs `lamina` with flags it has.

mod common;

use common::{lamina, ok};

/// The `args: [...]` list of the manifest in docs/DEPLOY.md.
fn manifest_args() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/DEPLOY.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = doc.find("args: [").expect("the manifest's args") + "args: ".len();
    let end = start + doc[start..].find(']').unwrap() + 1;
    // A YAML flow sequence of double-quoted strings is a JSON array.
    serde_json::from_str(&doc[start..end]).unwrap()
}

#[test]
fn the_manifest_args_are_lamina_serve_flags() {
    let args = manifest_args();
    assert_eq!(args[0], "serve");
    assert!(args.iter().any(|a| a == "--host"), "{args:?}");
    // Parsed up to --help, which stops before any model is loaded: an
    // unknown flag or a bad value fails instead.
    let mut with_help: Vec<&str> = args.iter().map(String::as_str).collect();
    with_help.push("--help");
    let help = ok(&lamina(&with_help, b""));
    assert!(help.contains("--parallel"), "{help}");
    let mut misspelt = with_help.clone();
    misspelt.insert(1, "--thread");
    assert!(!lamina(&misspelt, b"").status.success());
}
