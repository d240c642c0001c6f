//! Chat templates: the GGUF's `tokenizer.chat_template` (a Jinja template
//! from the Hugging Face tokenizer config) rendered with minijinja the way
//! `transformers` renders it: `trim_blocks` and `lstrip_blocks` on, loop
//! controls, `raise_exception`, `strftime_now`, a Python-style `tojson`, and
//! Python string and dict methods (`.strip()`, `.startswith()`, `.items()`,
//! …). The variables are `messages`, `add_generation_prompt`, `bos_token`
//! and `eos_token`.
//!
//! A file without a template gets a built-in one: Gemma's for the Gemma
//! family, ChatML otherwise (llama.cpp's fallback).
//!
//! As llama.cpp does, a BOS text the template writes at the start is
//! removed when the tokenizer adds BOS itself, so the prompt is tokenized
//! with `add_special` and `parse_special` and has exactly one BOS.

mod tokens;

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use lamina_gguf::Gguf;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

use crate::ModelError;
use crate::hparams::Arch;
use crate::tokenizer::Tokenizer;

/// Gemma 3's template from its Hugging Face tokenizer config (system
/// messages are merged into the first user turn).
pub const GEMMA_TEMPLATE: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"#;

/// ChatML, llama.cpp's template for files that have none.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\n  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- '<|im_start|>assistant\\n' -}}\n{%- endif -%}";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// Where a template came from (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateSource {
    /// `tokenizer.chat_template` in the model file.
    File,
    /// Built in (the file has none).
    BuiltinGemma,
    BuiltinChatMl,
    /// Given by the user (`--chat-template`).
    Custom,
}

/// A compiled chat template with the model's BOS/EOS texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    pub source: TemplateSource,
    bos: String,
    eos: String,
    strip_bos: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

const NAME: &str = "chat";

/// Template instructions one render may run: real templates need a few
/// hundred per message, a runaway loop is stopped well within a second.
pub const TEMPLATE_FUEL: u64 = 2_000_000;

/// Output a render may write beyond what the messages themselves bring.
const OUTPUT_BASE: usize = 1 << 20;

/// Refuses writes past a byte budget, so a template cannot print without end.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
}

impl io::Write for CappedWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if b.len() > self.cap - self.buf.len() {
            return Err(io::Error::other("output limit reached"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ChatTemplate {
    /// The model's template, or the built-in one for its architecture.
    pub fn for_model<D: AsRef<[u8]>>(
        g: &Gguf<D>,
        arch: Arch,
        tok: &Tokenizer,
    ) -> Result<ChatTemplate, ModelError> {
        match g.get("tokenizer.chat_template") {
            Some(v) => {
                let src = v.as_str().ok_or_else(|| {
                    ModelError::BadKey("tokenizer.chat_template (not a string)".into())
                })?;
                ChatTemplate::new(src, TemplateSource::File, tok)
            }
            None if arch.is_gemma() => {
                ChatTemplate::new(GEMMA_TEMPLATE, TemplateSource::BuiltinGemma, tok)
            }
            None => ChatTemplate::new(CHATML_TEMPLATE, TemplateSource::BuiltinChatMl, tok),
        }
    }

    /// Compiles `src`; BOS/EOS texts come from the tokenizer.
    pub fn new(
        src: &str,
        source: TemplateSource,
        tok: &Tokenizer,
    ) -> Result<ChatTemplate, ModelError> {
        let text = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(&tok.token_to_piece(i, true)).into_owned())
                .unwrap_or_default()
        };
        ChatTemplate::with_tokens(
            src,
            source,
            &text(tok.bos()),
            &text(tok.eos()),
            tok.add_bos(),
        )
    }

    /// Compiles `src` with explicit BOS/EOS texts; `strip_bos` removes a
    /// leading BOS text from the output (the tokenizer adds its own).
    pub fn with_tokens(
        src: &str,
        source: TemplateSource,
        bos: &str,
        eos: &str,
        strip_bos: bool,
    ) -> Result<ChatTemplate, ModelError> {
        let mut env = Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, src.to_string())
            .map_err(|e| ModelError::Input(format!("chat template does not compile: {e:#}")))?;
        Ok(ChatTemplate {
            env,
            source,
            bos: bos.to_string(),
            eos: eos.to_string(),
            strip_bos,
        })
    }

