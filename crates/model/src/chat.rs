//! Chat templates: the GGUF's `tokenizer.chat_template` (a Jinja template
//! from the Hugging Face tokenizer config) rendered with minijinja the way
//! `transformers` renders it: `trim_blocks` and `lstrip_blocks` on, loop
//! controls, `raise_exception`, `strftime_now`, a Python-style `tojson`, and
//! Python string and dict methods (`.strip()`, `.startswith()`, `.items()`,
//! …). The variables are llama.cpp's: `messages`, `bos_token`, `eos_token`,
//! `enable_thinking` (true), `date_string` and `datetime` (today, as
//! "26 Jul 2024" and "Jul 26 2024"), and `add_generation_prompt` (defined
//! only when true). Times are UTC where llama.cpp uses the local zone.
//!
//! As llama.cpp does, a template that ignores a system message (Gemma 2's
//! raises an error instead) gets the system text merged into the next
//! message, joined by a newline.
//!
//! A file without a template gets a built-in one: Gemma's for the Gemma
//! family, ChatML otherwise (llama.cpp's fallback).
//!
//! As llama.cpp does, a BOS text the template writes at the start is
//! removed when the tokenizer adds BOS itself, so the prompt is tokenized
//! with `add_special` and `parse_special` and has exactly one BOS.

mod funcs;
mod tokens;
pub mod tool_parse;
pub mod tools;

use std::io;

use lamina_gguf::Gguf;
use minijinja::value::Value;
use minijinja::{Environment, ErrorKind};

use funcs::{now_secs, raise_exception, strftime, tojson};

