//! The codepoint machinery of llama.cpp's `unicode.cpp`: lenient UTF-8
//! decoding, per-codepoint category flags, and the GPT-2 byte <-> unicode map.
//!
//! llama.cpp classifies codepoints with a table generated from UnicodeData.txt
//! (`unicode-data.cpp`); we derive the same flags from the general category
//! (Unicode 16) and `char::is_whitespace`, which is the same White_Space set.

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
    let mut i = 0;
    while i < bytes.len() {
        let b0 = u32::from(bytes[i]);
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
        match decoded {
            Some((cpt, n)) => {
                out.push(cpt);
                i += n;
            }
            None => {
                out.push(0xFFFD);
                i += 1;
            }
        }
    }
    out
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
}
