//! The character classes of Hugging Face `tokenizers`' BertNormalizer and
//! BertPreTokenizer (the reference for WordPiece vocabularies).
//!
//! `tokenizers` classifies with older Unicode tables than ours (Unicode 16
//! general categories, `unicode-normalization`'s NFD): the `*_IN_HF` tables
//! below are the codepoints where the two disagree, derived by checking
//! every codepoint against `tokenizers` 0.22.2 (the `bert_chars_match_hf`
//! test reads the per-codepoint dump testdata/tokenizer/hf/bert-chars.json).

use unicode_general_category::{GeneralCategory as Gc, get_general_category};
use unicode_normalization::char::decompose_canonical;

/// Format, control or private-use codepoints of Unicode 16 that
/// `tokenizers`' `is_other` does not know (assigned after its tables).
const NOT_OTHER_IN_HF: &[(u32, u32)] = &[
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
];

/// Punctuation in Unicode 16 that `tokenizers` does not split off.
const NOT_PUNCT_IN_HF: &[(u32, u32)] = &[
    (0x61D, 0x61D),
    (0x9FD, 0x9FD),
    (0xA76, 0xA76),
    (0xC77, 0xC77),
    (0xC84, 0xC84),
    (0x1B4E, 0x1B4F),
    (0x1B7D, 0x1B7F),
    (0x2E43, 0x2E4F),
    (0x2E52, 0x2E5D),
    (0x10D6E, 0x10D6E),
    (0x10EAD, 0x10EAD),
    (0x10F55, 0x10F59),
    (0x10F86, 0x10F89),
    (0x113D4, 0x113D5),
    (0x113D7, 0x113D8),
    (0x1144B, 0x1144F),
    (0x1145A, 0x1145B),
    (0x1145D, 0x1145D),
    (0x11660, 0x1166C),
    (0x116B9, 0x116B9),
    (0x1183B, 0x1183B),
    (0x11944, 0x11946),
    (0x119E2, 0x119E2),
    (0x11A3F, 0x11A46),
    (0x11A9A, 0x11A9C),
    (0x11A9E, 0x11AA2),
    (0x11B00, 0x11B09),
    (0x11BE1, 0x11BE1),
    (0x11C41, 0x11C45),
    (0x11C70, 0x11C71),
    (0x11EF7, 0x11EF8),
    (0x11F43, 0x11F4F),
    (0x11FFF, 0x11FFF),
    (0x12FF1, 0x12FF2),
    (0x16D6D, 0x16D6F),
    (0x16E97, 0x16E9A),
    (0x16FE2, 0x16FE2),
    (0x1E5FF, 0x1E5FF),
    (0x1E95E, 0x1E95F),
];

/// Codepoints `tokenizers` splits off as punctuation that Unicode 16 does
/// not class as punctuation (their category changed).
const PUNCT_ONLY_IN_HF: &[(u32, u32)] = &[(0x166D, 0x166D), (0x111C9, 0x111C9)];

