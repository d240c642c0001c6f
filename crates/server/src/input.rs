//! Typed forms of the request fields that a client can make large: the
//! embeddings `input` and completions `prompt` (texts or token ids, streamed
//! straight into `String`s and `Vec<u32>`s), chat message content, stop
//! strings, and the fields that are only checked for presence ([`Shape`]),
//! which are skipped without building anything. No request is ever parsed
//! into a generic `serde_json::Value` tree, which costs tens of times its
//! text, except the fields that are trees by nature ([`crate::tree`]),
//! under a budget.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, de::MapAccess};
use serde_json::value::RawValue;

use crate::error::ApiError;

/// One input of an embeddings or completions request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

/// What an `input` or `prompt` may hold.
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    /// Token ids must be below this.
    pub n_vocab: usize,
    /// Most inputs (texts or id lists).
    pub max_inputs: usize,
    /// Most token ids given directly, over all inputs (beyond: 413).
    pub max_tokens: usize,
}

/// The parsed inputs, and whether they came as an array of several (their
/// errors then name `param[i]`).
#[derive(Debug, PartialEq, Eq)]
pub struct Inputs {
    pub items: Vec<Input>,
    pub many: bool,
}

fn shape_message(param: &str) -> String {
    format!(
        "'{param}' must be a string, an array of strings, an array of token ids \
         or an array of arrays of token ids"
    )
}

/// Parses `raw` (the field's JSON text) under `lim`; `param` names the field.
pub fn parse_inputs(param: &str, raw: &RawValue, lim: InputLimits) -> Result<Inputs, ApiError> {
    let seed = InputsSeed {
        param,
        lim,
        failure: RefCell::new(None),
        n_ids: RefCell::new(0),
    };
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let parsed = (&seed).deserialize(&mut de);
    if let Some(e) = seed.failure.into_inner() {
        return Err(e);
    }
    let inputs = parsed.map_err(|e| {
        let msg = e.to_string();
        if msg.starts_with("invalid type") {
            ApiError::invalid_param(param, format!("{} ({msg})", shape_message(param)))
        } else {
            ApiError::invalid_param(param, format!("Invalid value for '{param}': {msg}"))
        }
    })?;
    for (i, input) in inputs.items.iter().enumerate() {
        let empty = match input {
            Input::Text(s) => s.is_empty(),
            Input::Tokens(t) => t.is_empty(),
        };
        if empty {
            let at = if inputs.many {
                format!("{param}[{i}]")
            } else {
                param.to_string()
            };
            return Err(ApiError::invalid_param(
                &at,
                format!("'{at}' is empty: there is nothing to process"),
            ));
        }
    }
    Ok(inputs)
}

struct InputsSeed<'a> {
    param: &'a str,
    lim: InputLimits,
    /// The precise error when the visitor refuses something (serde's error
    /// type carries only text).
    failure: RefCell<Option<ApiError>>,
    /// Token ids taken so far, over all inputs.
    n_ids: RefCell<usize>,
}

impl InputsSeed<'_> {
    fn fail<E: de::Error>(&self, e: ApiError) -> E {
        let msg = e.message.clone();
        *self.failure.borrow_mut() = Some(e);
        E::custom(msg)
    }

    fn too_many<E: de::Error>(&self) -> E {
        let param = self.param;
        self.fail(
            ApiError::invalid_param(
                param,
                format!(
                    "'{param}' has more than the {} inputs allowed per request",
                    self.lim.max_inputs
                ),
            )
            .code("too_many_inputs"),
        )
    }

    /// Checks one token id (`at` names it) and counts it against the budget.
    fn id<E: de::Error>(&self, v: u64, at: &dyn Fn() -> String) -> Result<u32, E> {
        if v >= self.lim.n_vocab as u64 {
            let at = at();
            return Err(self.fail(ApiError::invalid_param(
                self.param,
                format!(
                    "'{at}' = {v} is not a token id (an integer from 0 to {})",
                    self.lim.n_vocab.saturating_sub(1)
                ),
            )));
        }
        let mut n = self.n_ids.borrow_mut();
        *n += 1;
        if *n > self.lim.max_tokens {
            drop(n);
            return Err(self.fail(crate::error::too_many_tokens(
                self.param,
                self.lim.max_tokens,
            )));
        }
        Ok(v as u32)
    }
}

