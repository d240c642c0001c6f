//! Pre-tokenization of byte-level BPE vocabularies: `unicode_regex_split`.
//!
//! llama.cpp applies each regex of a pre-tokenizer in turn to the pieces the
//! previous one produced. The common regexes have hand-written splitters
//! (ported here line by line, quirks included); any other regex runs on a
//! "collapsed" copy of the text in which every non-ASCII codepoint is one
//! character standing for its category, with `\p{..}` rewritten to match
//! those characters, exactly as llama.cpp feeds `std::regex`.

use fancy_regex::Regex;

use super::unicode::{Flags, cpts_from_utf8, flags};

/// One step of a pre-tokenizer.
#[derive(Debug)]
pub(crate) enum Splitter {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
    Gpt2,
    /// The llama3 regex (`max_digits` 3) and the qwen2 one (`max_digits` 1).
    Llama3 { max_digits: usize },
    /// Any other regex, run like llama.cpp's std::regex fallback.
    Regex { re: Regex, collapsed: bool },
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The settings a `tokenizer.ggml.pre` value implies (llama-vocab.cpp,
/// `llama_vocab::impl::load` and the `llm_tokenizer_bpe` constructor).
#[derive(Debug)]
pub(crate) struct PreConfig {
    pub regexes: &'static [&'static str],
    pub clean_spaces: bool,
    pub ignore_merges: bool,
    /// `Some(true)` where llama.cpp forces add_bos before reading the key.
    pub add_bos: bool,
    pub add_sep: bool,
}

/// Map a pre-tokenizer name to its regexes, or `None` for one we do not
/// implement (llama.cpp knows more; those need hand-written splitters or
/// regexes with non-ASCII ranges that we have not verified).
pub(crate) fn pre_config(pre: &str) -> Option<PreConfig> {
    const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
    const STARCODER: &[&str] = &[r"\p{N}", GPT2];
    const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, "[0-9][0-9][0-9]"];
    let cfg = |regexes, clean_spaces, ignore_merges, add_bos| PreConfig {
        regexes,
        clean_spaces,
        ignore_merges,
        add_bos,
        add_sep: false,
    };
    Some(match pre {
        // An absent key also means "default" (llama.cpp warns).
        "" | "default" => cfg(DEFAULT, true, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => cfg(&[LLAMA3], true, true, true),
        "dbrx" | "smaug-bpe" | "chatglm-bpe" => cfg(&[LLAMA3], true, false, false),
        "glm4" | "glm5" => cfg(&[LLAMA3], true, true, false),
        "falcon" => cfg(FALCON, true, false, false),
        "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
        | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "olmo" | "jais" | "exaone4" => {
            cfg(&[GPT2], true, false, false)
        }
        "trillion" | "granite-docling" => cfg(&[GPT2], false, false, false),
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => PreConfig {
            add_sep: true,
            ..cfg(&[GPT2], true, false, false)
        },
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            cfg(STARCODER, true, false, false)
        }
        "command-r" | "smollm" => cfg(STARCODER, false, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open"
        | "grok-2" => cfg(&[QWEN2], false, false, false),
        "stablelm2" | "megrez" => cfg(&[QWEN2], true, false, false),
        _ => return None,
    })
}

impl Splitter {
    /// Compile one regex of a pre-tokenizer, choosing a hand-written
    /// splitter where llama.cpp has one.
    pub fn new(expr: &str) -> Result<Splitter, String> {
        if expr == GPT2 {
            return Ok(Splitter::Gpt2);
        }
        if expr == LLAMA3 {
            return Ok(Splitter::Llama3 { max_digits: 3 });
        }
        if expr == QWEN2 {
            return Ok(Splitter::Llama3 { max_digits: 1 });
        }
        let collapsed = UCATS.iter().any(|(pat, _)| expr.contains(pat));
        let source = if collapsed {
            collapse_regex(expr)?
        } else {
            expr.to_string()
        };
        let re = Regex::new(&source).map_err(|e| format!("regex {expr:?}: {e}"))?;
        Ok(Splitter::Regex { re, collapsed })
    }
}

/// `\p{..}` classes llama.cpp rewrites, with the collapsed character that
/// stands for the category and the ASCII members of the category.
const UCATS: &[(&str, u16)] = &[
    (r"\p{N}", Flags::NUMBER),
    (r"\p{L}", Flags::LETTER),
    (r"\p{P}", Flags::PUNCTUATION),
    (r"\p{M}", Flags::ACCENT_MARK),
    (r"\p{S}", Flags::SYMBOL),
    (r"\p{Lu}", Flags::LETTER),
    (r"\p{Ll}", Flags::LETTER),
    (r"\p{Lt}", Flags::LETTER),
    (r"\p{Lm}", Flags::LETTER),
    (r"\p{Lo}", Flags::LETTER),
];

/// llama.cpp collapses to the bytes 0xD0..0xD5; a Rust regex needs valid
/// UTF-8, so those become private-use characters U+E0D0..U+E0D5, which can
/// never appear in collapsed text otherwise (non-ASCII is always replaced).
fn collapsed_char(category: u16) -> char {
    let byte = match category {
        Flags::NUMBER => 0xD1,
        Flags::LETTER => 0xD2,
        Flags::PUNCTUATION => 0xD3,
        Flags::ACCENT_MARK => 0xD4,
        Flags::SYMBOL => 0xD5,
        _ => 0xD0,
    };
    char::from_u32(0xE000 + byte).unwrap_or('\u{E0D0}')
}

/// The ASCII members of a category, as a class body (`k_ucat_map`).
fn ascii_members(category: u16) -> &'static str {
    match category {
        Flags::NUMBER => r"\x30-\x39",
        Flags::LETTER => r"\x41-\x5A\x61-\x7A",
        Flags::PUNCTUATION => r"\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40\x5B-\x5D\x5F\x7B\x7D",
        Flags::SYMBOL => r"\x24\x2B\x3C-\x3E\x5E\x60\x7C\x7E",
        _ => "",
    }
}

