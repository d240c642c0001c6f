//! Reading the project's real model files (fetched by `cargo xtask models`).
//! A missing model fails the test with instructions; it is never skipped.

use std::io::Write;

use lamina_gguf::{GgmlType, Gguf};
use lamina_testkit::required as model;

/// A writer that compares everything written against the original bytes,
/// so a 250 MB file is checked without a second copy in memory.
struct CompareWriter<'a> {
    expected: &'a [u8],
    pos: usize,
}

impl Write for CompareWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.pos + buf.len();
        let ok = end <= self.expected.len() && self.expected[self.pos..end] == *buf;
        if !ok {
            let at = (0..buf.len())
                .find(|&i| self.expected.get(self.pos + i) != Some(&buf[i]))
                .map_or(self.pos, |i| self.pos + i);
            return Err(std::io::Error::other(format!(
                "first differing byte at offset {at}"
            )));
        }
        self.pos = end;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn assert_rewrites_identically(g: &Gguf) {
    let original = g.as_bytes();
    let mut w = g
        .to_builder()
        .unwrap()
        .write_header(CompareWriter {
            expected: original,
            pos: 0,
        })
        .unwrap();
    for t in g.tensors() {
        w.write_tensor(g.tensor_data(t)).unwrap();
    }
    let sink = w.finish().unwrap();
    assert_eq!(
        sink.pos,
        original.len(),
        "rewritten file is shorter than the original"
    );
}

fn count_types(g: &Gguf) -> Vec<(GgmlType, usize)> {
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for t in g.tensors() {
        match counts.iter_mut().find(|(ty, _)| *ty == t.ggml_type) {
            Some(c) => c.1 += 1,
            None => counts.push((t.ggml_type, 1)),
        }
    }
    counts.sort_by_key(|c| c.0 as u32);
    counts
}

#[test]
fn gemma3_270m_q4_k_m() {
    let g = Gguf::open(model("gemma-3-270m-Q4_K_M.gguf")).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 236);
    assert_eq!(g.architecture().unwrap(), "gemma3");
    assert_eq!(g.get_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(g.get_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(g.get_u32("gemma3.feed_forward_length").unwrap(), 2048);
    assert_eq!(g.get_u32("gemma3.attention.head_count").unwrap(), 4);
    assert_eq!(g.get_u32("gemma3.attention.head_count_kv").unwrap(), 1);
    assert_eq!(g.get_u32("gemma3.attention.sliding_window").unwrap(), 512);
    assert_eq!(g.get_f32("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "llama");
    let tokens = g.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 262144);
    let first: Vec<&[u8]> = tokens.strings().unwrap().take(3).collect();
    assert_eq!(first, [&b"<pad>"[..], b"<eos>", b"<bos>"]);
    assert_eq!(
        count_types(&g),
        [
            (GgmlType::F32, 109),
            (GgmlType::Q5_0, 81),
            (GgmlType::Q8_0, 10),
            (GgmlType::Q4_K, 27),
            (GgmlType::Q6_K, 9)
        ]
    );
    let (emb, data) = g.tensor_by_name("token_embd.weight").unwrap();
    assert_eq!(emb.shape, [640, 262144]);
    assert_eq!(data.len() as u64, emb.n_bytes);
    assert_rewrites_identically(&g);
}

#[test]
fn smollm2_135m_q4_1() {
    let g = Gguf::open(model("SmolLM2-135M-Instruct-Q4_1.gguf")).unwrap();
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_u32("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(g.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(g.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(g.get_u32("llama.context_length").unwrap(), 8192);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 1e5);
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(g.get_array("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert_eq!(g.get_array("tokenizer.ggml.merges").unwrap().len(), 48900);
    assert!(!g.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert!(
        g.get_str("tokenizer.chat_template")
            .unwrap()
            .contains("<|im_start|>")
    );
    let types: Vec<GgmlType> = count_types(&g).into_iter().map(|c| c.0).collect();
    assert_eq!(types, [GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0]);
    assert_rewrites_identically(&g);
}
