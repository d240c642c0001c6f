//! Counters, gauges and histograms for `GET /metrics`, written in the
//! Prometheus text format (version 0.0.4). Lock-free atomics except for the
//! (rare) first sighting of a route/status pair.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Upper bounds of the embedding batch-size histogram (texts per forward batch).
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// A Prometheus histogram with fixed buckets.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// Sum of observations in micro-units (µs for seconds).
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i].fetch_add(1, Relaxed);
        }
        self.sum_micros
            .fetch_add((v.max(0.0) * 1e6).round() as u64, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_micros.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// The routes metrics are kept for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    Embeddings,
    Completions,
    ChatCompletions,
    Rerank,
    Tokenize,
    Detokenize,
    Models,
    Health,
    Metrics,
    Other,
}

impl Route {
    pub const ALL: [Route; 10] = [
        Route::Embeddings,
        Route::Completions,
        Route::ChatCompletions,
        Route::Rerank,
        Route::Tokenize,
        Route::Detokenize,
        Route::Models,
        Route::Health,
        Route::Metrics,
        Route::Other,
    ];

    pub fn from_path(path: &str) -> Route {
        match path {
            "/v1/embeddings" => Route::Embeddings,
            "/v1/completions" => Route::Completions,
            "/v1/chat/completions" => Route::ChatCompletions,
            "/v1/rerank" | "/v1/reranking" | "/rerank" | "/reranking" => Route::Rerank,
            "/tokenize" => Route::Tokenize,
            "/detokenize" => Route::Detokenize,
            p if p == "/v1/models" || p.starts_with("/v1/models/") => Route::Models,
            "/health" => Route::Health,
            "/metrics" => Route::Metrics,
            _ => Route::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Route::Embeddings => "/v1/embeddings",
            Route::Completions => "/v1/completions",
            Route::ChatCompletions => "/v1/chat/completions",
            Route::Rerank => "/v1/rerank",
            Route::Tokenize => "/tokenize",
            Route::Detokenize => "/detokenize",
            Route::Models => "/v1/models",
            Route::Health => "/health",
            Route::Metrics => "/metrics",
            Route::Other => "other",
        }
    }
}

/// Everything `/metrics` reports.
pub struct Metrics {
    requests: [AtomicU64; Route::ALL.len()],
    latency: [Histogram; Route::ALL.len()],
    errors: Mutex<BTreeMap<(Route, u16), u64>>,
    pub in_flight: AtomicI64,
    pub embed_queue: AtomicI64,
    pub gen_queue: AtomicI64,
    pub gen_active: AtomicI64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens whose keys and values were reused or copied from the cache.
    pub reused_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub embedding_tokens: AtomicU64,
    pub embedding_inputs: AtomicU64,
    pub embedding_batches: AtomicU64,
    pub rerank_tokens: AtomicU64,
    pub rerank_pairs: AtomicU64,
    pub cancelled: AtomicU64,
    pub embed_cancelled: AtomicU64,
    pub rejected: AtomicU64,
    pub batch_texts: Histogram,
    pub time_to_first_token: Histogram,
    pub queue_wait: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: std::array::from_fn(|_| Histogram::new(LATENCY_BUCKETS)),
            errors: Mutex::new(BTreeMap::new()),
            in_flight: AtomicI64::new(0),
            embed_queue: AtomicI64::new(0),
            gen_queue: AtomicI64::new(0),
            gen_active: AtomicI64::new(0),
            prompt_tokens: AtomicU64::new(0),
            reused_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
            embedding_tokens: AtomicU64::new(0),
            embedding_inputs: AtomicU64::new(0),
            embedding_batches: AtomicU64::new(0),
            rerank_tokens: AtomicU64::new(0),
            rerank_pairs: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            embed_cancelled: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            batch_texts: Histogram::new(BATCH_BUCKETS),
            time_to_first_token: Histogram::new(LATENCY_BUCKETS),
            queue_wait: Histogram::new(LATENCY_BUCKETS),
        }
    }
}

