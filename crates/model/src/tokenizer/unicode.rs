//! The codepoint machinery of llama.cpp's `unicode.cpp`: lenient UTF-8
//! decoding, per-codepoint category flags, and the GPT-2 byte <-> unicode map.
//!
//! llama.cpp classifies codepoints with a table generated from UnicodeData.txt
//! (`unicode-data.cpp`); we derive the same flags from the general category
//! (Unicode 16, less the codepoints new in 16 that llama.cpp's Unicode 15.1
//! table does not know) and `char::is_whitespace`, the same White_Space set.

use unicode_general_category::{GeneralCategory as Gc, get_general_category};

/// The category flags llama.cpp's pre-tokenizers look at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags(u16);

impl Flags {
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    pub const SEPARATOR: u16 = 0x0008;
    pub const ACCENT_MARK: u16 = 0x0010;
    pub const PUNCTUATION: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    pub const CONTROL: u16 = 0x0080;
    pub const WHITESPACE: u16 = 0x0100;

    /// No flags at all: what llama.cpp returns for a position outside the
    /// current chunk (every real codepoint has at least one flag).
    pub const NONE: Flags = Flags(0);

    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    /// llama.cpp's `as_uint() != 0`.
    pub fn any(self) -> bool {
        self.0 != 0
    }
    /// The category bits alone (`category_flag()`).
    pub fn category(self) -> u16 {
        self.0 & 0x00FF
    }
}

/// Codepoints assigned in Unicode 16 (the crate's version) that llama.cpp's
/// table, generated from Unicode 15.1, still has as unassigned. Derived by
/// `flags_match_llama_cpp_table`, which checks every codepoint.
const NEW_IN_UNICODE_16: &[(u32, u32)] = &[
    (0x00897, 0x00897),
    (0x01B4E, 0x01B4F),
    (0x01B7F, 0x01B7F),
    (0x01C89, 0x01C8A),
    (0x02427, 0x02429),
    (0x031E4, 0x031E5),
    (0x0A7CB, 0x0A7CD),
    (0x0A7DA, 0x0A7DC),
    (0x105C0, 0x105F3),
    (0x10D40, 0x10D65),
    (0x10D69, 0x10D85),
    (0x10D8E, 0x10D8F),
    (0x10EC2, 0x10EC4),
    (0x10EFC, 0x10EFC),
    (0x11380, 0x11389),
    (0x1138B, 0x1138B),
    (0x1138E, 0x1138E),
    (0x11390, 0x113B5),
    (0x113B7, 0x113C0),
    (0x113C2, 0x113C2),
    (0x113C5, 0x113C5),
    (0x113C7, 0x113CA),
    (0x113CC, 0x113D5),
    (0x113D7, 0x113D8),
    (0x113E1, 0x113E2),
    (0x116D0, 0x116E3),
    (0x11BC0, 0x11BE1),
    (0x11BF0, 0x11BF9),
    (0x11F5A, 0x11F5A),
    (0x13460, 0x143FA),
    (0x16100, 0x16139),
    (0x16D40, 0x16D79),
    (0x18CFF, 0x18CFF),
    (0x1CC00, 0x1CCF9),
    (0x1CD00, 0x1CEB3),
    (0x1E5D0, 0x1E5FA),
    (0x1E5FF, 0x1E5FF),
    (0x1F8B2, 0x1F8BB),
    (0x1F8C0, 0x1F8C1),
    (0x1FA89, 0x1FA89),
    (0x1FA8F, 0x1FA8F),
    (0x1FABE, 0x1FABE),
    (0x1FAC6, 0x1FAC6),
    (0x1FADC, 0x1FADC),
    (0x1FADF, 0x1FADF),
    (0x1FAE9, 0x1FAE9),
    (0x1FBCB, 0x1FBEF),
];

