//! `lamina rerank` as a user runs it: the built binary on a cross-encoder
//! conformance checkpoint (`testdata/embedders/ms-marco`, rebuilt and
//! converted in the test), its scores against the checkpoint's PyTorch
//! logits, its output formats, inputs and errors.

mod common;

use common::{checkpoint_gguf, embedders_gold, err, lamina, ok};
use serde_json::Value;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The gold's first query, its documents and their PyTorch logits.
fn first_query() -> (String, Vec<String>, Vec<f64>, f64) {
    let gold = embedders_gold("ms-marco");
    let items = gold["items"].as_array().unwrap();
    let q = items[0]["query"].as_str().unwrap().to_string();
    let mine: Vec<&Value> = items
        .iter()
        .filter(|it| it["query"] == q.as_str())
        .collect();
    let docs = mine
        .iter()
        .map(|it| it["document"].as_str().unwrap().to_string())
        .collect();
    let torch = mine
        .iter()
        .map(|it| it["torch"].as_f64().unwrap())
        .collect();
    // The kernels' f32 rounding, small beside the spread of the gold's logits.
    let tol = 1e-4 * gold["max_abs"]["torch_spread"].as_f64().unwrap().max(1.0);
    (q, docs, torch, tol)
}

#[test]
fn rerank_scores_match_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let m = checkpoint_gguf("ms-marco", dir.path());
    let m = m.to_str().unwrap();
    let (q, docs, torch, tol) = first_query();
    let mut args = vec!["rerank", "-m", m, "--query", &q, "--json", "--raw-scores"];
    args.extend(docs.iter().map(String::as_str));
    let out = ok(&lamina(&args, b""));
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), docs.len());
    let mut last = f64::INFINITY;
    let mut logits = vec![0.0; docs.len()];
    for l in &lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["index", "score", "text"]);
        let i = l["index"].as_u64().unwrap() as usize;
        let s = l["score"].as_f64().unwrap();
        assert!(s <= last, "not sorted: {out}");
        last = s;
        assert!(
            (s - torch[i]).abs() <= tol,
            "doc {i}: {s} vs PyTorch {}",
            torch[i]
        );
        assert_eq!(l["text"], docs[i].as_str());
        logits[i] = s;
    }

    // Text output: INDEX, sigmoid score, text; --top-n; documents from a file and stdin.
    let file = dir.path().join("docs.txt");
    std::fs::write(&file, docs.join("\r\n") + "\n").unwrap();
    let f = file.to_str().unwrap();
    let from_file = ok(&lamina(
        &["rerank", "-m", m, "-q", &q, "--file", f, "--top-n", "2"],
        b"",
    ));
    let from_stdin = ok(&lamina(
        &["rerank", "-m", m, "-q", &q, "--top-n", "2"],
        docs.join("\n").as_bytes(),
    ));
    assert_eq!(from_file, from_stdin);
    let rows: Vec<&str> = from_file.lines().collect();
    assert_eq!(rows.len(), 2);
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    for (k, row) in rows.iter().enumerate() {
        let cols: Vec<&str> = row.splitn(3, '\t').collect();
        let i: usize = cols[0].parse().unwrap();
        assert_eq!(i, order[k], "{from_file}");
        let score: f64 = cols[1].parse().unwrap();
        assert!((score - sigmoid(logits[i])).abs() <= 1e-6, "{score}");
        assert_eq!(cols[2], docs[i]);
    }
}

#[test]
fn rerank_refuses_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let m = checkpoint_gguf("ms-marco", dir.path());
    let m = m.to_str().unwrap();
    let e = err(&lamina(&["rerank", "-m", m, "--query", "", "doc"], b""));
    assert!(e.contains("--query is empty"), "{e}");
    let e = err(&lamina(
        &["rerank", "-m", m, "--query", "q", "--top-n", "0", "doc"],
        b"",
    ));
    assert!(e.contains("--top-n"), "{e}");
    let e = err(&lamina(&["rerank", "-m", m, "--query", "q"], b""));
    assert!(e.contains("no document"), "{e}");
    let e = err(&lamina(
        &["rerank", "-m", m, "--query", "q"],
        b"ok\n\xff\xfe\n",
    ));
    assert!(e.contains("line 2 of stdin is not valid UTF-8"), "{e}");
    // Past the context: refused, or cut with --truncate.
    let long = "the river runs under the old stone bridge ".repeat(70);
    let e = err(&lamina(&["rerank", "-m", m, "--query", "q", &long], b""));
    assert!(e.contains("context"), "{e}");
    let out = ok(&lamina(
        &[
            "rerank",
            "-m",
            m,
            "--query",
            "q",
            "--truncate",
            &long,
            "short",
        ],
        b"",
    ));
    assert_eq!(out.lines().count(), 2);
    // An embedding model is not a reranker.
    let emb = checkpoint_gguf("minilm", dir.path());
    let e = err(&lamina(
        &["rerank", "-m", emb.to_str().unwrap(), "--query", "q", "doc"],
        b"",
    ));
    assert!(e.contains("is an embedding model, not a reranker"), "{e}");
    let e = err(&lamina(&["embed", "-m", m, "doc"], b""));
    assert!(
        e.contains("is a reranker") && e.contains("lamina rerank"),
        "{e}"
    );
}
