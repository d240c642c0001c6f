//! `llama_token_to_piece` and `llama_detokenize`: token ids back to the
//! bytes they stand for, undoing SentencePiece's space mark or GPT-2's byte
//! map, then llama.cpp's space clean-up. WordPiece and Unigram ids decode
//! as their Hugging Face decoders do (WordPiece with clean-up, Metaspace).

use super::{Kind, Tokenizer, attr, unicode};

impl Tokenizer {
    /// `llama_token_to_piece(id, lstrip = 0, special)`: the bytes a token
    /// stands for. Control and unknown tokens are empty unless `special`;
    /// ids out of range are empty.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        self.append_piece(id, special, &mut out);
        out
    }

    /// [`Tokenizer::token_to_piece`] appended to `out`: allocates nothing
    /// once `out` has room (streaming generation calls it per token).
    pub fn append_piece(&self, id: u32, special: bool, out: &mut Vec<u8>) {
        let Some(text) = self.token_text(id) else {
            return;
        };
        let a = self.attrs[id as usize];
        if !special && a & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return;
        }
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            out.extend_from_slice(text);
        } else if a & attr::NORMAL != 0 {
            match self.kind {
                Kind::Spm | Kind::Wpm(_) | Kind::Ugm(_) => unescape_spaces(text, out),
                Kind::Bpe { .. } => gpt2_decode(text, out),
            }
        } else if a & attr::BYTE != 0 {
            out.push(token_to_byte(text));
        }
    }

    /// `llama_detokenize(ids, remove_special, unparse_special)`, as bytes
    /// (pieces need not be valid UTF-8 on their own or together).
    /// WordPiece and Unigram: Hugging Face's `decode(ids,
    /// skip_special_tokens = !unparse_special)`.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        if matches!(self.kind, Kind::Wpm(_) | Kind::Ugm(_)) {
            return self.hf_decode(ids, unparse_special);
        }
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && !ids.is_empty() && Some(ids[0]) == self.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special
            && self.add_eos
            && ids.last().is_some_and(|&l| Some(l) == self.special.eos)
        {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let piece = self.token_to_piece(id, unparse_special);
            let skip = usize::from(remove_space && piece.first() == Some(&b' '));
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.clean_spaces {
            clean_up_spaces(&mut text);
        }
        text
    }

    /// Decode ids to text, leaving out control tokens; invalid UTF-8 (a
    /// character cut off at the end) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, false, false)).into_owned()
    }
}

impl Tokenizer {
    /// `tokenizers`' WordPiece decoder (`##` glues, other pieces get a
    /// space, then its clean-up per piece) or Metaspace decoder (`▁` is a
    /// space, except in the first piece where a prefix space was added).
    fn hf_decode(&self, ids: &[u32], keep_special: bool) -> Vec<u8> {
        let mut out = String::new();
        let mut piece = String::new();
        let mut first = true;
        for &id in ids {
            let Some(text) = self.token_text(id) else {
                continue;
            };
            let a = self.attrs[id as usize];
            let special = a & (attr::UNKNOWN | attr::CONTROL) != 0;
            // Other types (unused fillers, bytes) render as nothing, as
            // in llama.cpp's token_to_piece.
            let text_like = a & (attr::NORMAL | attr::USER_DEFINED) != 0;
            if (special && !keep_special) || (!special && !text_like) {
                continue;
            }
            let text = String::from_utf8_lossy(text);
            piece.clear();
            match &self.kind {
                Kind::Wpm(_) => {
                    let word = if special || a & attr::USER_DEFINED != 0 {
                        Some(&*text)
                    } else {
                        text.strip_prefix('\u{2581}')
                    };
                    match (word, first) {
                        (Some(w), true) => piece.push_str(w),
                        (Some(w), false) => {
                            piece.push(' ');
                            piece.push_str(w);
                        }
                        (None, true) => {
                            piece.push_str("##");
                            piece.push_str(&text);
                        }
                        (None, false) => piece.push_str(&text),
                    }
                    wordpiece_cleanup(&mut piece);
                }
                _ => {
                    let drop_mark = first && self.add_space_prefix;
                    for c in text.chars() {
                        match c {
                            '\u{2581}' if drop_mark => {}
                            '\u{2581}' => piece.push(' '),
                            c => piece.push(c),
                        }
                    }
                }
            }
            out.push_str(&piece);
            first = false;
        }
        out.into_bytes()
    }
}

/// `tokenizers`' WordPiece decoder clean-up, applied to each piece.
fn wordpiece_cleanup(piece: &mut String) {
    const RULES: [(&str, &str); 11] = [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" do not", " don't"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ];
    for (from, to) in RULES {
        if piece.contains(from) {
            *piece = piece.replace(from, to);
        }
    }
}

/// SentencePiece marks spaces as U+2581.
fn unescape_spaces(text: &[u8], out: &mut Vec<u8>) {
    const MARK: &[u8] = "\u{2581}".as_bytes();
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(MARK) {
            out.push(b' ');
            i += MARK.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
}

/// `llama_decode_text`: GPT-2 byte-level text back to bytes. A character
/// outside the byte map is written the way llama.cpp writes it.
fn gpt2_decode(text: &[u8], out: &mut Vec<u8>) {
    // Per generated token: decoded in place, nothing allocated.
    for cpt in unicode::cpts(text) {
        match unicode::cpt_to_byte(cpt) {
            Some(b) => out.push(b),
            None => {
                let mut utf8 = Vec::new();
                unicode::push_utf8(&mut utf8, cpt);
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in utf8 {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
}

/// `token_to_byte`: the two hex digits of `<0xXX>`, read like `strtol`
/// (stops at the first non-hex character; nothing parsed gives 0).
fn token_to_byte(text: &[u8]) -> u8 {
    let digits = text.get(3..text.len().min(5)).unwrap_or(&[]);
    let mut v: u32 = 0;
    for &d in digits {
        match (d as char).to_digit(16) {
            Some(x) => v = v * 16 + x,
            None => break,
        }
    }
    v as u8
}

/// The `clean_spaces` passes of `llama_detokenize`, ported index for index
/// (they read bytes the previous write may already have moved).
fn clean_up_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ," lose the space.
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // " ' " becomes "'".
    let total2 = total;
    total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // " 's", " 'm", " 're", " 've" lose the space.
    let total3 = total;
    total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b't' || x1 == b'd' {
            } else if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_like_llama() {
        let mut t = b"Hello , world ! it 's a ' test ' isn 't".to_vec();
        clean_up_spaces(&mut t);
        assert_eq!(
            String::from_utf8(t).unwrap(),
            "Hello, world! it's a'test'isn 't"
        );
        let mut e = Vec::new();
        clean_up_spaces(&mut e);
        assert!(e.is_empty());
    }

    #[test]
    fn byte_token_text() {
        assert_eq!(token_to_byte(b"<0x0A>"), 10);
        assert_eq!(token_to_byte(b"<0xfF>"), 255);
        assert_eq!(token_to_byte(b"<0x"), 0);
        assert_eq!(token_to_byte(b"ab"), 0);
    }

    #[test]
    fn gpt2_decoding() {
        let dec = |t: &str| {
            let mut out = Vec::new();
            gpt2_decode(t.as_bytes(), &mut out);
            out
        };
        assert_eq!(dec("Ġhello"), b" hello");
        assert_eq!(dec("Ċ"), b"\n");
        assert_eq!(dec("€"), b"[UNK_BYTE_0xe282ac\xe2\x82\xac]");
    }
}
