//! The request fields that are JSON trees by nature (JSON Schemas, tools,
//! earlier tool calls) parsed under one node budget per request: a body of
//! brackets would otherwise cost tens of times its size as a
//! `serde_json::Value`.

use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Most JSON values (objects, arrays, strings, numbers, ...) the tree
/// fields of one request may hold together: a few MB at most.
pub const MAX_NODES: usize = 65_536;

thread_local! {
    /// Values the request being parsed may still add (parsing is synchronous,
    /// so one thread parses one request at a time).
    static LEFT: Cell<usize> = const { Cell::new(MAX_NODES) };
}

/// Starts a request's budget; [`crate::api::parse`] calls it first.
pub fn reset() {
    LEFT.set(MAX_NODES);
}

/// A JSON value parsed under the request's budget.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tree(pub Value);

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tree, D::Error> {
        Budget.deserialize(d).map(Tree)
    }
}

struct Budget;

fn take<E: de::Error>() -> Result<(), E> {
    let left = LEFT.get();
    if left == 0 {
        return Err(E::custom(format!(
            "the request's JSON Schemas and tools hold more than {MAX_NODES} values"
        )));
    }
    LEFT.set(left - 1);
    Ok(())
}

impl<'de> DeserializeSeed<'de> for Budget {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Budget)
    }
}

impl<'de> Visitor<'de> for Budget {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        take()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Budget)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        take()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        take()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        take()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        take()?;
        Ok(Value::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        take()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Budget)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        take()?;
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(Budget)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_parse_within_the_budget() {
        reset();
        let t: Tree = serde_json::from_str(r#"{"a": [1, -2, 2.5, "x", null, true, {}]}"#).unwrap();
        assert_eq!(
            t.0,
            serde_json::json!({"a": [1, -2, 2.5, "x", null, true, {}]})
        );
        reset();
        let many = format!("[{}[]]", "[],".repeat(MAX_NODES));
        let e = serde_json::from_str::<Tree>(&many).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        // The budget is the request's: two fields share it.
        reset();
        let half = format!("[{}[]]", "[],".repeat(MAX_NODES / 2));
        assert!(serde_json::from_str::<Tree>(&half).is_ok());
        assert!(serde_json::from_str::<Tree>(&half).is_err());
    }
}
