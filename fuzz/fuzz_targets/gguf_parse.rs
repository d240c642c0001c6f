//! Parses arbitrary bytes as GGUF and touches everything a parsed file hands out.
#![no_main]

use lamina_gguf::{Gguf, Value};
use libfuzzer_sys::fuzz_target;

fn touch(value: Value<'_>) -> usize {
    match value {
        Value::Array(a) => a.iter().map(touch).sum::<usize>() + a.len(),
        Value::String(s) => s.len(),
        other => other.as_f64().map_or(0, |v| v.is_nan() as usize),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Gguf::from_bytes(data) {
        let mut n = 0;
        for (_, v) in g.metadata() {
            n += touch(v);
        }
        for t in g.tensors() {
            n += g.tensor_data(t).len();
        }
        std::hint::black_box(n);
        let _ = g.to_builder();
    }
});
