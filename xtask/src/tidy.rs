//! Repository rules ("tidy" checks, in the style of rust-analyzer's).
//!
//! Each rule is a checker function over in-memory text that returns its
//! violations, so it can be tested on small bad examples; [`check_repo`] runs
//! them over the workspace. They run as tests (`cargo test -p xtask`) and as
//! `cargo xtask tidy`.
//!
//! * Layering: `gguf → quant → kernels → model → server → cli`; a crate may depend
//!   only on crates before it (xtask, on top, is not constrained). The test
//!   support crate `lamina-testkit` depends on no lamina crate and is only
//!   ever a dev-dependency.
//! * `unsafe` appears only in `crates/quant`, `crates/kernels` and
//!   `crates/gguf/src/mmap.rs`.
//! * Every `unsafe {` block and `unsafe impl` has a `// SAFETY:` comment on
//!   the same line or in the comment block directly above (attribute lines
//!   may sit in between).
//! * Every `#[target_feature(enable = ...)]` function lives in a file or
//!   inline module whose path names the ISA.
//! * No library source file (`crates/*/src/**/*.rs`) is longer than
//!   [`MAX_LIB_LINES`].
//! * The CLI's and the Python module's builds ask for the same features of
//!   every crate they share ([`crate::tidy_features`]).
//! * `workspace-hack` depends on no lamina crate.
//!
//! Rust source is scanned with a small lexer that drops comments, string and
//! character literals, so `unsafe` in a doc comment or a string is not code.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The library crates in layer order: each may depend only on earlier ones.
pub(crate) const LAYERS: [&str; 8] = [
    "lamina-gguf",
    "lamina-quant",
    "lamina-kernels",
    "lamina-model",
    "lamina-hub",
    "lamina-server",
    "lamina-cli",
    "lamina-python",
];

/// The test and bench support crate: it may depend on no lamina crate, and
/// the others list it only under dev-dependencies.
pub(crate) const TEST_SUPPORT: &str = "lamina-testkit";

/// The crate that aligns the CLI's and the Python module's features: it may
/// depend on no lamina crate.
pub(crate) const FEATURE_UNION: &str = "workspace-hack";

/// The most lines a library source file may hold.
pub(crate) const MAX_LIB_LINES: usize = 1_000;

/// Where `unsafe` may appear: path prefixes relative to the workspace root.
pub(crate) const UNSAFE_ALLOWED: [&str; 3] = [
    "crates/quant/",
    "crates/kernels/",
    "crates/gguf/src/mmap.rs",
];

/// Path components (prefixes) that name an instruction set.
pub(crate) const ISA_NAMES: [&str; 8] =
    ["x86", "avx", "sse", "fma", "aarch64", "arm", "neon", "wasm"];

/// How many lines above an `unsafe` a `// SAFETY:` comment block may end at
/// most before the search gives up (the block itself must be contiguous).
const SAFETY_LOOKBACK: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// Path relative to the workspace root (or a test's made-up name).
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// `cargo xtask tidy`.
pub(crate) fn run(root: &Path) -> Result<()> {
    let violations = check_repo(root)?;
    if violations.is_empty() {
        println!("tidy: all repository rules hold");
        return Ok(());
    }
    for v in &violations {
        eprintln!("{v}");
    }
    bail!("tidy: {} violation(s)", violations.len())
}

/// Runs every rule over the workspace at `root`.
pub(crate) fn check_repo(root: &Path) -> Result<Vec<Violation>> {
    let mut violations = Vec::new();

    let mut manifests = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let manifest = entry?.path().join("Cargo.toml");
        if manifest.is_file() {
            manifests.push((rel(root, &manifest), fs::read_to_string(&manifest)?));
        }
    }
    if manifests.is_empty() {
        bail!("no crates/*/Cargo.toml under {}", root.display());
    }
    manifests.sort();
    for (path, text) in &manifests {
        violations.extend(check_layering(path, text));
    }

    let mut sources = Vec::new();
    collect_rs_files(root, root, &mut sources)?;
    if sources.is_empty() {
        bail!("no .rs files under {}", root.display());
    }
    sources.sort();
    for path in &sources {
        let text = fs::read_to_string(root.join(path))?;
        let lexed = lex(&text);
        violations.extend(check_unsafe_location(path, &lexed));
        violations.extend(check_safety_comments(path, &lexed));
        violations.extend(check_target_feature(path, &lexed));
    }
    violations.extend(long_library_files(root)?);
    violations.extend(crate::tidy_features::check_builds(root)?);
    Ok(violations)
}