impl Metrics {
    /// One answered request: its route, status and time to the response head.
    pub fn record(&self, route: Route, status: u16, latency: Duration) {
        let i = route as usize;
        self.requests[i].fetch_add(1, Relaxed);
        self.latency[i].observe_duration(latency);
        if status >= 400 {
            let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
            *errors.entry((route, status)).or_insert(0) += 1;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        let counter = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        let gauge = |o: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };

        let _ = writeln!(
            o,
            "# HELP lamina_requests_total HTTP requests answered, by route.\n# TYPE lamina_requests_total counter"
        );
        for r in Route::ALL {
            let _ = writeln!(
                o,
                "lamina_requests_total{{route=\"{}\"}} {}",
                r.label(),
                self.requests[r as usize].load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP lamina_request_errors_total Requests answered with a 4xx or 5xx status, by route and status.\n# TYPE lamina_request_errors_total counter"
        );
        {
            let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
            for ((r, s), n) in errors.iter() {
                let _ = writeln!(
                    o,
                    "lamina_request_errors_total{{route=\"{}\",status=\"{s}\"}} {n}",
                    r.label()
                );
            }
        }
        let _ = writeln!(
            o,
            "# HELP lamina_request_duration_seconds Time from a request's arrival to its response head (the whole answer unless streamed), by route.\n# TYPE lamina_request_duration_seconds histogram"
        );
        for r in Route::ALL {
            self.latency[r as usize].write(
                &mut o,
                "lamina_request_duration_seconds",
                &format!("route=\"{}\"", r.label()),
            );
        }
        let _ = writeln!(
            o,
            "# HELP lamina_queue_depth Requests waiting for an inference worker, by kind.\n# TYPE lamina_queue_depth gauge"
        );
        let _ = writeln!(
            o,
            "lamina_queue_depth{{kind=\"embeddings\"}} {}\nlamina_queue_depth{{kind=\"generation\"}} {}",
            self.embed_queue.load(Relaxed),
            self.gen_queue.load(Relaxed)
        );
        gauge(
            &mut o,
            "lamina_requests_in_flight",
            "HTTP requests being handled.",
            self.in_flight.load(Relaxed),
        );
        gauge(
            &mut o,
            "lamina_generations_active",
            "Generations holding a slot.",
            self.gen_active.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_prompt_tokens_total",
            "Prompt tokens of generation requests.",
            self.prompt_tokens.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_prompt_tokens_reused_total",
            "Prompt tokens whose keys and values came from the cache or another slot.",
            self.reused_tokens.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_completion_tokens_total",
            "Tokens generated.",
            self.completion_tokens.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_embedding_tokens_total",
            "Tokens embedded.",
            self.embedding_tokens.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_embedding_inputs_total",
            "Texts embedded.",
            self.embedding_inputs.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_embedding_batches_total",
            "Embedding and reranking forward passes (each of up to --batch-tokens tokens).",
            self.embedding_batches.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_rerank_tokens_total",
            "Tokens of the query-document pairs scored.",
            self.rerank_tokens.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_rerank_pairs_total",
            "Query-document pairs scored.",
            self.rerank_pairs.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_generations_cancelled_total",
            "Generations stopped because their client went away.",
            self.cancelled.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_embeddings_cancelled_total",
            "Embedding requests dropped unfinished because their client went away.",
            self.embed_cancelled.load(Relaxed),
        );
        counter(
            &mut o,
            "lamina_requests_rejected_total",
            "Requests refused with 503 because a queue or the in-flight limit was full.",
            self.rejected.load(Relaxed),
        );
        let _ = writeln!(
            o,
            "# HELP lamina_embedding_batch_texts Texts per embedding forward pass.\n# TYPE lamina_embedding_batch_texts histogram"
        );
        self.batch_texts
            .write(&mut o, "lamina_embedding_batch_texts", "");
        let _ = writeln!(
            o,
            "# HELP lamina_time_to_first_token_seconds From a generation request's queueing to its first token.\n# TYPE lamina_time_to_first_token_seconds histogram"
        );
        self.time_to_first_token
            .write(&mut o, "lamina_time_to_first_token_seconds", "");
        let _ = writeln!(
            o,
            "# HELP lamina_queue_wait_seconds Time a request waited in a queue before a worker took it.\n# TYPE lamina_queue_wait_seconds histogram"
        );
        self.queue_wait
            .write(&mut o, "lamina_queue_wait_seconds", "");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe(1.5);
        h.observe(9.0);
        let mut s = String::new();
        h.write(&mut s, "x", "a=\"b\"");
        assert!(s.contains("x_bucket{a=\"b\",le=\"1\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{a=\"b\",le=\"2\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{s}");
        assert!(s.contains("x_sum{a=\"b\"} 11\n"), "{s}");
        assert!(s.contains("x_count{a=\"b\"} 3\n"), "{s}");
    }

    #[test]
    fn errors_are_labelled_by_route_and_status() {
        let m = Metrics::default();
        m.record(Route::Embeddings, 200, Duration::from_millis(3));
        m.record(Route::Embeddings, 400, Duration::from_millis(1));
        let s = m.render();
        assert!(s.contains("lamina_requests_total{route=\"/v1/embeddings\"} 2"));
        assert!(
            s.contains("lamina_request_errors_total{route=\"/v1/embeddings\",status=\"400\"} 1")
        );
        assert!(s.contains("lamina_queue_depth{kind=\"generation\"} 0"));
    }
}