/// Nonspacing marks of Unicode 16 that `tokenizers`' tables do not have as
/// such, so accent stripping keeps them.
const NOT_MN_IN_HF: &[(u32, u32)] = &[
    (0x7FD, 0x7FD),
    (0x897, 0x89F),
    (0x8CA, 0x8E1),
    (0x9FE, 0x9FE),
    (0xAFA, 0xAFF),
    (0xB55, 0xB55),
    (0xC04, 0xC04),
    (0xC3C, 0xC3C),
    (0xD00, 0xD00),
    (0xD3B, 0xD3C),
    (0xD81, 0xD81),
    (0xEBA, 0xEBA),
    (0xECE, 0xECE),
    (0x180F, 0x180F),
    (0x1885, 0x1886),
    (0x1ABF, 0x1ACE),
    (0x1DF6, 0x1DFB),
    (0xA82C, 0xA82C),
    (0xA8C5, 0xA8C5),
    (0xA8FF, 0xA8FF),
    (0xA9BD, 0xA9BD),
    (0x10D24, 0x10D27),
    (0x10D69, 0x10D6D),
    (0x10EAB, 0x10EAC),
    (0x10EFC, 0x10EFF),
    (0x10F46, 0x10F50),
    (0x10F82, 0x10F85),
    (0x11070, 0x11070),
    (0x11073, 0x11074),
    (0x110C2, 0x110C2),
    (0x111C9, 0x111C9),
    (0x111CF, 0x111CF),
    (0x1123E, 0x1123E),
    (0x11241, 0x11241),
    (0x1133B, 0x1133B),
    (0x113BB, 0x113C0),
    (0x113CE, 0x113CE),
    (0x113D0, 0x113D0),
    (0x113D2, 0x113D2),
    (0x113E1, 0x113E2),
    (0x11438, 0x1143F),
    (0x11442, 0x11444),
    (0x11446, 0x11446),
    (0x1145E, 0x1145E),
    (0x1182F, 0x11837),
    (0x11839, 0x1183A),
    (0x1193B, 0x1193C),
    (0x1193E, 0x1193E),
    (0x11943, 0x11943),
    (0x119D4, 0x119D7),
    (0x119DA, 0x119DB),
    (0x119E0, 0x119E0),
    (0x11A01, 0x11A0A),
    (0x11A33, 0x11A38),
    (0x11A3B, 0x11A3E),
    (0x11A47, 0x11A47),
    (0x11A51, 0x11A56),
    (0x11A59, 0x11A5B),
    (0x11A8A, 0x11A96),
    (0x11A98, 0x11A99),
    (0x11C30, 0x11C36),
    (0x11C38, 0x11C3D),
    (0x11C3F, 0x11C3F),
    (0x11C92, 0x11CA7),
    (0x11CAA, 0x11CB0),
    (0x11CB2, 0x11CB3),
    (0x11CB5, 0x11CB6),
    (0x11D31, 0x11D36),
    (0x11D3A, 0x11D3A),
    (0x11D3C, 0x11D3D),
    (0x11D3F, 0x11D45),
    (0x11D47, 0x11D47),
    (0x11D90, 0x11D91),
    (0x11D95, 0x11D95),
    (0x11D97, 0x11D97),
    (0x11EF3, 0x11EF4),
    (0x11F00, 0x11F01),
    (0x11F36, 0x11F3A),
    (0x11F40, 0x11F40),
    (0x11F42, 0x11F42),
    (0x11F5A, 0x11F5A),
    (0x13440, 0x13440),
    (0x13447, 0x13455),
    (0x1611E, 0x16129),
    (0x1612D, 0x1612F),
    (0x16F4F, 0x16F4F),
    (0x16FE4, 0x16FE4),
    (0x1CF00, 0x1CF2D),
    (0x1CF30, 0x1CF46),
    (0x1E000, 0x1E006),
    (0x1E008, 0x1E018),
    (0x1E01B, 0x1E021),
    (0x1E023, 0x1E024),
    (0x1E026, 0x1E02A),
    (0x1E08F, 0x1E08F),
    (0x1E130, 0x1E136),
    (0x1E2AE, 0x1E2AE),
    (0x1E2EC, 0x1E2EF),
    (0x1E4EC, 0x1E4EF),
    (0x1E5EE, 0x1E5EF),
    (0x1E944, 0x1E94A),
];

/// Codepoints `tokenizers` strips as nonspacing marks that Unicode 16
/// classes otherwise.
const MN_ONLY_IN_HF: &[(u32, u32)] = &[(0x1734, 0x1734), (0x1171E, 0x1171E)];

/// Codepoints with a canonical decomposition in Unicode 16 that
/// `tokenizers`' NFD leaves alone.
const NO_NFD_IN_HF: &[(u32, u32)] = &[
    (0x105C9, 0x105C9),
    (0x105E4, 0x105E4),
    (0x11383, 0x11383),
    (0x11385, 0x11385),
    (0x1138E, 0x1138E),
    (0x11391, 0x11391),
    (0x113C5, 0x113C5),
    (0x113C7, 0x113C8),
    (0x11938, 0x11938),
    (0x16121, 0x16128),
    (0x16D68, 0x16D6A),
];

fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// BertNormalizer's clean-up drops these: NUL, U+FFFD and "other"
/// characters (control, format, private use), except tab, LF and CR.
pub(crate) fn is_removed(c: char) -> bool {
    if matches!(c, '\0' | '\u{FFFD}') {
        return true;
    }
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    let other = matches!(
        get_general_category(c),
        Gc::Control | Gc::Format | Gc::PrivateUse | Gc::Surrogate
    );
    other && !in_ranges(NOT_OTHER_IN_HF, c)
}