/// The library source files over [`MAX_LIB_LINES`], longest first.
pub(crate) fn long_library_files(root: &Path) -> Result<Vec<Violation>> {
    let mut sources = Vec::new();
    collect_rs_files(root, &root.join("crates"), &mut sources)?;
    let mut long = Vec::new();
    for path in sources {
        let lines = fs::read_to_string(root.join(&path))?.lines().count();
        long.extend(check_length(&path, lines));
    }
    long.sort_by_key(|v| std::cmp::Reverse(v.line));
    Ok(long)
}

/// A library source file (`crates/NAME/src/...`) of `lines` lines longer
/// than [`MAX_LIB_LINES`]; the violation's line is the file's length.
pub(crate) fn check_length(path: &str, lines: usize) -> Option<Violation> {
    let mut parts = path.split('/');
    let library = parts.next() == Some("crates")
        && parts.next().is_some()
        && parts.next() == Some("src")
        && path.ends_with(".rs");
    (library && lines > MAX_LIB_LINES).then(|| Violation {
        file: path.to_owned(),
        line: lines,
        message: format!(
            "{lines} lines: a library source file may hold at most {MAX_LIB_LINES}; split it by concern"
        ),
    })
}

fn rel(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.to_string_lossy().replace('\\', "/")
}

/// All `.rs` files below `dir`, skipping hidden folders and build output.
fn collect_rs_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path: PathBuf = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type()?.is_dir() {
            if !name.starts_with('.') && name != "target" {
                collect_rs_files(root, &path, out)?;
            }
        } else if name.ends_with(".rs") {
            out.push(rel(root, &path));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Layering
// ---------------------------------------------------------------------------

/// Checks one crate manifest: its `lamina-*` dependencies (normal, dev,
/// build, target-specific) must all come before it in [`LAYERS`].
pub(crate) fn check_layering(path: &str, manifest: &str) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut section = String::new();
    let mut name = None;
    // (line, crate, whether in a dev-dependencies table).
    let mut deps = Vec::new();
    for (i, raw) in manifest.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            // `[dependencies.lamina-x]` style.
            if let Some((table, dep)) = section.rsplit_once('.')
                && table.ends_with("dependencies")
                && dep.starts_with("lamina-")
            {
                let dev = table.ends_with("dev-dependencies");
                deps.push((i + 1, dep.trim_matches('"').to_owned(), dev));
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        if section == "package" && key == "name" {
            name = Some(value.trim().trim_matches('"').to_owned());
        } else if section.ends_with("dependencies") {
            // `lamina-x = ...`, `lamina-x.workspace = true`, or a renamed
            // dependency `foo = { package = "lamina-x", ... }`.
            let dep_key = key
                .split('.')
                .next()
                .unwrap_or(key)
                .trim()
                .trim_matches('"');
            let renamed = value
                .split_once("package")
                .and_then(|(_, rest)| rest.split('"').nth(1))
                .filter(|p| p.starts_with("lamina-"));
            let dev = section.ends_with("dev-dependencies");
            if let Some(dep) = renamed {
                deps.push((i + 1, dep.to_owned(), dev));
            } else if dep_key.starts_with("lamina-") {
                deps.push((i + 1, dep_key.to_owned(), dev));
            }
        }
    }
    let Some(name) = name else {
        violations.push(Violation {
            file: path.to_owned(),
            line: 1,
            message: "no [package] name".to_owned(),
        });
        return violations;
    };
    if name == TEST_SUPPORT || name == FEATURE_UNION {
        for (line, dep, _) in deps {
            violations.push(Violation {
                file: path.to_owned(),
                line,
                message: format!("{name} may depend on no lamina crate, not on {dep}"),
            });
        }
        return violations;
    }
    let Some(layer) = LAYERS.iter().position(|l| *l == name) else {
        violations.push(Violation {
            file: path.to_owned(),
            line: 1,
            message: format!("crate {name} is not in the layer list {LAYERS:?}; add it"),
        });
        return violations;
    };
    for (line, dep, dev) in deps {
        if dep == TEST_SUPPORT {
            if !dev {
                violations.push(Violation {
                    file: path.to_owned(),
                    line,
                    message: format!("{name} may have {TEST_SUPPORT} only as a dev-dependency"),
                });
            }
            continue;
        }
        let ok = LAYERS
            .iter()
            .position(|l| *l == dep)
            .is_some_and(|d| d < layer);
        if !ok {
            violations.push(Violation {
                file: path.to_owned(),
                line,
                message: format!(
                    "{name} may depend only on {:?}, not on {dep}",
                    &LAYERS[..layer]
                ),
            });
        }
    }
    violations
}

