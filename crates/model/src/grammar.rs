//! Constrained decoding: at every step a grammar masks the tokens that
//! cannot continue a valid reply, so the reply always parses.
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance),
//! which llama.cpp, vLLM, SGLang and mistral.rs also use. It compiles JSON
//! Schemas and Lark grammars against the model's vocabulary.
//!
//! * [`Grammars`]: the vocabulary as the engine sees it, built once per model.
//! * [`Grammar`]: what a reply must match.
//! * [`Constraint`]: one generation's place in its grammar; a
//!   [`crate::sampling::Sampler`] holding one samples only allowed tokens.
//!
//! A constrained step allocates inside the engine (its masks and parser
//! state); unconstrained decoding does not pay for it.

use crate::ModelError;
use crate::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};
use std::sync::Arc;
use toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// What a reply must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object: OpenAI's `response_format: {"type": "json_object"}`.
    JsonObject,
    /// A JSON Schema: OpenAI's `json_schema` response format.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
}

/// How JSON is laid out: one space after `,` and `:`, no other
/// whitespace. A small model given free whitespace can emit newlines until
/// its token limit; `lenient` ignores schema keywords the engine does not
/// enforce (such as `format` values it does not know) instead of refusing.
fn json_layout() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": true,
    })
}

impl Grammar {
    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(with_layout(json!({
                "type": "object"
            }))),
            Grammar::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_layout(schema.clone()))
            }
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        }
    }
}

/// `schema` with [`json_layout`] unless it sets its own `x-guidance`, and
/// its integers bounded.
pub(crate) fn with_layout(mut schema: Value) -> Value {
    bound_integers(&mut schema, 0);
    if let Value::Object(map) = &mut schema
        && !map.contains_key("x-guidance")
    {
        map.insert("x-guidance".into(), json_layout());
    }
    schema
}

/// How deep [`bound_integers`] looks: deeper schemas keep their integers
/// as they are (the engine's own limits still apply).
const MAX_SCHEMA_DEPTH: usize = 64;

/// The largest integer every JSON parser holds exactly (JavaScript's
/// `Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Bounds every `integer` without a bound to ±[`MAX_SAFE_INTEGER`]. An
/// unbounded integer lets a sampled reply add digits until its token
/// limit, as small models at high temperature do.
fn bound_integers(schema: &mut Value, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    match schema {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if integer {
                if !map.contains_key("minimum") && !map.contains_key("exclusiveMinimum") {
                    map.insert("minimum".into(), json!(-MAX_SAFE_INTEGER));
                }
                if !map.contains_key("maximum") && !map.contains_key("exclusiveMaximum") {
                    map.insert("maximum".into(), json!(MAX_SAFE_INTEGER));
                }
            }
            // Every subschema, wherever it sits (properties, items, $defs,
            // anyOf, ...); the keywords holding data are left alone.
            for (k, v) in map.iter_mut() {
                if !matches!(k.as_str(), "enum" | "const" | "default" | "examples") {
                    bound_integers(v, depth + 1);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| bound_integers(v, depth + 1)),
        _ => {}
    }
}

/// A model's vocabulary compiled for the grammar engine: every token's
/// bytes in a trie. Cheap to share; build it once per model.
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
    /// The token that ends a constrained text.
    eos: u32,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars").finish_non_exhaustive()
    }
}