/// BertNormalizer turns these into a plain space (after [`is_removed`]).
pub(crate) fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// BertPreTokenizer's punctuation: every ASCII punctuation character and
/// Unicode's P* categories; each becomes a word of its own.
pub(crate) fn is_punct(c: char) -> bool {
    if c.is_ascii_punctuation() {
        return true;
    }
    let p = matches!(
        get_general_category(c),
        Gc::ConnectorPunctuation
            | Gc::DashPunctuation
            | Gc::ClosePunctuation
            | Gc::FinalPunctuation
            | Gc::InitialPunctuation
            | Gc::OtherPunctuation
            | Gc::OpenPunctuation
    );
    (p && !in_ranges(NOT_PUNCT_IN_HF, c)) || in_ranges(PUNCT_ONLY_IN_HF, c)
}

/// BertNormalizer's CJK ideograph blocks (padded with spaces, so each is
/// a word); the range 0x2B920.. is copied as `tokenizers` has it.
pub(crate) fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Accent stripping: NFD (decomposition, then canonical ordering of the
/// combining marks) less the nonspacing marks, in place.
pub(crate) fn strip_accents(chars: &mut Vec<char>) {
    let mut out = Vec::with_capacity(chars.len() + chars.len() / 2);
    for &c in chars.iter() {
        if in_ranges(NO_NFD_IN_HF, c) {
            out.push(c);
        } else {
            decompose_canonical(c, |d| out.push(d));
        }
    }
    sort_marks(&mut out);
    out.retain(|&d| {
        let mn = get_general_category(d) == Gc::NonspacingMark && !in_ranges(NOT_MN_IN_HF, d);
        !(mn || in_ranges(MN_ONLY_IN_HF, d))
    });
    *chars = out;
}

/// The canonical ordering of combining marks (a stable sort by combining
/// class within each run of non-starters).
fn sort_marks(chars: &mut [char]) {
    use unicode_normalization::char::canonical_combining_class as ccc;
    let mut i = 0;
    while i < chars.len() {
        if ccc(chars[i]) == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && ccc(chars[i]) != 0 {
            i += 1;
        }
        chars[start..i].sort_by_key(|&c| ccc(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Ranges of the codepoints where `ours` and `hf` disagree, for the
    /// failure message (which is how the `HF_*` tables were derived).
    fn disagreements(ours: impl Fn(char) -> bool, hf: &[(u32, u32)]) -> Vec<(u32, u32)> {
        let in_hf = |c: u32| hf.iter().any(|&(lo, hi)| lo <= c && c <= hi);
        let mut out: Vec<(u32, u32)> = Vec::new();
        for c in (0..0x110000u32).filter_map(char::from_u32) {
            if ours(c) != in_hf(c as u32) {
                match out.last_mut() {
                    Some(r) if r.1 + 1 == c as u32 => r.1 = c as u32,
                    _ => out.push((c as u32, c as u32)),
                }
            }
        }
        out
    }

    #[test]
    fn bert_chars_match_hf() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/tokenizer/hf/bert-chars.json"
        );
        let gold: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let ranges = |key: &str| -> Vec<(u32, u32)> {
            let r = gold[key].as_array().unwrap();
            r.iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_u64().unwrap() as u32))
                .collect()
        };
        let map = |key: &str| -> HashMap<u32, String> {
            let r = gold[key].as_array().unwrap();
            r.iter()
                .map(|p| {
                    (
                        p[0].as_u64().unwrap() as u32,
                        p[1].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        let removed = disagreements(is_removed, &ranges("removed"));
        let punct = disagreements(is_punct, &ranges("punct"));

        let strip = map("strip");
        let lower = map("lower");
        let mut bad_strip = Vec::new();
        let mut bad_lower = Vec::new();
        for c in (0..0x110000u32).filter_map(char::from_u32) {
            let cp = c as u32;
            let sampled_out = (0xAC00..=0xD7A3).contains(&cp) && !(cp - 0xAC00).is_multiple_of(97);
            if !sampled_out {
                let mut chars = vec![c];
                strip_accents(&mut chars);
                let ours: String = chars.into_iter().collect();
                let want = strip.get(&cp).cloned().unwrap_or_else(|| c.to_string());
                if ours != want {
                    bad_strip.push(cp);
                }
            }
            let ours: String = c.to_lowercase().collect();
            let want = lower.get(&cp).cloned().unwrap_or_else(|| c.to_string());
            if ours != want {
                bad_lower.push(cp);
            }
        }
        assert!(
            removed.is_empty() && punct.is_empty() && bad_strip.is_empty(),
            "removed: {removed:x?}\npunct: {punct:x?}\nstrip: {} {bad_strip:x?}",
            bad_strip.len()
        );
        assert!(
            bad_lower.is_empty(),
            "lower: {} {bad_lower:x?}",
            bad_lower.len()
        );
    }
}
