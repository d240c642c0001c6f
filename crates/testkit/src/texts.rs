//! The fixed texts of the embedding benchmarks (`cargo xtask bench embed`
//! and the criterion benches in `benches/`): fixed, since changing one
//! changes every figure measured on it.

/// The short text: 9 words, 12 EmbeddingGemma tokens with BOS/EOS.
pub const SHORT_TEXT: &str = "The quick brown fox jumps over the lazy dog.";

/// The long text: 49 words, 59 EmbeddingGemma tokens with BOS/EOS.
pub const LONG_TEXT: &str = "Embedding models map a passage of text onto a vector of 768 \
numbers, so that passages with similar meaning end up close together. A search engine can then \
compare a query with millions of stored documents, ranking them by cosine similarity instead of \
matching exact keywords (one by one).";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_have_their_word_counts() {
        assert_eq!(SHORT_TEXT.split_whitespace().count(), 9);
        assert_eq!(LONG_TEXT.split_whitespace().count(), 49);
    }
}