/// Rewrite `\p{..}` the way llama.cpp does, tracking whether we are inside a
/// bracket class (nested classes are not allowed there either).
fn collapse_regex(expr: &str) -> Result<String, String> {
    if !expr.is_ascii() {
        return Err(format!(
            "regex {expr:?} mixes unicode categories and non-ASCII characters"
        ));
    }
    let b = expr.as_bytes();
    let mut out = String::new();
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && b[i] == b']' && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1] == b'p'
            && b[i + 2] == b'{'
            && let Some(close) = expr[i + 3..].find('}').map(|c| c + i + 3)
            && close <= i + 10
            && let Some(&(_, cat)) = UCATS.iter().find(|(p, _)| *p == &expr[i..=close])
        {
            if !inside {
                out.push('[');
            }
            out.push(collapsed_char(cat));
            out.push_str(ascii_members(cat));
            if !inside {
                out.push(']');
            }
            i = close + 1;
            continue;
        }
        out.push(char::from(b[i]));
        i += 1;
    }
    Ok(out)
}

/// The words of a text: its codepoints and the length of each word, so a
/// text of many short words costs no allocation per word.
pub(crate) struct Words {
    cpts: Vec<u32>,
    lens: Vec<usize>,
}

impl Words {
    /// Each word's codepoints, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> {
        let mut start = 0;
        self.lens.iter().map(move |&len| {
            let w = &self.cpts[start..start + len];
            start += len;
            w
        })
    }
}

/// Split `text` into words with the given splitters; a word's codepoints
/// are those of its UTF-8 (invalid input bytes come back as U+FFFD).
pub(crate) fn split(text: &[u8], splitters: &[Splitter]) -> Words {
    let cpts = cpts_from_utf8(text);
    let mut offsets = vec![cpts.len()];
    let mut collapsed: Option<Indexed> = None;
    let mut wide: Option<Indexed> = None;
    for s in splitters {
        offsets = match s {
            Splitter::Gpt2 => split_gpt2(&cpts, &offsets),
            Splitter::Llama3 { max_digits } => split_llama3(&cpts, &offsets, *max_digits),
            Splitter::Regex {
                re,
                collapsed: true,
            } => {
                let t = collapsed.get_or_insert_with(|| Indexed::collapsed(&cpts));
                split_regex(t, re, &offsets)
            }
            Splitter::Regex {
                re,
                collapsed: false,
            } => {
                let t = wide.get_or_insert_with(|| Indexed::wide(&cpts));
                split_regex(t, re, &offsets)
            }
        };
    }
    Words {
        cpts,
        lens: offsets,
    }
}

/// A one-character-per-codepoint stand-in for the text, with the byte
/// offset of every character so regex matches map back to codepoints.
struct Indexed {
    text: String,
    char_starts: Vec<usize>,
}

impl Indexed {
    fn build(cpts: &[u32], map: impl Fn(u32) -> char) -> Indexed {
        let mut text = String::with_capacity(cpts.len());
        let mut char_starts = Vec::with_capacity(cpts.len() + 1);
        for &c in cpts {
            char_starts.push(text.len());
            text.push(map(c));
        }
        char_starts.push(text.len());
        Indexed { text, char_starts }
    }

