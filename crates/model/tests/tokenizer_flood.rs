//! A 4 MiB run of whitespace through Gemma's tokenizer, whose vocabulary
//! has special tokens for every run of 2-31 spaces and 1-31 newlines (so a
//! run ends a match of dozens of them at every byte): the peak memory grows
//! by less than 32 MB. Alone in its own test binary, so the process's peak
//! resident size measures this encode only.

mod common;

use lamina_gguf::Gguf;
use lamina_model::tokenizer::Tokenizer;

/// The process's peak resident set (`VmHWM`) in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line[6..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

#[test]
fn a_whitespace_flood_costs_memory_linear_in_its_size() {
    let g = Gguf::open(common::required("gemma-3-270m-Q4_K_M.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let run31 = tok.token_id(" ".repeat(31).as_bytes()).unwrap();
    let nl31 = tok.token_id("\n".repeat(31).as_bytes()).unwrap();
    // Builds the special-token finder, which is not per-input memory.
    assert!(!tok.encode("  \n\n x", true, true).is_empty());
    let n = 4 << 20;
    let spaces = " ".repeat(n);
    let newlines = "\n".repeat(n);
    let before = peak_rss();
    for (text, id) in [(&spaces, run31), (&newlines, nl31)] {
        let ids = tok.encode(text, false, true);
        assert_eq!(ids.len(), n.div_ceil(31));
        assert!(ids[..n / 31].iter().all(|&t| t == id));
    }
    let grown = peak_rss().saturating_sub(before);
    eprintln!("peak resident memory grew by {} MB", grown >> 20);
    assert!(grown < 32 << 20, "grew by {grown} bytes");
}