/// Flags of one codepoint, as `unicode_cpt_flags_from_cpt`.
pub(crate) fn flags(cpt: u32) -> Flags {
    let Some(c) = char::from_u32(cpt) else {
        // Surrogates are category Cs (CONTROL) in llama.cpp's table; values
        // past U+10FFFF are UNDEFINED. Neither can come out of our decoder
        // except U+FFFD, but keep the mapping total.
        return Flags(if cpt < 0x110000 {
            Flags::CONTROL
        } else {
            Flags::UNDEFINED
        });
    };
    let newer = NEW_IN_UNICODE_16
        .binary_search_by(|&(lo, hi)| {
            if hi < cpt {
                std::cmp::Ordering::Less
            } else if lo > cpt {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok();
    if newer {
        return Flags(Flags::UNDEFINED);
    }
    let cat = match get_general_category(c) {
        Gc::Unassigned => Flags::UNDEFINED,
        Gc::Control | Gc::Format | Gc::PrivateUse | Gc::Surrogate => Flags::CONTROL,
        Gc::UppercaseLetter
        | Gc::LowercaseLetter
        | Gc::TitlecaseLetter
        | Gc::ModifierLetter
        | Gc::OtherLetter => Flags::LETTER,
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => Flags::ACCENT_MARK,
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber => Flags::NUMBER,
        Gc::ConnectorPunctuation
        | Gc::DashPunctuation
        | Gc::OpenPunctuation
        | Gc::ClosePunctuation
        | Gc::InitialPunctuation
        | Gc::FinalPunctuation
        | Gc::OtherPunctuation => Flags::PUNCTUATION,
        Gc::MathSymbol | Gc::CurrencySymbol | Gc::ModifierSymbol | Gc::OtherSymbol => Flags::SYMBOL,
        Gc::SpaceSeparator | Gc::LineSeparator | Gc::ParagraphSeparator => Flags::SEPARATOR,
        // The enum is non-exhaustive; a future category is unknown to us.
        _ => Flags::UNDEFINED,
    };
    let ws = if c.is_whitespace() {
        Flags::WHITESPACE
    } else {
        0
    };
    Flags(cat | ws)
}

/// `unicode_len_utf8`: the sequence length announced by a lead byte (a stray
/// continuation byte counts as 1).
pub(crate) fn utf8_len(lead: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[usize::from(lead >> 4)]
}

/// `unicode_cpts_from_utf8`: decode, turning each undecodable byte into
/// U+FFFD (llama.cpp checks only the bit patterns, not overlongs or
/// surrogates, and neither do we).
pub(crate) fn cpts_from_utf8(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(bytes.len());
    out.extend(cpts(bytes));
    out
}

/// The codepoints of [`cpts_from_utf8`], one at a time (nothing allocated).
pub(crate) fn cpts(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let b0 = u32::from(*bytes.get(i)?);
        let cont = |k: usize| {
            bytes
                .get(i + k)
                .filter(|&&b| b & 0xC0 == 0x80)
                .map(|&b| u32::from(b & 0x3F))
        };
        let decoded = if b0 & 0x80 == 0 {
            Some((b0, 1))
        } else if b0 & 0x40 == 0 {
            None
        } else if b0 & 0x20 == 0 {
            cont(1).map(|c1| (((b0 & 0x1F) << 6) | c1, 2))
        } else if b0 & 0x10 == 0 {
            match (cont(1), cont(2)) {
                (Some(c1), Some(c2)) => Some((((b0 & 0x0F) << 12) | (c1 << 6) | c2, 3)),
                _ => None,
            }
        } else if b0 & 0x08 == 0 {
            match (cont(1), cont(2), cont(3)) {
                (Some(c1), Some(c2), Some(c3)) => {
                    Some((((b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3, 4))
                }
                _ => None,
            }
        } else {
            None
        };
        let (cpt, n) = decoded.unwrap_or((0xFFFD, 1));
        i += n;
        Some(cpt)
    })
}

/// `unicode_cpt_to_utf8`, appending. Codepoints past U+10FFFF cannot be
/// produced by [`cpts_from_utf8`]; they are written as U+FFFD.
pub(crate) fn push_utf8(out: &mut Vec<u8>, cpt: u32) {
    if cpt <= 0x7F {
        out.push(cpt as u8);
    } else if cpt <= 0x7FF {
        out.extend_from_slice(&[0xC0 | (cpt >> 6) as u8, 0x80 | (cpt & 0x3F) as u8]);
    } else if cpt <= 0xFFFF {
        out.extend_from_slice(&[
            0xE0 | (cpt >> 12) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    } else if cpt <= 0x10FFFF {
        out.extend_from_slice(&[
            0xF0 | (cpt >> 18) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    } else {
        out.extend_from_slice("\u{FFFD}".as_bytes());
    }
}

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves,
/// the other 68 are shifted to U+0100.. in byte order.
pub(crate) const fn byte_to_cpt_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    let mut b = 0;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if printable {
            table[b] = b as u32;
        } else {
            table[b] = 256 + n;
            n += 1;
        }
        b += 1;
    }
    table
}

pub(crate) const BYTE_TO_CPT: [u32; 256] = byte_to_cpt_table();

/// The inverse of [`BYTE_TO_CPT`]: every mapped codepoint is below U+0144.
pub(crate) fn cpt_to_byte(cpt: u32) -> Option<u8> {
    if cpt >= 0x144 {
        return None;
    }
    // The table is tiny; a linear scan keeps this allocation-free.
    BYTE_TO_CPT.iter().position(|&c| c == cpt).map(|b| b as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection() {
        for b in 0..=255u8 {
            assert_eq!(cpt_to_byte(BYTE_TO_CPT[usize::from(b)]), Some(b));
        }
        assert_eq!(BYTE_TO_CPT[b' ' as usize], 0x120); // 'Ġ'
        assert_eq!(BYTE_TO_CPT[b'\n' as usize], 0x10A); // 'Ċ'
    }

    #[test]
    fn lenient_decoding_matches_llama() {
        assert_eq!(
            cpts_from_utf8("aé€😀".as_bytes()),
            vec![0x61, 0xE9, 0x20AC, 0x1F600]
        );
        assert_eq!(
            cpts_from_utf8(&[0x80, b'a', 0xE2, 0x82]),
            vec![0xFFFD, 0x61, 0xFFFD, 0xFFFD]
        );
    }

    #[test]
    fn flags_of_samples() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('٣' as u32).is_number());
        assert!(flags(0x3000).is_whitespace());
        assert_eq!(flags(0x378).category(), Flags::UNDEFINED);
        assert_eq!(flags(0xE000).category(), Flags::CONTROL);
        assert_eq!(flags(0x200D).category(), Flags::CONTROL);
        assert_eq!(flags(0x301).category(), Flags::ACCENT_MARK);
    }

    /// Every codepoint's flags against llama.cpp's generated table
    /// (extracted verbatim into testdata), so a Unicode-version drift
    /// between the crate and llama.cpp shows up here.
    #[test]
    fn flags_match_llama_cpp_table() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/tokenizer/llama-cpp-unicode-flags.txt"
        );
        let text = std::fs::read_to_string(path).expect("read llama-cpp-unicode-flags.txt");
        let mut ranges = Vec::new();
        let mut ws = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (a, b) = line.split_once(' ').unwrap();
            if a == "ws" {
                ws.push(u32::from_str_radix(b, 16).unwrap());
            } else {
                ranges.push((
                    u32::from_str_radix(a, 16).unwrap(),
                    u16::from_str_radix(b, 16).unwrap(),
                ));
            }
        }
        let mut bad = Vec::new();
        for w in ranges.windows(2) {
            for cpt in w[0].0..w[1].0 {
                let want = w[0].1
                    | if ws.contains(&cpt) {
                        Flags::WHITESPACE
                    } else {
                        0
                    };
                let got = flags(cpt).0;
                if got != want {
                    bad.push(format!(
                        "U+{cpt:04X}: llama.cpp {want:#06x}, ours {got:#06x}"
                    ));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "{} codepoints differ:\n{}",
            bad.len(),
            bad[..bad.len().min(40)].join("\n")
        );
    }
}