    fn collapsed(cpts: &[u32]) -> Indexed {
        Indexed::build(cpts, |c| {
            if c < 128 {
                return char::from(c as u8);
            }
            let f = flags(c);
            if f.is_whitespace() {
                // std::regex's \s does not match non-ASCII spaces; llama.cpp
                // substitutes a vertical tab.
                '\x0B'
            } else {
                collapsed_char(f.category())
            }
        })
    }

    fn wide(cpts: &[u32]) -> Indexed {
        Indexed::build(cpts, |c| {
            if c > 0x7F && flags(c).is_whitespace() {
                '\x0B'
            } else {
                char::from_u32(c).unwrap_or('\u{FFFD}')
            }
        })
    }

    fn char_index(&self, byte: usize) -> usize {
        self.char_starts.partition_point(|&s| s < byte)
    }
}

/// `unicode_regex_split_stl`: matches become pieces, and so do the gaps.
fn split_regex(t: &Indexed, re: &Regex, offsets: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let (b0, b1) = (t.char_starts[start], t.char_starts[start + len]);
        let chunk = &t.text[b0..b1];
        let mut prev = start;
        // A regex error (backtracking limit) ends matching in this chunk;
        // the rest becomes one piece, as if nothing more matched.
        for m in re.find_iter(chunk).map_while(Result::ok) {
            let (ms, me) = (t.char_index(b0 + m.start()), t.char_index(b0 + m.end()));
            if me == ms {
                continue; // none of our regexes can match empty
            }
            if ms > prev {
                out.push(ms - prev);
            }
            out.push(me - ms);
            prev = me;
        }
        if prev < start + len {
            out.push(start + len - prev);
        }
        start += len;
    }
    out
}

/// Shared state of the hand-written splitters: one chunk of codepoints and
/// the pieces cut so far.
struct Chunk<'a> {
    cpts: &'a [u32],
    ini: usize,
    end: usize,
    prev_end: usize,
    out: &'a mut Vec<usize>,
}

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

impl Chunk<'_> {
    fn cpt(&self, pos: usize) -> u32 {
        if self.ini <= pos && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }
    fn flags(&self, pos: usize) -> Flags {
        if self.ini <= pos && pos < self.end {
            flags(self.cpts[pos])
        } else {
            Flags::NONE
        }
    }
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