// ---------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) text: String,
    pub(crate) line: usize,
}

/// Source reduced to what the rules need.
#[derive(Debug, Default)]
pub(crate) struct Lexed {
    /// Identifiers, numbers and punctuation, without comments or literals.
    pub(crate) tokens: Vec<Token>,
    /// Comment text by line (1-based index; index 0 unused). A block
    /// comment contributes to every line it spans.
    pub(crate) comments: Vec<String>,
}

impl Lexed {
    fn comment(&self, line: usize) -> &str {
        self.comments.get(line).map_or("", String::as_str)
    }

    /// Whether line `line` holds code tokens, and whether the first is `#`.
    fn line_kind(&self, line: usize) -> (bool, bool) {
        let first = self.tokens.partition_point(|t| t.line < line);
        match self.tokens.get(first) {
            Some(t) if t.line == line => (true, t.text == "#"),
            _ => (false, false),
        }
    }
}

/// Splits Rust source into tokens and comments. Approximate but good enough
/// for rules: handles line, nested block and doc comments; string, byte, C
/// and raw string literals; char literals versus lifetimes.
pub(crate) fn lex(src: &str) -> Lexed {
    let chars: Vec<char> = src.chars().collect();
    let line_count = src.lines().count() + 2;
    let mut out = Lexed {
        tokens: Vec::new(),
        comments: vec![String::new(); line_count],
    };
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let push_comment = |out: &mut Lexed, line: usize, c: char| {
        if line >= out.comments.len() {
            out.comments.resize(line + 1, String::new());
        }
        out.comments[line].push(c);
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                push_comment(&mut out, line, chars[i]);
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    push_comment(&mut out, line, '/');
                    i += 1;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    push_comment(&mut out, line, '*');
                    i += 1;
                    if depth == 0 {
                        push_comment(&mut out, line, '/');
                        i += 1;
                        break;
                    }
                } else if chars[i] == '\n' {
                    line += 1;
                } else {
                    push_comment(&mut out, line, chars[i]);
                }
                i += 1;
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1, &mut line);
        } else if c == '\'' {
            // A char literal is '\…' or 'x'; anything else is a lifetime or
            // a label, kept as a token.
            if at(i + 1) == '\\' {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else if at(i + 2) == '\'' && at(i + 1) != '\n' {
                i += 3;
            } else {
                out.tokens.push(Token {
                    text: "'".to_owned(),
                    line,
                });
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i + 1, &mut line);
            } else if word == "b" && at(i) == '\'' {
                // Byte literal b'x' / b'\n'.
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else if let Some(hashes) = raw_string_hashes(&chars, i).filter(|_| raw_prefix) {
                i += hashes + 1; // hashes and opening quote
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
            } else if word == "r" && at(i) == '#' {
                // Raw identifier r#name: the name is the token.
                i += 1;
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let text = chars[start..i].iter().collect();
                out.tokens.push(Token { text, line });
            } else {
                out.tokens.push(Token { text: word, line });
            }
        } else {
            out.tokens.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// At `i` just after a raw-string prefix: `Some(number of #)` if `#*"`
/// follows (a raw string), `None` otherwise (e.g. a raw identifier).
fn raw_string_hashes(chars: &[char], i: usize) -> Option<usize> {
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + hashes) == Some(&'"')).then_some(hashes)
}

/// Skips a (non-raw) string body starting after its opening quote; returns
/// the index after the closing quote.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            '\n' => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

// ---------------------------------------------------------------------------
// unsafe rules
// ---------------------------------------------------------------------------

fn unsafe_allowed(path: &str) -> bool {
    UNSAFE_ALLOWED.iter().any(|prefix| path.starts_with(prefix))
}

/// `unsafe` as code only where [`UNSAFE_ALLOWED`] permits it.
pub(crate) fn check_unsafe_location(path: &str, lexed: &Lexed) -> Vec<Violation> {
    if unsafe_allowed(path) {
        return Vec::new();
    }
    lexed
        .tokens
        .iter()
        .filter(|t| t.text == "unsafe")
        .map(|t| Violation {
            file: path.to_owned(),
            line: t.line,
            message: format!("`unsafe` is allowed only in {UNSAFE_ALLOWED:?}"),
        })
        .collect()
}

