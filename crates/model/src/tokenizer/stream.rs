//! Streaming detokenization: token pieces are bytes, and a character can be
//! split across tokens (byte-fallback tokens, GPT-2 byte tokens). The
//! decoder holds back an incomplete UTF-8 sequence until the bytes that
//! finish it arrive, so every chunk it yields is whole characters.

use super::Tokenizer;

/// Turns a stream of token ids into text, one piece at a time.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    special: bool,
}

impl StreamDecoder {
    /// A decoder; `special` renders control tokens as their text (as
    /// `token_to_piece(.., special)`).
    pub fn new(special: bool) -> Self {
        StreamDecoder {
            pending: Vec::new(),
            special,
        }
    }

    /// Add one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let piece = tokenizer.token_to_piece(id, self.special);
        self.push_bytes(&piece)
    }

    /// Add raw piece bytes; returns the text that is now complete.
    /// Bytes that can never start a valid character come out as U+FFFD, the
    /// same as `String::from_utf8_lossy` over the whole stream.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut pos = 0;
        loop {
            match std::str::from_utf8(&self.pending[pos..]) {
                Ok(s) => {
                    out.push_str(s);
                    pos = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Safe by construction: `valid_up_to` bytes are UTF-8.
                    out.push_str(
                        std::str::from_utf8(&self.pending[pos..pos + valid]).unwrap_or_default(),
                    );
                    pos += valid;
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            pos += n;
                        }
                        // An incomplete sequence at the end: wait for more.
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..pos);
        out
    }

    /// End of stream: whatever is still held back, as replacement characters.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_split_characters() {
        let mut d = StreamDecoder::new(false);
        let euro = "€".as_bytes();
        assert_eq!(d.push_bytes(&euro[..1]), "");
        assert_eq!(d.push_bytes(&euro[1..2]), "");
        assert_eq!(d.push_bytes(&[euro[2], b'a']), "€a");
        assert_eq!(d.push_bytes(&[0xFF, b'b', 0xE2]), "\u{FFFD}b");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