    /// The conversation as prompt text (ending with the assistant's turn
    /// opener when `add_generation_prompt`). Rendering stops with an error
    /// after [`TEMPLATE_FUEL`] template instructions, or once the output
    /// passes 1 MiB plus four times the messages' own size.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        let ctx = minijinja::context! {
            messages => Value::from_serialize(&msgs),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        };
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| ModelError::Input(format!("chat template: {e:#}")))?;
        let own: usize = messages
            .iter()
            .map(|m| m.content.len() + m.role.len())
            .sum();
        let cap = own.saturating_mul(4).saturating_add(OUTPUT_BASE);
        let mut w = CappedWriter {
            buf: Vec::new(),
            cap,
        };
        if let Err(e) = tmpl.render_captured_to(ctx, &mut w) {
            let msg = match e.kind() {
                ErrorKind::OutOfFuel => format!(
                    "chat template failed: it ran more than {TEMPLATE_FUEL} instructions (a runaway loop?)"
                ),
                ErrorKind::WriteFailure => {
                    format!("chat template failed: its output passed the limit of {cap} bytes")
                }
                _ => format!("chat template failed: {e:#}"),
            };
            return Err(ModelError::Input(msg));
        }
        // The engine writes only whole `str`s, so this never replaces anything.
        let mut out = String::from_utf8(w.buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if self.strip_bos && !self.bos.is_empty() && out.starts_with(&self.bos) {
            out.drain(..self.bos.len());
        }
        Ok(out)
    }
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(format)`: the current UTC time; %d %m %Y %y %H %M %S %b %B
/// %a %A %j and %% are understood, other directives are kept as they are.
fn strftime_now(fmt: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(&fmt, secs)
}

fn strftime(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[(days % 7) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&day[..3]),
            Some('A') => out.push_str(day),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=indent)`, as the
/// `tojson` of `transformers`' template environment.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Accepted for compatibility; keys keep their order either way.
    let _: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value).map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e)
    })?;
    let mut out = String::new();
    py_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => out.push_str(&n.to_string()),
        J::String(s) => py_str(s, out),
        J::Array(a) if a.is_empty() => out.push_str("[]"),
        J::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(o) if o.is_empty() => out.push_str("{}"),
        J::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                py_str(k, out);
                out.push_str(": ");
                py_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

fn py_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma() -> ChatTemplate {
        ChatTemplate::with_tokens(
            GEMMA_TEMPLATE,
            TemplateSource::BuiltinGemma,
            "<bos>",
            "<eos>",
            true,
        )
        .unwrap()
    }

    #[test]
    fn gemma_template_matches_hugging_face() {
        // What transformers' apply_chat_template gives for Gemma 3 (the BOS
        // text is removed: the tokenizer adds it).
        let msgs = [
            Message::new("system", "Be brief."),
            Message::new("user", " Hi! "),
            Message::new("assistant", "Hello."),
            Message::new("user", "Why?"),
        ];
        assert_eq!(
            gemma().render(&msgs, true).unwrap(),
            "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n\
             <start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n"
        );
        let t = ChatTemplate::with_tokens(
            GEMMA_TEMPLATE,
            TemplateSource::BuiltinGemma,
            "<bos>",
            "<eos>",
            false,
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "x")], false).unwrap(),
            "<bos><start_of_turn>user\nx<end_of_turn>\n"
        );
    }

    #[test]
    fn raise_exception_becomes_an_error() {
        let msgs = [Message::new("user", "a"), Message::new("user", "b")];
        let err = gemma().render(&msgs, true).unwrap_err().to_string();
        assert!(err.contains("Conversation roles must alternate"), "{err}");
    }

    #[test]
    fn chatml_and_python_methods() {
        let t = ChatTemplate::with_tokens(
            CHATML_TEMPLATE,
            TemplateSource::BuiltinChatMl,
            "",
            "",
            false,
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "hi")], true).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        // Python's spelling of booleans, as in transformers.
        let src = "{% for m in messages %}{{ m['content'].strip().upper() }}|{{ m.role.startswith('u') }}\n{% endfor %}{{ messages[0] | tojson }}";
        let t = ChatTemplate::with_tokens(src, TemplateSource::Custom, "", "", false).unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "  é\"x  ")], false)
                .unwrap(),
            "É\"X|True\n{\"role\": \"user\", \"content\": \"  é\\\"x  \"}"
        );
    }

    #[test]
    fn strftime_formats_dates() {
        // 2024-07-26 13:05:09 UTC was a Friday, day 208 of a leap year.
        assert_eq!(
            strftime("%d %B %Y %H:%M:%S %a %j %b %y%%", 1_722_000_309),
            "26 July 2024 13:25:09 Fri 208 Jul 24%"
        );
    }
}