impl Grammars {
    /// The engine's view of `tok`: a token's bytes are its text; a token
    /// with no text (a control token) is its name behind the engine's
    /// special-token marker, so a grammar can name it but never spell it.
    pub fn new(tok: &Tokenizer) -> Result<Grammars, ModelError> {
        let n_vocab = tok.n_vocab();
        let words: Vec<Vec<u8>> = (0..n_vocab as u32)
            .map(|id| {
                let piece = tok.token_to_piece(id, false);
                if !piece.is_empty() {
                    return piece;
                }
                let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                marked.extend(tok.token_to_piece(id, true));
                marked
            })
            .collect();
        let sp = tok.special_tokens();
        // The turn's end first: a chat reply ends there.
        let eos = sp
            .eot
            .or(sp.eos)
            .ok_or_else(|| ModelError::Grammar("the model has no end-of-text token".into()))?;
        let info = TokRxInfo {
            vocab_size: n_vocab as u32,
            tok_eos: eos,
            tok_bos: sp.bos,
            tok_pad: sp.pad,
            tok_unk: sp.unk,
            tok_end_of_turn: sp.eos.filter(|&e| e != eos),
        };
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(VocabEnv { trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(grammar_error)?;
        factory.quiet();
        Ok(Grammars {
            factory: Arc::new(factory),
            eos,
        })
    }

    /// Compiles `grammar` for one generation. An invalid or unsupported
    /// grammar is the caller's error.
    pub fn constraint(&self, grammar: &Grammar) -> Result<Constraint, ModelError> {
        let parser = self
            .factory
            .create_parser(grammar.top_level())
            .map_err(grammar_error)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ModelError::Grammar(e));
        }
        Ok(Constraint {
            matcher: Box::new(matcher),
            eos: self.eos,
        })
    }
}

fn grammar_error(e: impl std::fmt::Display) -> ModelError {
    ModelError::Grammar(e.to_string())
}

/// The vocabulary as the engine asks for it. The engine tokenizes text
/// only to force tokens, which lamina does not enable, so the trie's
/// greedy tokenization (declared not canonical) serves.
struct VocabEnv {
    trie: TokTrie,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// One generation's place in its grammar.
pub struct Constraint {
    /// Boxed: the matcher is large, and requests carrying a constraint
    /// move through queues.
    matcher: Box<Matcher>,
    eos: u32,
}

impl Clone for Constraint {
    /// An independent copy: the engine's plain clone shares parser state.
    fn clone(&self) -> Constraint {
        Constraint {
            matcher: Box::new(self.matcher.deep_clone()),
            eos: self.eos,
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// The tokens allowed next; only the end of text once the grammar is
    /// complete. `None` when the engine failed: the generation should end.
    pub(crate) fn allowed(&mut self) -> Option<SimpleVob> {
        self.matcher.compute_mask_or_eos().ok()
    }

    /// Moves past `id`, a token [`Constraint::allowed`] allowed.
    pub(crate) fn advance(&mut self, id: u32) {
        // A failure leaves the matcher in its error state, whose mask is
        // refused next step, which ends the generation.
        let _ = self.matcher.consume_token(id);
    }

    /// The token that ends the text when the engine fails.
    pub(crate) fn end(&self) -> u32 {
        self.eos
    }

    /// Back to the grammar's start.
    pub(crate) fn reset(&mut self) {
        let _ = self.matcher.reset();
    }

    /// The engine's error, if it failed.
    pub fn error(&self) -> Option<String> {
        self.matcher.get_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_get_safe_bounds_but_data_and_set_bounds_stay() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": ["integer", "null"], "minimum": 0},
                "type": {"type": "string"},
                "c": {"enum": [{"type": "integer"}]},
            },
            "$defs": {"d": {"type": "array", "items": {"type": "integer", "exclusiveMaximum": 9}}},
        });
        bound_integers(&mut s, 0);
        let p = &s["properties"];
        assert_eq!(p["a"]["minimum"], json!(-MAX_SAFE_INTEGER));
        assert_eq!(p["a"]["maximum"], json!(MAX_SAFE_INTEGER));
        assert_eq!(p["b"]["minimum"], json!(0));
        assert_eq!(p["b"]["maximum"], json!(MAX_SAFE_INTEGER));
        assert_eq!(p["type"], json!({"type": "string"}));
        assert_eq!(p["c"], json!({"enum": [{"type": "integer"}]}));
        let d = &s["$defs"]["d"]["items"];
        assert_eq!(d["minimum"], json!(-MAX_SAFE_INTEGER));
        assert!(d.get("maximum").is_none());
    }
}