impl<'de> DeserializeSeed<'de> for &InputsSeed<'_> {
    type Value = Inputs;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Inputs, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &InputsSeed<'_> {
    type Value = Inputs;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&shape_message(self.param))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Inputs, E> {
        self.visit_string(v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Inputs, E> {
        Ok(Inputs {
            items: vec![Input::Text(v)],
            many: false,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Inputs, A::Error> {
        let param = self.param;
        let first = match seq.next_element_seed(ItemSeed(self, 0))? {
            None => {
                return Err(self.fail(ApiError::invalid_param(
                    param,
                    format!("'{param}' is an empty array"),
                )));
            }
            Some(first) => first,
        };
        match first {
            Item::Id(id) => {
                // One input of token ids, read straight into its vector.
                let mut ids = vec![id];
                while let Some(id) = seq.next_element_seed(IdSeed(self, ids.len(), None))? {
                    ids.push(id);
                }
                Ok(Inputs {
                    items: vec![Input::Tokens(ids)],
                    many: false,
                })
            }
            Item::Text(t) => {
                let mut items = vec![Input::Text(t)];
                while let Some(t) = seq.next_element::<String>()? {
                    if items.len() >= self.lim.max_inputs {
                        return Err(self.too_many());
                    }
                    items.push(Input::Text(t));
                }
                Ok(Inputs { items, many: true })
            }
            Item::Ids(ids) => {
                let mut items = vec![Input::Tokens(ids)];
                while let Some(ids) = seq.next_element_seed(IdsSeed(self, items.len()))? {
                    if items.len() >= self.lim.max_inputs {
                        return Err(self.too_many());
                    }
                    items.push(Input::Tokens(ids));
                }
                Ok(Inputs { items, many: true })
            }
        }
    }
}

/// The first element of an array, which decides what the rest must be.
enum Item {
    Text(String),
    Id(u32),
    Ids(Vec<u32>),
}

struct ItemSeed<'s, 'a>(&'s InputsSeed<'a>, usize);

impl<'de> DeserializeSeed<'de> for ItemSeed<'_, '_> {
    type Value = Item;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Item, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_, '_> {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, a token id or an array of token ids")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Item, E> {
        Ok(Item::Text(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Item, E> {
        Ok(Item::Text(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Item, E> {
        let p = self.0.param;
        self.0.id(v, &|| format!("{p}[0]")).map(Item::Id)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Item, A::Error> {
        IdsSeed(self.0, self.1).visit_seq(seq).map(Item::Ids)
    }
}

/// One token id at `param[outer][index]` (or `param[index]`).
struct IdSeed<'s, 'a>(&'s InputsSeed<'a>, usize, Option<usize>);

impl<'de> DeserializeSeed<'de> for IdSeed<'_, '_> {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        let v = u64::deserialize(d)?;
        let (p, i, outer) = (self.0.param, self.1, self.2);
        self.0.id(v, &|| match outer {
            Some(o) => format!("{p}[{o}][{i}]"),
            None => format!("{p}[{i}]"),
        })
    }
}

/// One array of token ids, the `index`-th input.
struct IdsSeed<'s, 'a>(&'s InputsSeed<'a>, usize);

impl<'de> DeserializeSeed<'de> for IdsSeed<'_, '_> {
    type Value = Vec<u32>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u32>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for IdsSeed<'_, '_> {
    type Value = Vec<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of token ids")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u32>, A::Error> {
        let mut ids = Vec::new();
        while let Some(id) = seq.next_element_seed(IdSeed(self.0, ids.len(), Some(self.1)))? {
            ids.push(id);
        }
        Ok(ids)
    }
}

/// The outline of a JSON value whose content the server ignores: skipped
/// with [`IgnoredAny`], so nothing request-sized is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Null,
    Bool(bool),
    /// The number 0.
    Zero,
    Number,
    String,
    /// An array and its length.
    Array(usize),
    /// An object and its number of entries.
    Object(usize),
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        Shape::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Shape, E> {
        Ok(Shape::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Shape, E> {
        Ok(if v == 0 { Shape::Zero } else { Shape::Number })
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Shape, E> {
        Ok(if v == 0 { Shape::Zero } else { Shape::Number })
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Number)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::String)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut n = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(Shape::Array(n))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut n = 0;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(Shape::Object(n))
    }
}

/// A chat message's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// `tool` or `function`: refused as unsupported.
    Tool,
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Role;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"system\", \"developer\", \"user\" or \"assistant\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Role, E> {
                match v {
                    "system" | "developer" => Ok(Role::System),
                    "user" => Ok(Role::User),
                    "assistant" => Ok(Role::Assistant),
                    "tool" | "function" => Ok(Role::Tool),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_str(V)
    }
}

/// One part of an array `content`; only text parts are served.
#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

/// A message's `content`: a string, an array of parts, or null.
#[derive(Debug)]
pub enum Content {
    Null,
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of text parts")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Content, E> {
                Ok(Content::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Content, E> {
                Ok(Content::Null)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Content, E> {
                Ok(Content::Text(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

/// `stop`: a string or an array of at most `MAX_STOP` strings.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stop(pub Vec<String>);

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stop, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stop;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Stop, E> {
                Ok(Stop::default())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Stop, E> {
                Ok(Stop(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stop, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    if v.len() >= crate::api::MAX_STOP {
                        return Err(de::Error::custom(format!(
                            "at most {} stop strings are allowed",
                            crate::api::MAX_STOP
                        )));
                    }
                    v.push(s);
                }
                Ok(Stop(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(
        v: serde_json::Value,
        max_inputs: usize,
        max_tokens: usize,
    ) -> Result<Inputs, ApiError> {
        let raw = RawValue::from_string(v.to_string()).unwrap();
        let lim = InputLimits {
            n_vocab: 100,
            max_inputs,
            max_tokens,
        };
        parse_inputs("input", &raw, lim)
    }

    #[test]
    fn inputs_take_every_openai_form() {
        let f = |v| parse(v, 8, 1000);
        assert_eq!(f(json!("a")).unwrap().items, vec![Input::Text("a".into())]);
        assert!(!f(json!("a")).unwrap().many);
        let two = f(json!(["a", "b"])).unwrap();
        assert_eq!(two.items.len(), 2);
        assert!(two.many);
        assert_eq!(
            f(json!([1, 2])).unwrap().items,
            vec![Input::Tokens(vec![1, 2])]
        );
        assert_eq!(
            f(json!([[1], [2, 3]])).unwrap().items,
            vec![Input::Tokens(vec![1]), Input::Tokens(vec![2, 3])]
        );
        for bad in [
            json!(""),
            json!([]),
            json!(["a", ""]),
            json!([[1], []]),
            json!([100]),
            json!([1, 100]),
            json!([[1], [2, 100]]),
            json!([-1]),
            json!([1.5]),
            json!(["a", 1]),
            json!([1, "a"]),
            json!([[1], "a"]),
            json!([[[1]]]),
            json!({"a": 1}),
            json!(null),
            json!(42),
            json!(vec!["a"; 9]),
            json!(vec![vec![1]; 9]),
        ] {
            assert_eq!(f(bad.clone()).unwrap_err().status.as_u16(), 400, "{bad}");
        }
        let e = f(json!([[1], [2, 100]])).unwrap_err();
        assert!(e.message.contains("'input[1][1]' = 100"), "{}", e.message);
    }

    #[test]
    fn token_ids_count_against_the_budget() {
        assert!(parse(json!([[1, 2], [3, 4]]), 8, 4).is_ok());
        let e = parse(json!([[1, 2], [3, 4, 5]]), 8, 4).unwrap_err();
        assert_eq!(e.status.as_u16(), 413, "{e}");
        assert_eq!(
            parse(json!(vec![1; 5]), 8, 4).unwrap_err().status.as_u16(),
            413
        );
    }

    #[test]
    fn shapes_skip_content() {
        let s = |t: &str| serde_json::from_str::<Shape>(t).unwrap();
        assert_eq!(s("null"), Shape::Null);
        assert_eq!(s("false"), Shape::Bool(false));
        assert_eq!(s("0"), Shape::Zero);
        assert_eq!(s("-3"), Shape::Number);
        assert_eq!(s("\"x\""), Shape::String);
        assert_eq!(s("[]"), Shape::Array(0));
        assert_eq!(s("[[1, {\"a\": [2]}], 3]"), Shape::Array(2));
        assert_eq!(s("{\"a\": {\"b\": []}}"), Shape::Object(1));
        let st = |t: &str| serde_json::from_str::<Stop>(t);
        assert_eq!(st("\"x\"").unwrap().0, vec!["x"]);
        assert!(st("[\"a\", 1]").is_err());
        assert!(st(&serde_json::to_string(&vec!["a"; 17]).unwrap()).is_err());
    }
}
