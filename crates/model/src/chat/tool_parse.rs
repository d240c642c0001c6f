//! A reply split into text and tool calls as it streams in.
//!
//! [`ToolParser::push`] takes each piece of generated text and gives back
//! what can already be told apart: text that cannot start a call, and
//! whole calls. Text that might begin a call marker is held back until the
//! next piece decides it. [`ToolParser::finish`] gives the rest. A call
//! whose JSON does not parse stays text, as written.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use super::tools::{ToolCall, ToolFormat};

/// One thing told apart in a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolDelta {
    Content(String),
    Call(ToolCall),
}

/// Where the parser is in the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Only whitespace so far: the first character decides.
    Start,
    /// Text, watching for a call marker.
    Text,
    /// Inside a `<tool_call>` block.
    InCall,
    /// The rest is a call (or a JSON reply): held to the end.
    Whole,
    /// Inside the string of a generic `{"response": "..."}`: given out as
    /// it is decoded.
    Response,
    /// After that string: the closing brace, ignored.
    Tail,
}

/// How a generic text reply begins (the grammar's layout).
const RESPONSE: &str = "{\"response\": \"";

/// A JSON object's fields, each as its own text.
type Fields = HashMap<String, Box<RawValue>>;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Splits one reply of a [`ToolFormat`] into text and calls.
#[derive(Debug)]
pub struct ToolParser {
    format: ToolFormat,
    /// The functions offered: a call to any other is text.
    names: Vec<String>,
    state: State,
    /// Text received and not yet given out.
    buf: String,
    /// Whitespace held back: given out only if more text follows it.
    spaces: String,
    /// Bytes of `buf` already searched for the closing marker.
    scanned: usize,
    /// Seed of the next call id.
    seed: u64,
}

impl ToolParser {
    /// A parser for one reply calling the functions `names`; `seed`
    /// makes its call ids.
    pub fn new(format: ToolFormat, names: Vec<String>, seed: u64) -> ToolParser {
        ToolParser {
            format,
            names,
            state: if format == ToolFormat::Generic {
                State::Whole
            } else {
                State::Start
            },
            buf: String::new(),
            spaces: String::new(),
            scanned: 0,
            seed,
        }
    }

