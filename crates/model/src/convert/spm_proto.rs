//! A minimal decoder for SentencePiece's `tokenizer.model` (a `ModelProto`
//! protobuf): only the fields the converter reads. Every length is checked
//! against the bytes that remain, so a malformed file is an error, not a panic.

use super::{Error, Result};

/// `SentencePiece.Type` values (the same numbers GGUF token types use).
pub mod piece_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// One vocabulary entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub piece: String,
    pub score: f32,
    pub kind: i32,
}

/// The parts of a `ModelProto` the converter uses.
#[derive(Clone, Debug, PartialEq)]
pub struct SpmModel {
    pub pieces: Vec<Piece>,
    /// `normalizer_spec.add_dummy_prefix` (protobuf default: true).
    pub add_dummy_prefix: bool,
    /// `normalizer_spec.remove_extra_whitespaces` (protobuf default: true).
    pub remove_extra_whitespaces: bool,
    /// `normalizer_spec.precompiled_charsmap` (empty when absent).
    pub precompiled_charsmap: Vec<u8>,
    /// `trainer_spec.model_type` (1 unigram, 2 BPE, ...; protobuf default: 1).
    pub model_type: u64,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| bad("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("varint longer than 10 bytes"))
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| bad("field length runs past the end of the data"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8]> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| bad("field length overflows"))?;
        self.bytes(n)
    }

    /// Reads a field key: (field number, wire type).
    fn key(&mut self) -> Result<(u64, u8)> {
        let k = self.varint()?;
        Ok((k >> 3, (k & 7) as u8))
    }

    fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 => {
                self.bytes(8)?;
            }
            2 => {
                self.len_delimited()?;
            }
            5 => {
                self.bytes(4)?;
            }
            w => return Err(bad(&format!("unsupported protobuf wire type {w}"))),
        }
        Ok(())
    }
}

fn bad(why: &str) -> Error {
    Error::Tokenizer(format!(
        "tokenizer.model is not a valid SentencePiece model: {why}"
    ))
}

fn parse_piece(buf: &[u8]) -> Result<Piece> {
    let mut r = Reader::new(buf);
    let mut piece = Piece {
        piece: String::new(),
        score: 0.0,
        kind: piece_type::NORMAL,
    };
    while !r.at_end() {
        match r.key()? {
            (1, 2) => {
                let s = r.len_delimited()?;
                piece.piece =
                    String::from_utf8(s.to_vec()).map_err(|_| bad("a piece is not valid UTF-8"))?;
            }
            (2, 5) => {
                let b = r.bytes(4)?;
                piece.score = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            (3, 0) => piece.kind = r.varint()? as i32,
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(piece)
}

fn parse_normalizer(buf: &[u8], model: &mut SpmModel) -> Result<()> {
    let mut r = Reader::new(buf);
    while !r.at_end() {
        match r.key()? {
            (2, 2) => model.precompiled_charsmap = r.len_delimited()?.to_vec(),
            (3, 0) => model.add_dummy_prefix = r.varint()? != 0,
            (4, 0) => model.remove_extra_whitespaces = r.varint()? != 0,
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(())
}

fn parse_trainer(buf: &[u8], model: &mut SpmModel) -> Result<()> {
    let mut r = Reader::new(buf);
    while !r.at_end() {
        match r.key()? {
            (3, 0) => model.model_type = r.varint()?,
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(())
}

/// Parses a serialized `ModelProto`.
pub fn parse(buf: &[u8]) -> Result<SpmModel> {
    let mut r = Reader::new(buf);
    let mut model = SpmModel {
        pieces: Vec::new(),
        add_dummy_prefix: true,
        remove_extra_whitespaces: true,
        precompiled_charsmap: Vec::new(),
        model_type: 1,
    };
    while !r.at_end() {
        match r.key()? {
            (1, 2) => model.pieces.push(parse_piece(r.len_delimited()?)?),
            (2, 2) => parse_trainer(r.len_delimited()?, &mut model)?,
            (3, 2) => parse_normalizer(r.len_delimited()?, &mut model)?,
            (_, wire) => r.skip(wire)?,
        }
    }
    if model.pieces.is_empty() {
        return Err(bad("it holds no pieces"));
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn piece(text: &str, score: f32, kind: u64) -> Vec<u8> {
        let mut p = vec![0x0a];
        varint(text.len() as u64, &mut p);
        p.extend_from_slice(text.as_bytes());
        p.push(0x15);
        p.extend_from_slice(&score.to_le_bytes());
        p.push(0x18);
        varint(kind, &mut p);
        let mut out = vec![0x0a];
        varint(p.len() as u64, &mut out);
        out.extend(p);
        out
    }

    #[test]
    fn parses_pieces_and_normalizer() {
        let mut buf = piece("<unk>", 0.0, 2);
        buf.extend(piece("▁a", -1.5, 1));
        // normalizer_spec { precompiled_charsmap: "\x01\x02", add_dummy_prefix: false }
        buf.extend([0x1a, 0x06, 0x12, 0x02, 0x01, 0x02, 0x18, 0x00]);
        buf.extend([0x12, 0x02, 0x18, 0x02]); // trainer_spec { model_type: BPE }
        let m = parse(&buf).unwrap();
        assert_eq!(m.precompiled_charsmap, [1, 2]);
        assert!(m.remove_extra_whitespaces);
        assert_eq!(m.model_type, 2);
        assert_eq!(m.pieces.len(), 2);
        assert_eq!(m.pieces[1].piece, "▁a");
        assert_eq!(m.pieces[1].score, -1.5);
        assert_eq!(m.pieces[0].kind, piece_type::UNKNOWN);
        assert!(!m.add_dummy_prefix);
    }

    #[test]
    fn malformed_input_is_an_error() {
        let good = piece("abc", 1.0, 1);
        for cut in 1..good.len() {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(
            parse(&[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])
            .is_err()
        );
        assert!(parse(&[0x0b]).is_err());
        assert!(parse(&[]).is_err());
    }
}
