//! The task prompts each embedding architecture was trained with, as its
//! sentence-transformers configuration names them (`prompts`), so a caller
//! can ask for a task by name (`--task query`, `prompt_name`).

use crate::hparams::HParams;

/// EmbeddingGemma's prompts (`config_sentence_transformers.json`).
const GEMMA: &[(&str, &str)] = &[
    ("query", super::QUERY_PREFIX),
    ("document", super::DOCUMENT_PREFIX),
    ("BitextMining", "task: search result | query: "),
    ("Clustering", "task: clustering | query: "),
    ("Classification", "task: classification | query: "),
    ("InstructionRetrieval", "task: code retrieval | query: "),
    ("MultilabelClassification", "task: classification | query: "),
    ("PairClassification", "task: sentence similarity | query: "),
    ("Reranking", "task: search result | query: "),
    ("Retrieval", "task: search result | query: "),
    ("Retrieval-query", "task: search result | query: "),
    ("Retrieval-document", "title: none | text: "),
    ("STS", "task: sentence similarity | query: "),
    ("Summarization", "task: summarization | query: "),
];

/// nomic-embed-text's task prefixes (its model card).
const NOMIC: &[(&str, &str)] = &[
    ("search_query", "search_query: "),
    ("search_document", "search_document: "),
    ("clustering", "clustering: "),
    ("classification", "classification: "),
];

/// Qwen3-Embedding's query instruction; documents take none.
const QWEN3: &[(&str, &str)] = &[
    (
        "query",
        "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
    ),
    ("document", ""),
];

/// The prompts of the model `hp` describes (none for BERT-style models).
pub(super) fn tasks(hp: &HParams) -> &'static [(&'static str, &'static str)] {
    match hp.family.name() {
        "gemma-embedding" => GEMMA,
        "nomic-bert" => NOMIC,
        "qwen3" if hp.is_embedding() => QWEN3,
        _ => &[],
    }
}