use crate::ModelError;
use crate::family::Family;
use crate::tokenizer::Tokenizer;
use tools::{Tool, ToolCall, ToolFormat};

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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
    /// The calls an assistant turn made.
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` turn answers.
    pub tool_call_id: Option<String>,
    /// The function a `tool` turn answers for.
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.to_string(),
            content: content.into(),
            ..Message::default()
        }
    }

    /// The message as templates read it: OpenAI's fields, a call's
    /// arguments as an object.
    fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::json!({"role": self.role, "content": self.content});
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": tools::arguments_value(&c.arguments)},
                    })
                })
                .collect();
            m["tool_calls"] = calls.into();
        }
        if let Some(id) = &self.tool_call_id {
            m["tool_call_id"] = id.as_str().into();
        }
        if let Some(name) = &self.name {
            m["name"] = name.as_str().into();
        }
        m
    }

    /// Bytes the message brings to a rendering.
    fn size(&self) -> usize {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64)
            .sum();
        self.role.len()
            + self.content.len()
            + calls
            + self.tool_call_id.as_ref().map_or(0, String::len)
            + self.name.as_ref().map_or(0, String::len)
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
    strip_eos: bool,
    /// The clock templates see (seconds since the Unix epoch); `None` is now.
    clock: Option<u64>,
    /// Whether the template renders a leading system message's content.
    system_role: bool,
    /// How the template's model writes tool calls.
    pub tool_format: ToolFormat,
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
        family: &Family,
        tok: &Tokenizer,
    ) -> Result<ChatTemplate, ModelError> {
        match g.get("tokenizer.chat_template") {
            Some(v) => {
                let src = v.as_str().ok_or_else(|| {
                    ModelError::BadKey("tokenizer.chat_template (not a string)".into())
                })?;
                ChatTemplate::new(src, TemplateSource::File, tok)
            }
            None if family.is_gemma() => {
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
        let mut t = ChatTemplate::with_tokens(
            src,
            source,
            &text(tok.bos()),
            &text(tok.eos()),
            tok.add_bos(),
        )?;
        t.strip_eos = tok.add_eos();
        Ok(t)
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
        // llama.cpp's engine lets a lookup on an undefined value give undefined
        // (Gemma 2's `messages[0]['role']` on an empty conversation).
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |fmt: String| strftime(&fmt, now_secs()));
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, src.to_string())
            .map_err(|e| ModelError::Input(format!("chat template does not compile: {e:#}")))?;
        let mut t = ChatTemplate {
            env,
            source,
            bos: bos.to_string(),
            eos: eos.to_string(),
            strip_bos,
            strip_eos: false,
            clock: None,
            system_role: true,
            tool_format: ToolFormat::detect(src),
        };
        t.system_role = t.renders_system_text();
        Ok(t)
    }

    /// Removes a trailing EOS text from the output too (for tokenizers that
    /// append their own EOS), as llama.cpp does.
    pub fn strip_eos(mut self, yes: bool) -> ChatTemplate {
        self.strip_eos = yes;
        self
    }

    /// Fixes the clock that `strftime_now`, `date_string` and `datetime`
    /// read (seconds since the Unix epoch, UTC), for reproducible prompts.
    pub fn at_time(mut self, unix_secs: u64) -> ChatTemplate {
        self.env
            .add_function("strftime_now", move |fmt: String| strftime(&fmt, unix_secs));
        self.clock = Some(unix_secs);
        self.system_role = self.renders_system_text();
        self
    }

    /// Whether a system message's content reaches the output of a system +
    /// user conversation: llama.cpp's probe asks whether the content is read,
    /// which for real templates is the same (Gemma 2's raises instead).
    fn renders_system_text(&self) -> bool {
        const PROBE: &str = "System message";
        let msgs = [
            Message::new("system", PROBE),
            Message::new("user", "User message"),
        ];
        self.render_raw(&msgs, None, true)
            .is_ok_and(|out| out.contains(PROBE))
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
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`ChatTemplate::render`] with tools the model may call: a template
    /// that takes `tools` gets them, one that does not gets them described
    /// in the system message ([`tools::generic_messages`]).
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&[Tool]>,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let generic;
        let (messages, tools) = match tools {
            Some(t) if !self.tool_format.native() => {
                generic = tools::generic_messages(messages, t);
                (&generic[..], None)
            }
            t => (messages, t),
        };
        if self.system_role || messages.first().is_none_or(|m| m.role != "system") {
            return self.render_raw(messages, tools, add_generation_prompt);
        }
        // llama.cpp's workaround for templates without a system role.
        let mut merged = messages[1..].to_vec();
        if let Some(first) = merged.first_mut() {
            first.content = format!("{}\n{}", messages[0].content, first.content);
        }
        self.render_raw(&merged, tools, add_generation_prompt)
    }

    fn render_raw(
        &self,
        messages: &[Message],
        tools: Option<&[Tool]>,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let msgs: Vec<serde_json::Value> = messages.iter().map(Message::to_json).collect();
        let tools: Option<Vec<serde_json::Value>> =
            tools.map(|t| t.iter().map(Tool::to_openai).collect());
        let tools_size = tools
            .as_ref()
            .map_or(0, |t| serde_json::to_string(t).map_or(0, |s| s.len()));
        let now = self.clock.unwrap_or_else(now_secs);
        let ctx = minijinja::context! {
            messages => Value::from_serialize(&msgs),
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
            enable_thinking => true,
            date_string => strftime("%d %b %Y", now),
            datetime => strftime("%b %d %Y", now),
        };
        let ctx = match &tools {
            Some(t) => minijinja::context! { tools => Value::from_serialize(t), ..ctx },
            None => ctx,
        };
        // llama.cpp leaves the variable undefined rather than false.
        let ctx = if add_generation_prompt {
            minijinja::context! { add_generation_prompt => true, ..ctx }
        } else {
            ctx
        };
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| ModelError::Input(format!("chat template: {e:#}")))?;
        let own: usize = messages.iter().map(Message::size).sum::<usize>() + tools_size;
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
        if self.strip_eos && !self.eos.is_empty() && out.ends_with(&self.eos) {
            out.truncate(out.len() - self.eos.len());
        }
        Ok(out)
    }
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
    fn llama_cpp_conventions() {
        // No system role: the system text joins the first message.
        let src = "{% for m in messages %}{% if m.role != 'system' %}[{{ m.role }}:{{ m.content }}]{% endif %}{% endfor %}\
                   {% if add_generation_prompt is defined %}+{% endif %}{{ date_string }}|{{ datetime }}|{{ enable_thinking }}{{ eos_token }}";
        let t = ChatTemplate::with_tokens(src, TemplateSource::Custom, "<s>", "</s>", true)
            .unwrap()
            .strip_eos(true)
            .at_time(1_741_944_600);
        let msgs = [Message::new("system", "S"), Message::new("user", "U")];
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "[user:S\nU]+14 Mar 2025|Mar 14 2025|True"
        );
        assert_eq!(
            t.render(&msgs[1..], false).unwrap(),
            "[user:U]14 Mar 2025|Mar 14 2025|True"
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
}