/// Every `unsafe {` and `unsafe impl` needs a `// SAFETY:` comment on its
/// line or in the comment block directly above it (attribute lines may sit
/// between). Applies to every file, so misplaced `unsafe` reports both.
pub(crate) fn check_safety_comments(path: &str, lexed: &Lexed) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (k, token) in lexed.tokens.iter().enumerate() {
        if token.text != "unsafe" {
            continue;
        }
        let what = match lexed.tokens.get(k + 1).map(|t| t.text.as_str()) {
            Some("{") => "block",
            Some("impl") => "impl",
            _ => continue,
        };
        if !has_safety_comment(lexed, token.line) {
            violations.push(Violation {
                file: path.to_owned(),
                line: token.line,
                message: format!("`unsafe` {what} without a `// SAFETY:` comment directly above"),
            });
        }
    }
    violations
}

fn has_safety_comment(lexed: &Lexed, line: usize) -> bool {
    if lexed.comment(line).contains("SAFETY:") {
        return true;
    }
    let mut l = line;
    while l > 1 && line - l < SAFETY_LOOKBACK {
        l -= 1;
        let (has_code, is_attr) = lexed.line_kind(l);
        let comment = lexed.comment(l);
        if comment.contains("SAFETY:") {
            return true;
        }
        let comment_only = !has_code && !comment.is_empty();
        if !(comment_only || is_attr) {
            return false;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// target_feature rule
// ---------------------------------------------------------------------------

/// The file whose macros spell each ISA's feature set once
/// (`target_fns!`) and write the kernels' entry points (`kernel_fns!`).
const FEATURE_MACROS: &str = "crates/kernels/src/macros.rs";

/// `#[target_feature(...)]`, and the macros that write it, only in files or
/// inline modules whose path names an ISA (see [`ISA_NAMES`]), except in
/// [`FEATURE_MACROS`], which defines those macros.
pub(crate) fn check_target_feature(path: &str, lexed: &Lexed) -> Vec<Violation> {
    if path == FEATURE_MACROS {
        return Vec::new();
    }
    let mut violations = Vec::new();
    // Inline modules: (name, brace depth inside the module).
    let mut modules: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let tokens = &lexed.tokens;
    for (k, token) in tokens.iter().enumerate() {
        let next = |n: usize| tokens.get(k + n).map_or("", |t| t.text.as_str());
        match token.text.as_str() {
            "{" => depth += 1,
            "}" => {
                if modules.last().is_some_and(|(_, d)| *d == depth) {
                    modules.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if next(2) == "{" => modules.push((next(1).to_owned(), depth + 1)),
            // `target_feature(` is the attribute; `cfg(target_feature = ..)`
            // is only a condition.
            name @ ("target_feature" | "target_fns" | "kernel_fns")
                if next(1) == if name == "target_feature" { "(" } else { "!" } =>
            {
                let mut full = path.to_lowercase();
                for (name, _) in &modules {
                    full.push_str("::");
                    full.push_str(&name.to_lowercase());
                }
                if !names_an_isa(&full) {
                    violations.push(Violation {
                        file: path.to_owned(),
                        line: token.line,
                        message: format!(
                            "{name} outside an ISA-named module ({full} names none of {ISA_NAMES:?})"
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    violations
}

/// Whether some component of `path` (split at `/`, `::`, `_`, `.`, ...)
/// starts with an ISA name: `x86_64`, `avx512f`, `sse41`, `neon`, ...
fn names_an_isa(path: &str) -> bool {
    path.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|part| ISA_NAMES.iter().any(|isa| part.starts_with(isa)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[Violation]) -> Vec<usize> {
        v.iter().map(|v| v.line).collect()
    }

    /// The real repository obeys every rule.
    #[test]
    fn repository_follows_the_rules() {
        let root = crate::workspace_root();
        let violations = check_repo(&root).unwrap();
        let report: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(
            violations.is_empty(),
            "repository rules broken:\n{}",
            report.join("\n")
        );
    }

    #[test]
    fn repo_scan_sees_the_known_unsafe() {
        // Guards against the scanner silently finding nothing.
        let root = crate::workspace_root();
        let text = fs::read_to_string(root.join("crates/gguf/src/mmap.rs")).unwrap();
        assert!(lex(&text).tokens.iter().any(|t| t.text == "unsafe"));
        let mut files = Vec::new();
        collect_rs_files(&root, &root, &mut files).unwrap();
        assert!(files.iter().any(|f| f == "crates/gguf/src/mmap.rs"));
        assert!(files.iter().any(|f| f == "xtask/src/tidy.rs"));
    }

    #[test]
    fn layering_accepts_downward_deps() {
        let manifest = r#"
[package]
name = "lamina-model"

[dependencies]
lamina-gguf.workspace = true
lamina-quant = { workspace = true }
lamina-kernels.workspace = true
anyhow.workspace = true
"#;
        assert_eq!(check_layering("crates/model/Cargo.toml", manifest), vec![]);
    }

    #[test]
    fn layering_rejects_upward_sideways_and_self_deps() {
        let manifest = r#"
[package]
name = "lamina-quant"   # comment

[dependencies]
lamina-gguf.workspace = true
lamina-kernels.workspace = true

[dev-dependencies]
lamina-quant = { path = "." }

[target.'cfg(unix)'.dependencies]
cli = { package = "lamina-cli", path = "../cli" }

[build-dependencies.lamina-model]
path = "../model"
"#;
        let v = check_layering("crates/quant/Cargo.toml", manifest);
        assert_eq!(lines(&v), vec![7, 10, 13, 15], "{v:?}");
        assert!(v[0].message.contains("lamina-kernels"));
        assert!(v[0].to_string().starts_with("crates/quant/Cargo.toml:7:"));
    }

    #[test]
    fn test_support_is_a_leaf_and_only_a_dev_dependency() {
        let manifest = r#"
[package]
name = "lamina-model"

[dependencies]
lamina-testkit.workspace = true

[dev-dependencies]
lamina-testkit.workspace = true

[target.'cfg(unix)'.dev-dependencies]
lamina-testkit = { path = "../testkit" }
"#;
        let v = check_layering("crates/model/Cargo.toml", manifest);
        assert_eq!(lines(&v), vec![6], "{v:?}");
        assert!(v[0].message.contains("only as a dev-dependency"));
        let kit = "[package]\nname = \"lamina-testkit\"\n[dev-dependencies]\nlamina-gguf.workspace = true\n";
        let v = check_layering("crates/testkit/Cargo.toml", kit);
        assert_eq!(lines(&v), vec![4], "{v:?}");
        assert!(v[0].message.contains("no lamina crate"));
        let kit = "[package]\nname = \"lamina-testkit\"\n[dependencies]\nserde = \"1\"\n";
        assert_eq!(check_layering("crates/testkit/Cargo.toml", kit), vec![]);
    }

    #[test]
    fn library_files_over_the_limit_are_reported() {
        let v = check_length("crates/kernels/src/x86_64/avx2.rs", MAX_LIB_LINES + 1).unwrap();
        assert_eq!(v.line, MAX_LIB_LINES + 1);
        assert!(
            v.to_string()
                .starts_with("crates/kernels/src/x86_64/avx2.rs:1001: 1001 lines")
        );
        assert_eq!(
            check_length("crates/kernels/src/lib.rs", MAX_LIB_LINES),
            None
        );
        // Tests, benches and tools are not library source.
        for path in [
            "crates/model/tests/generate_gold.rs",
            "crates/kernels/benches/kernels.rs",
            "xtask/src/bench.rs",
            "benches/embed.rs",
        ] {
            assert_eq!(check_length(path, 5_000), None, "{path}");
        }
    }

    #[test]
    fn the_long_file_scan_sees_the_library_sources() {
        let root = crate::workspace_root();
        let long = long_library_files(&root).unwrap();
        assert!(
            long.iter()
                .all(|v| v.file.starts_with("crates/") && v.line > MAX_LIB_LINES)
        );
        assert!(long.windows(2).all(|w| w[0].line >= w[1].line));
    }

    #[test]
    fn layering_rejects_unknown_crates() {
        let v = check_layering(
            "crates/new/Cargo.toml",
            "[package]\nname = \"lamina-new\"\n",
        );
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("not in the layer list"));
        let deps = "[package]\nname = \"lamina-gguf\"\n[dependencies]\nlamina-x = \"1\"\n";
        assert_eq!(
            lines(&check_layering("crates/gguf/Cargo.toml", deps)),
            vec![4]
        );
    }

    const UNSAFE_IN_CODE: &str = r##"
//! Docs may say unsafe { freely }.
/* block comment: unsafe impl /* nested unsafe */ still comment */
fn f() -> &'static str {
    let s = "unsafe { in a string }";
    let r = r#"unsafe " impl"#;
    let c = '"';
    let b = b"unsafe";
    #![forbid(unsafe_code)]
    // SAFETY: a comment does not make it allowed here.
    unsafe { g() }
}
"##;

    #[test]
    fn unsafe_outside_allowed_places_is_reported() {
        let lexed = lex(UNSAFE_IN_CODE);
        let v = check_unsafe_location("crates/model/src/lib.rs", &lexed);
        assert_eq!(lines(&v), vec![11], "{v:?}");
        assert_eq!(
            check_unsafe_location("crates/kernels/src/x86.rs", &lexed),
            vec![]
        );
        assert_eq!(
            check_unsafe_location("crates/quant/src/lib.rs", &lexed),
            vec![]
        );
        assert_eq!(
            check_unsafe_location("crates/gguf/src/mmap.rs", &lexed),
            vec![]
        );
        let v = check_unsafe_location("crates/gguf/src/lib.rs", &lexed);
        assert_eq!(lines(&v), vec![11]);
    }

    #[test]
    fn comments_and_literals_are_not_code() {
        let src = "// unsafe\n/// unsafe fn\nconst A: &str = \"unsafe\";\nconst B: char = '\\'';\nfn x<'a>(v: &'a u8) {}\nconst C: &str = r##\"a \"# unsafe \"##;\n";
        let lexed = lex(src);
        assert!(
            !lexed.tokens.iter().any(|t| t.text == "unsafe"),
            "{:?}",
            lexed.tokens
        );
        assert_eq!(
            check_unsafe_location("crates/cli/src/main.rs", &lexed),
            vec![]
        );
        // Lifetimes stay tokens and do not swallow the code after them.
        assert!(lexed.tokens.iter().any(|t| t.text == "x" && t.line == 5));
        assert!(lexed.comment(1).contains("unsafe"));
    }

    #[test]
    fn missing_safety_comments_are_reported() {
        let src = r#"
fn ok1() {
    // SAFETY: documented.
    unsafe { a() }
}
fn ok2() {
    let x = unsafe { b() }; // SAFETY: same line.
    // SAFETY: multi-line
    // explanation, ending a few lines above.
    // More words.
    let y = unsafe {
        c()
    };
}
// SAFETY: impl documented.
#[cfg(unix)]
unsafe impl Send for T {}

fn bad1() {
    unsafe { d() }
}
// SAFETY: too far away, separated by code.
fn bad2() {
    let z = 1;
    unsafe {
        e()
    }
}
unsafe impl Sync for T {}
// Not a safety comment.
unsafe impl Sync for U {}
/// # Safety
/// Documented unsafe fn: not a block, not checked here.
unsafe fn f() {}
"#;
        let v = check_safety_comments("crates/kernels/src/lib.rs", &lex(src));
        assert_eq!(lines(&v), vec![20, 25, 29, 31], "{v:?}");
        assert!(v[2].message.contains("impl"));
        assert!(
            v[0].to_string()
                .starts_with("crates/kernels/src/lib.rs:20:")
        );
    }

    #[test]
    fn target_feature_needs_an_isa_named_module() {
        let src = r#"
#[cfg(target_feature = "avx2")]
fn only_cfg() {}

#[target_feature(enable = "avx2")]
unsafe fn bad_top() {}

mod avx2 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn ok_inline() {}
}

mod generic {
    fn f() { let _ = {}; }
    #[target_feature(enable = "avx512f")]
    unsafe fn bad_inline() {}
}
"#;
        let lexed = lex(src);
        let v = check_target_feature("crates/kernels/src/matmul.rs", &lexed);
        assert_eq!(lines(&v), vec![5, 15], "{v:?}");
        let v = check_target_feature("crates/kernels/src/x86/matmul.rs", &lexed);
        assert_eq!(v, vec![]);
        let v = check_target_feature("crates/kernels/src/aarch64.rs", &lexed);
        assert_eq!(v, vec![]);
    }

    #[test]
    fn feature_macros_are_used_in_isa_modules_only() {
        let src = "kernel_fns! { dot avx2; }\ntarget_fns! { avx2: unsafe fn f() {} }\n";
        let lexed = lex(src);
        let v = check_target_feature("crates/kernels/src/ops.rs", &lexed);
        assert_eq!(lines(&v), vec![1, 2], "{v:?}");
        let v = check_target_feature("crates/kernels/src/x86_64/avx2/dot.rs", &lexed);
        assert_eq!(v, vec![]);
        let defs =
            "macro_rules! target_fns { () => { #[target_feature(enable = \"neon\")] fn f() {} } }";
        assert_eq!(check_target_feature(FEATURE_MACROS, &lex(defs)), vec![]);
    }
}
