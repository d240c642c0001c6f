//! Chat prompts as tokens, with special tokens only where the template
//! put them: control-token text inside a message's content stays text, so
//! a user cannot forge turns by writing `<end_of_turn>` or `<|im_start|>`.
//!
//! The prompt is rendered and tokenized whole, as before (BPE merges across
//! the edges of a content would change if contents were tokenized apart).
//! Where a content holds control-token text, the template is rendered a
//! second time with each content replaced by a marker; the text between
//! the markers is what the template itself wrote, which locates every
//! content in the real rendering, and the tokenizer then ignores control
//! tokens inside those byte ranges.

use super::tools::Tool;
use super::{ChatTemplate, Message};
use crate::ModelError;
use crate::tokenizer::Tokenizer;

/// Marker brackets: private-use characters no template trims or escapes.
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

/// One piece of the marker rendering.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    Literal(&'a str),
    /// Where message `.0`'s content went.
    Content(usize),
}

impl ChatTemplate {
    /// The prompt's token ids (with BOS as the tokenizer adds it). Special
    /// tokens come from the template only, unless `special_in_content`:
    /// then control-token text in contents is parsed too (the ids are
    /// `tok.encode(&rendered, true, true)` either way for contents without
    /// such text). A content holding control-token text that cannot be
    /// located in the rendering is refused, as is a role holding any.
    pub fn render_tokens(
        &self,
        tok: &Tokenizer,
        msgs: &[Message],
        add_generation_prompt: bool,
        special_in_content: bool,
    ) -> Result<Vec<u32>, ModelError> {
        self.render_tokens_with_tools(tok, msgs, None, add_generation_prompt, special_in_content)
    }

    /// [`ChatTemplate::render_tokens`] with tools the model may call. The
    /// tools, and the calls and ids of earlier turns, may not hold
    /// control-token text.
    pub fn render_tokens_with_tools(
        &self,
        tok: &Tokenizer,
        msgs: &[Message],
        tools: Option<&[Tool]>,
        add_generation_prompt: bool,
        special_in_content: bool,
    ) -> Result<Vec<u32>, ModelError> {
        let text = self.render_with_tools(msgs, tools, add_generation_prompt)?;
        if special_in_content {
            return Ok(tok.encode(&text, true, true));
        }
        if let Some(m) = msgs
            .iter()
            .find(|m| tok.has_control_text(m.role.as_bytes()))
        {
            return Err(ModelError::Input(format!(
                "message role {:?} contains special-token text",
                m.role
            )));
        }
        let forged_call = msgs.iter().any(|m| {
            let calls = m.tool_calls.iter().any(|c| {
                [&c.id, &c.name, &c.arguments]
                    .iter()
                    .any(|s| tok.has_control_text(s.as_bytes()))
            });
            let ids = [&m.tool_call_id, &m.name].iter().any(|s| {
                s.as_ref()
                    .is_some_and(|s| tok.has_control_text(s.as_bytes()))
            });
            calls || ids
        });
        let forged_tool = tools.is_some_and(|ts| {
            ts.iter()
                .any(|t| tok.has_control_text(t.to_openai().to_string().as_bytes()))
        });
        if forged_call || forged_tool {
            return Err(ModelError::Input(
                "a tool, tool call or tool call id contains special-token text".into(),
            ));
        }
        let forged: Vec<bool> = msgs
            .iter()
            .map(|m| tok.has_control_text(m.content.as_bytes()))
            .collect();
        if !forged.contains(&true) {
            return Ok(tok.encode(&text, true, true));
        }
        let marked: Vec<Message> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| Message {
                content: format!("{OPEN}{i}{CLOSE}"),
                ..m.clone()
            })
            .collect();
        let skeleton = self.render_with_tools(&marked, tools, add_generation_prompt)?;
        let pieces = pieces(&skeleton, msgs.len());
        let ranges = locate(&text, &pieces, msgs).ok_or_else(|| {
            ModelError::Input(
                "a message contains special-token text and the chat template transforms it in a way \
                 that cannot be traced; remove the special-token text"
                    .into(),
            )
        })?;
        let guarded: Vec<(usize, usize)> = ranges
            .into_iter()
            .filter(|&(i, s, e)| forged[i] && s < e)
            .map(|(_, s, e)| (s, e))
            .collect();
        tok.encode_guarded_within(text.as_bytes(), true, true, usize::MAX, &guarded)
    }
}

/// Split a marker rendering into literal text and content slots.
fn pieces(skeleton: &str, n_msgs: usize) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    while let Some(off) = skeleton[i..].find(OPEN) {
        let at = i + off;
        let digits_start = at + OPEN.len_utf8();
        let rest = &skeleton[digits_start..];
        let n_digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let index = rest[..n_digits].parse::<usize>().ok();
        match index {
            Some(k) if k < n_msgs && rest[n_digits..].starts_with(CLOSE) => {
                if at > lit_start {
                    out.push(Piece::Literal(&skeleton[lit_start..at]));
                }
                out.push(Piece::Content(k));
                i = digits_start + n_digits + CLOSE.len_utf8();
                lit_start = i;
            }
            _ => i = digits_start,
        }
    }
    if lit_start < skeleton.len() {
        out.push(Piece::Literal(&skeleton[lit_start..]));
    }
    out
}

/// Match the real rendering against the pieces: literals exactly, each
/// content as written or trimmed the ways templates trim. Returns
/// `(message, start, end)` of every content, or `None` if they do not fit.
fn locate(
    text: &str,
    pieces: &[Piece<'_>],
    msgs: &[Message],
) -> Option<Vec<(usize, usize, usize)>> {
    let mut pos = 0;
    let mut out = Vec::new();
    for (k, piece) in pieces.iter().enumerate() {
        match *piece {
            Piece::Literal(lit) => {
                if !text[pos..].starts_with(lit) {
                    return None;
                }
                pos += lit.len();
            }
            Piece::Content(i) => {
                let c = msgs[i].content.as_str();
                let next = match pieces.get(k + 1) {
                    Some(Piece::Literal(lit)) => Some(*lit),
                    _ => None,
                };
                let fits = |cand: &str| {
                    let rest = &text[pos..];
                    rest.starts_with(cand)
                        && next.is_none_or(|lit| rest[cand.len()..].starts_with(lit))
                };
                let found = [c, c.trim(), c.trim_start(), c.trim_end()]
                    .into_iter()
                    .find(|cand| fits(cand))?;
                out.push((i, pos, pos + found.len()));
                pos += found.len();
            }
        }
    }
    (pos == text.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_and_locate() {
        let sk = format!("<a>{OPEN}0{CLOSE}<b>{OPEN}9{CLOSE}{OPEN}1{CLOSE}");
        let p = pieces(&sk, 2);
        let nine = format!("<b>{OPEN}9{CLOSE}");
        assert_eq!(
            p,
            [
                Piece::Literal("<a>"),
                Piece::Content(0),
                Piece::Literal(&nine),
                Piece::Content(1)
            ]
        );
        let msgs = [Message::new("user", " x "), Message::new("user", "y")];
        let text = format!("<a>x{nine}y");
        assert_eq!(
            locate(&text, &p, &msgs),
            Some(vec![(0, 3, 4), (1, 4 + nine.len(), 5 + nine.len())])
        );
        assert_eq!(locate("<a>x<b>", &p, &msgs), None);
    }
}