    /// Takes the next piece of the reply; appends what it settles to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        self.buf.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if t.is_empty() {
                        return;
                    }
                    self.state = match self.format {
                        ToolFormat::Llama3 if t.starts_with('{') => State::Whole,
                        ToolFormat::MarkedArray(m) if t.starts_with('[') || t.starts_with(m) => {
                            State::Whole
                        }
                        _ => State::Text,
                    };
                }
                State::Text if self.format == ToolFormat::Hermes => {
                    if let Some(p) = self.buf.find(OPEN) {
                        let before: String = self.buf.drain(..p + OPEN.len()).collect();
                        self.content(&before[..p], out);
                        self.spaces.clear();
                        self.scanned = 0;
                        self.state = State::InCall;
                        continue;
                    }
                    let keep = partial_suffix(&self.buf, OPEN);
                    let text: String = self.buf.drain(..self.buf.len() - keep).collect();
                    self.content(&text, out);
                    return;
                }
                State::Text => {
                    let text = std::mem::take(&mut self.buf);
                    self.content(&text, out);
                    return;
                }
                State::InCall => {
                    // Only the new text (and a marker it may complete) is searched.
                    let mut from = self.scanned.saturating_sub(CLOSE.len() - 1);
                    while !self.buf.is_char_boundary(from) {
                        from -= 1;
                    }
                    let Some(p) = self.buf[from..].find(CLOSE).map(|p| p + from) else {
                        self.scanned = self.buf.len();
                        return;
                    };
                    self.scanned = 0;
                    let body: String = self.buf.drain(..p + CLOSE.len()).collect();
                    self.block(&body[..p], true, out);
                    self.state = State::Text;
                }
                State::Whole if self.format == ToolFormat::Generic => {
                    if self.buf.starts_with(RESPONSE) {
                        self.buf.drain(..RESPONSE.len());
                        self.state = State::Response;
                        continue;
                    }
                    return;
                }
                State::Response => {
                    let (text, used, closed) = json_string_prefix(&self.buf);
                    self.buf.drain(..used);
                    self.content(&text, out);
                    if closed {
                        self.state = State::Tail;
                    }
                    return;
                }
                State::Whole | State::Tail => return,
            }
        }
    }

    /// Ends the reply; appends what is left to `out`.
    pub fn finish(&mut self, out: &mut Vec<ToolDelta>) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Start | State::Text => self.content(&rest, out),
            State::InCall => self.block(&rest, false, out),
            State::Whole => self.whole(&rest, out),
            // A reply cut short (by the token limit) keeps what was decoded.
            State::Response | State::Tail => {}
        }
        self.spaces.clear();
    }

    /// Text for the reply. Trailing whitespace is held until more text
    /// follows it, so none is given out before a call or at the end.
    fn content(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        let body = text.trim_end();
        if !body.is_empty() {
            let mut s = std::mem::take(&mut self.spaces);
            s.push_str(body);
            out.push(ToolDelta::Content(s));
        }
        self.spaces.push_str(&text[body.len()..]);
    }

    /// A `<tool_call>` block's body: one call, or an array of calls.
    fn block(&mut self, body: &str, closed: bool, out: &mut Vec<ToolDelta>) {
        match self.calls(body.trim()) {
            Some(calls) => out.extend(calls.into_iter().map(ToolDelta::Call)),
            None => {
                let close = if closed { CLOSE } else { "" };
                let text = format!("{OPEN}{body}{close}");
                self.content(&text, out);
            }
        }
    }

    /// A reply held whole: the format's call JSON, or text.
    fn whole(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        let mut t = text.trim();
        if let ToolFormat::MarkedArray(m) = self.format {
            t = t.strip_prefix(m).unwrap_or(t).trim_start();
        }
        if self.format != ToolFormat::Generic {
            return match self.calls(t) {
                Some(calls) => out.extend(calls.into_iter().map(ToolDelta::Call)),
                None => self.content(text, out),
            };
        }
        let Ok(mut map) = serde_json::from_str::<Fields>(t) else {
            return self.content(text, out);
        };
        let calls = match (map.remove("tool_call"), map.remove("tool_calls")) {
            (Some(c), _) | (None, Some(c)) => self.calls(c.get()),
            (None, None) => match map.remove("response") {
                Some(r) => match serde_json::from_str::<Value>(r.get()) {
                    Ok(Value::String(s)) => return self.content(&s, out),
                    _ => return self.content(r.get(), out),
                },
                None => None,
            },
        };
        match calls {
            Some(calls) => out.extend(calls.into_iter().map(ToolDelta::Call)),
            None => self.content(text, out),
        }
    }

    /// Calls from JSON text: a call object or an array of them; `None` if
    /// it is neither.
    fn calls(&mut self, json: &str) -> Option<Vec<ToolCall>> {
        if json.starts_with('[') {
            let items: Vec<Box<RawValue>> = serde_json::from_str(json).ok()?;
            if items.is_empty() {
                return None;
            }
            return items.iter().map(|c| self.call(c.get())).collect();
        }
        Some(vec![self.call(json)?])
    }

    /// `{"name": ..., "arguments" | "parameters": ..., "id"?}`, or OpenAI's
    /// `{"type": "function", "function": {...}}`. The arguments keep the
    /// model's own JSON text, as llama.cpp gives them.
    fn call(&mut self, json: &str) -> Option<ToolCall> {
        let mut map: Fields = serde_json::from_str(json).ok()?;
        if let Some(f) = map.remove("function")
            && f.get().starts_with('{')
        {
            return self.call(f.get());
        }
        let Ok(Value::String(name)) = serde_json::from_str(map.remove("name")?.get()) else {
            return None;
        };
        // An object that only looks like a call (a reply in JSON with a
        // "name") stays text.
        if !self.names.contains(&name) {
            return None;
        }
        let args = map.remove("arguments").or_else(|| map.remove("parameters"));
        let arguments = match args {
            None => "{}".to_string(),
            Some(a) if a.get().starts_with('{') => a.get().to_string(),
            Some(a) => match serde_json::from_str(a.get()) {
                Ok(Value::String(s)) => s,
                _ => return None,
            },
        };
        let id = match map.remove("id").map(|v| serde_json::from_str(v.get())) {
            Some(Ok(Value::String(id))) if !id.is_empty() => id,
            _ => self.next_id(),
        };
        Some(ToolCall {
            id,
            name,
            arguments,
        })
    }

    /// A fresh call id: 9 letters and digits for Mistral (its template
    /// checks), `call_` and 24 otherwise, as OpenAI writes them.
    fn next_id(&mut self) -> String {
        const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let (prefix, n) = match self.format {
            ToolFormat::MarkedArray("[TOOL_CALLS]") => ("", 9),
            _ => ("call_", 24),
        };
        let mut id = String::from(prefix);
        for _ in 0..n {
            self.seed = splitmix(self.seed);
            id.push(ALNUM[(self.seed % ALNUM.len() as u64) as usize] as char);
        }
        id
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Decodes the JSON string body at the start of `s` (after its opening
/// quote) as far as it is complete: the text, the bytes used, and whether
/// the closing quote was reached. An escape cut in half waits for more.
fn json_string_prefix(s: &str) -> (String, usize, bool) {
    let mut text = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => return (text, i + 1, true),
            b'\\' => {
                let Some(&e) = b.get(i + 1) else { break };
                let simple = match e {
                    b'"' => Some('"'),
                    b'\\' => Some('\\'),
                    b'/' => Some('/'),
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'n' => Some('\n'),
                    b'r' => Some('\r'),
                    b't' => Some('\t'),
                    _ => None,
                };
                if let Some(c) = simple {
                    text.push(c);
                    i += 2;
                    continue;
                }
                let hex = |at: usize| {
                    s.get(at..at + 4)
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                };
                let Some(u) = hex(i + 2) else { break };
                if (0xD800..0xDC00).contains(&u) {
                    // A surrogate pair: both halves or nothing yet.
                    if s.get(i + 6..i + 8) != Some("\\u") {
                        if i + 8 > b.len() {
                            break;
                        }
                        text.push('\u{FFFD}');
                        i += 6;
                        continue;
                    }
                    let Some(lo) = hex(i + 8) else { break };
                    let c = 0x10000 + ((u - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF);
                    text.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
                    i += 12;
                } else {
                    text.push(char::from_u32(u).unwrap_or('\u{FFFD}'));
                    i += 6;
                }
            }
            _ => {
                let c = s[i..].chars().next().unwrap_or('\u{FFFD}');
                text.push(c);
                i += c.len_utf8();
            }
        }
    }
    (text, i, false)
}

/// The length of the longest end of `s` that begins `marker`.
fn partial_suffix(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && marker.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

/// Parses a whole reply calling the functions `names`: its text (trimmed)
/// and its calls.
pub fn parse_reply(
    format: ToolFormat,
    names: &[&str],
    text: &str,
    seed: u64,
) -> (String, Vec<ToolCall>) {
    let names = names.iter().map(|n| n.to_string()).collect();
    let mut p = ToolParser::new(format, names, seed);
    let mut out = Vec::new();
    p.push(text, &mut out);
    p.finish(&mut out);
    let mut content = String::new();
    let mut calls = Vec::new();
    for d in out {
        match d {
            ToolDelta::Content(s) => content.push_str(&s),
            ToolDelta::Call(c) => calls.push(c),
        }
    }
    (content.trim().to_string(), calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: &[&str] = &["f", "get_weather"];

    fn call(name: &str, args: &str) -> (String, String) {
        (name.to_string(), args.to_string())
    }

    fn calls(format: ToolFormat, text: &str) -> (String, Vec<(String, String)>) {
        let (content, cs) = parse_reply(format, NAMES, text, 1);
        (
            content,
            cs.into_iter().map(|c| (c.name, c.arguments)).collect(),
        )
    }

    #[test]
    fn hermes_blocks() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        assert_eq!(
            calls(ToolFormat::Hermes, text),
            (
                "Let me look.".to_string(),
                vec![call("get_weather", r#"{"city": "Paris"}"#), call("f", "{}")]
            )
        );
        // A broken call stays text; an unclosed one at the end still counts.
        let (c, cs) = calls(ToolFormat::Hermes, "<tool_call>{nope}</tool_call>");
        assert_eq!((c.as_str(), cs.len()), ("<tool_call>{nope}</tool_call>", 0));
        let (_, cs) = calls(ToolFormat::Hermes, "<tool_call>{\"name\": \"f\"}");
        assert_eq!(cs, vec![call("f", "{}")]);
    }

    #[test]
    fn streaming_holds_back_a_marker_prefix() {
        let text =
            "Sure <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"<tool\"}}\n</tool_call>";
        for step in 1..8 {
            let mut p = ToolParser::new(ToolFormat::Hermes, vec!["f".into()], 7);
            let mut out = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(step) {
                p.push(&piece.iter().collect::<String>(), &mut out);
            }
            p.finish(&mut out);
            let text: String = out
                .iter()
                .filter_map(|d| match d {
                    ToolDelta::Content(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(text, "Sure", "step {step}");
            let n = out
                .iter()
                .filter(|d| matches!(d, ToolDelta::Call(_)))
                .count();
            assert_eq!(n, 1, "step {step}");
        }
    }

    #[test]
    fn llama3_marked_and_generic() {
        let t = r#" {"name": "f", "parameters": {"a": [1, 2]}}"#;
        assert_eq!(
            calls(ToolFormat::Llama3, t),
            (String::new(), vec![call("f", r#"{"a": [1, 2]}"#)])
        );
        assert_eq!(
            calls(ToolFormat::Llama3, "Hello {there}"),
            ("Hello {there}".to_string(), vec![])
        );
        // JSON that names no offered function is a reply, not a call.
        let person = r#"{"name": "Ada", "parameters": {"age": 36}}"#;
        assert_eq!(
            calls(ToolFormat::Llama3, person),
            (person.to_string(), vec![])
        );
        let m = ToolFormat::MarkedArray("[TOOL_CALLS]");
        let (_, cs) = parse_reply(
            m,
            NAMES,
            r#"[{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}]"#,
            1,
        );
        assert_eq!(
            (cs[0].id.as_str(), cs[0].arguments.as_str()),
            ("abcdefghi", r#"{"a": 1}"#)
        );
        let g = ToolFormat::Generic;
        assert_eq!(
            calls(
                g,
                r#"{"tool_call": {"name": "f", "arguments": {"b": true}}}"#
            ),
            (String::new(), vec![call("f", r#"{"b": true}"#)])
        );
        assert_eq!(
            calls(g, r#"{"response": "Hi!"}"#),
            ("Hi!".to_string(), vec![])
        );
        // Cut by the token limit: what was written.
        assert_eq!(
            calls(g, r#"{"response": "Hi \"you\u00e9"#),
            ("Hi \"youé".to_string(), vec![])
        );
        assert_eq!(calls(g, "plain"), ("plain".to_string(), vec![]));
    }

    #[test]
    fn generic_responses_stream() {
        let text = r#"{"response": "a\nb \"q\" \ud83e\udd80 é."}"#;
        for step in 1..6 {
            let mut p = ToolParser::new(ToolFormat::Generic, vec![], 1);
            let mut out = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(step) {
                p.push(&piece.iter().collect::<String>(), &mut out);
            }
            let before_end = out.len();
            p.finish(&mut out);
            let got: String = out
                .iter()
                .map(|d| match d {
                    ToolDelta::Content(s) => s.as_str(),
                    ToolDelta::Call(_) => panic!("no call"),
                })
                .collect();
            assert_eq!(got, "a\nb \"q\" 🦀 é.", "step {step}");
            assert_eq!(before_end, out.len(), "streamed before the end");
        }
    }

    #[test]
    fn ids_are_fresh_and_shaped() {
        let (_, cs) = parse_reply(
            ToolFormat::Hermes,
            NAMES,
            "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\": \"f\"}</tool_call>",
            3,
        );
        assert_ne!(cs[0].id, cs[1].id);
        assert!(cs[0].id.starts_with("call_") && cs[0].id.len() == 29);
        let m = ToolFormat::MarkedArray("[TOOL_CALLS]");
        let (_, cs) = parse_reply(m, NAMES, r#"[{"name": "f", "arguments": {}}]"#, 3);
        assert!(cs[0].id.len() == 9 && cs[0].id.bytes().all(|b| b.is_ascii_alphanumeric()));
    }
}