/// `unicode_regex_split_custom_gpt2`.
fn split_gpt2(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let mut c = Chunk {
            cpts,
            ini: start,
            end: start + len,
            prev_end: start,
            out: &mut out,
        };
        start += len;
        let mut pos = c.ini;
        while pos < c.end {
            let cpt = c.cpt(pos);
            let f = c.flags(pos);
            if cpt == u32::from(b'\'') && pos + 1 < c.end {
                let next = c.cpt(pos + 1);
                if [b's', b't', b'm', b'd']
                    .iter()
                    .any(|&x| next == u32::from(x))
                {
                    pos += c.add(pos + 2);
                    continue;
                }
                if pos + 2 < c.end {
                    let nn = c.cpt(pos + 2);
                    let is = |a: u8, b: u8| next == u32::from(a) && nn == u32::from(b);
                    if is(b'r', b'e') || is(b'v', b'e') || is(b'l', b'l') {
                        pos += c.add(pos + 3);
                        continue;
                    }
                }
            }
            let space = cpt == u32::from(b' ');
            let mut f2 = if space { c.flags(pos + 1) } else { f };
            if f2.is_letter() {
                pos += usize::from(space);
                while f2.is_letter() {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            if f2.is_number() {
                pos += usize::from(space);
                while f2.is_number() {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            let other =
                |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.any();
            if other(f2) {
                pos += usize::from(space);
                while other(f2) {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                c.add(pos);
                continue;
            }
            let mut n_ws = 0;
            while c.flags(pos + n_ws).is_whitespace() {
                n_ws += 1;
            }
            if n_ws > 1 && c.cpt(pos + n_ws) != OUT_OF_RANGE {
                pos += n_ws - 1;
                c.add(pos);
                continue;
            }
            if n_ws > 0 {
                pos += n_ws;
                c.add(pos);
                continue;
            }
            pos += 1;
            c.add(pos);
        }
    }
    out
}

/// `unicode_regex_split_custom_llama3` (`max_digits` 3) and `_qwen2` (1).
fn split_llama3(cpts: &[u32], offsets: &[usize], max_digits: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    let is_rn = |c: u32| c == u32::from(b'\r') || c == u32::from(b'\n');
    for &len in offsets {
        let mut c = Chunk {
            cpts,
            ini: start,
            end: start + len,
            prev_end: start,
            out: &mut out,
        };
        start += len;
        let mut pos = c.ini;
        while pos < c.end {
            let cpt = c.cpt(pos);
            let f = c.flags(pos);
            // (?i:'s|'t|'re|'ve|'m|'ll|'d): only ASCII letters lowercase to
            // these, so an ASCII fold is the same as unicode_tolower here.
            if cpt == u32::from(b'\'') && pos + 1 < c.end {
                let next = ascii_lower(c.cpt(pos + 1));
                if [b's', b't', b'm', b'd']
                    .iter()
                    .any(|&x| next == u32::from(x))
                {
                    pos += c.add(pos + 2);
                    continue;
                }
                if pos + 2 < c.end {
                    let nn = ascii_lower(c.cpt(pos + 2));
                    let is = |a: u8, b: u8| next == u32::from(a) && nn == u32::from(b);
                    if is(b'r', b'e') || is(b'v', b'e') || is(b'l', b'l') {
                        pos += c.add(pos + 3);
                        continue;
                    }
                }
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(is_rn(cpt) || f.is_number()) && (f.is_letter() || c.flags(pos + 1).is_letter()) {
                pos += 1;
                while c.flags(pos).is_letter() {
                    pos += 1;
                }
                c.add(pos);
                continue;
            }
            // \p{N}{1,3} or \p{N}
            if f.is_number() {
                if max_digits == 1 {
                    pos += 1;
                    c.add(pos);
                    continue;
                }
                let mut ini = pos;
                while c.flags(pos).is_number() {
                    pos += 1;
                    if pos - ini >= max_digits {
                        c.add(pos);
                        ini = pos;
                    }
                }
                c.add(pos);
                continue;
            }
            //  ?[^\s\p{L}\p{N}]+[\r\n]*
            let space = cpt == u32::from(b' ');
            let mut f2 = if space { c.flags(pos + 1) } else { f };
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number());
            // llama.cpp tests `flags.as_uint()` (of the first codepoint) here.
            if other(f2) && f.any() {
                pos += usize::from(space);
                while other(f2) && f2.any() {
                    pos += 1;
                    f2 = c.flags(pos);
                }
                let mut c2 = c.cpt(pos);
                while is_rn(c2) {
                    pos += 1;
                    c2 = c.cpt(pos);
                }
                c.add(pos);
                continue;
            }
            let mut n_ws = 0;
            let mut last_rn_end = 0;
            while c.flags(pos + n_ws).is_whitespace() {
                if is_rn(c.cpt(pos + n_ws)) {
                    last_rn_end = pos + n_ws + 1;
                }
                n_ws += 1;
            }
            // \s*[\r\n]+
            if last_rn_end > 0 {
                pos = last_rn_end;
                c.add(pos);
                continue;
            }
            // \s+(?!\S)
            if n_ws > 1 && c.cpt(pos + n_ws) != OUT_OF_RANGE {
                pos += n_ws - 1;
                c.add(pos);
                continue;
            }
            if n_ws > 0 {
                pos += n_ws;
                c.add(pos);
                continue;
            }
            pos += 1;
            c.add(pos);
        }
    }
    out
}

fn ascii_lower(c: u32) -> u32 {
    if (u32::from(b'A')..=u32::from(b'Z')).contains(&c) {
        c + 32
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, exprs: &[&str]) -> Vec<String> {
        let s: Vec<Splitter> = exprs.iter().map(|e| Splitter::new(e).unwrap()).collect();
        split(text.as_bytes(), &s)
            .iter()
            .map(|w| w.iter().map(|&c| char::from_u32(c).unwrap()).collect())
            .collect()
    }

    #[test]
    fn gpt2_splits_like_the_regex() {
        assert_eq!(
            words("Hello world's  123 !!", &[GPT2]),
            ["Hello", " world", "'s", " ", " 123", " !!"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three() {
        assert_eq!(
            words("12345 ab\n\n", &[LLAMA3]),
            ["123", "45", " ab", "\n\n"]
        );
        assert_eq!(words("12345", &[QWEN2]), ["1", "2", "3", "4", "5"]);
    }

    #[test]
    fn collapsed_regex_matches_categories() {
        assert_eq!(words("a1٣b", &[r"\p{N}"]), ["a", "1", "٣", "b"]);
        assert_eq!(
            words("x..$y", &[r"[\p{P}\$\+<=>\^~\|]+"]),
            ["x", "..$", "y"]
        );
        assert_eq!(
            collapse_regex(r"[^\s\p{L}]+").unwrap(),
            "[^\\s\u{E0D2}\\x41-\\x5A\\x61-\\x7A]+"
        );
    }
}
