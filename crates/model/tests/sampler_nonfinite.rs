//! The sampler over NaN and infinite logits: never a panic, and the choice
//! the module documents (NaN is `-inf`; an infinite best logit picks the
//! lowest id holding it), for every combination of the chain's settings.

use lamina_model::sampling::{Sampler, SamplerParams};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// Logits, and the tokens a sample may return for them (`None`: any token
/// with a finite logit).
fn cases() -> Vec<(Vec<f32>, Option<u32>)> {
    vec![
        (vec![NAN; 6], Some(0)),
        (vec![f32::NEG_INFINITY; 6], Some(0)),
        (
            vec![NAN, f32::NEG_INFINITY, NAN, f32::NEG_INFINITY],
            Some(0),
        ),
        (vec![NAN, -INF, INF, 3.0, INF, NAN], Some(2)),
        (vec![1.0, NAN, 2.0, INF], Some(3)),
        (vec![NAN, 0.5, NAN, -1.0, NAN], None),
    ]
}

fn grid() -> Vec<SamplerParams> {
    let mut out = Vec::new();
    for temp in [0.0, 0.8, 1e-30, NAN, INF] {
        for top_k in [0, 1, 2, 40] {
            for top_p in [1.0, 0.5, 0.0, NAN] {
                for min_p in [0.0, 0.05, 1.0, NAN] {
                    for (repeat_penalty, frequency_penalty) in [(1.0, 0.0), (0.0, 1.0), (1.3, INF)]
                    {
                        out.push(SamplerParams {
                            temp,
                            top_k,
                            top_p,
                            min_p,
                            repeat_penalty,
                            frequency_penalty,
                            presence_penalty: 0.0,
                            penalty_last_n: 4,
                            seed: 7,
                        });
                    }
                }
            }
        }
    }
    out
}

#[test]
fn nonfinite_logits_give_the_documented_token_for_every_setting() {
    let mut checked = 0;
    for (logits, want) in cases() {
        let finite: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        for p in grid() {
            let mut s = Sampler::new(p.clone(), logits.len());
            // Penalise the tokens that are infinite or NaN too.
            s.set_history(&[0, 2, 3, 3]);
            for _ in 0..3 {
                let id = s.sample(&logits);
                match want {
                    Some(w) => {
                        // A penalty can make an infinite winner NaN (0 x inf),
                        // which then counts as -inf: the lowest remaining
                        // infinite-or-finite winner must still be picked.
                        assert!(
                            (id as usize) < logits.len(),
                            "{logits:?} {p:?}: id {id} out of range"
                        );
                        if p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 {
                            assert_eq!(id, w, "{logits:?} {p:?}");
                        }
                    }
                    None => assert!(finite.contains(&id), "{logits:?} {p:?}: chose {id}"),
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 5 * 4 * 4 * 4 * 3 * 3);
}

#[test]
fn an_empty_vocabulary_gives_token_zero() {
    for p in [SamplerParams::default(), SamplerParams::greedy()] {
        let mut s = Sampler::new(p, 0);
        assert_eq!(s.sample(&[]), 0);
    }
}

#[test]
fn nan_never_beats_a_finite_logit_in_a_draw() {
    let logits = [NAN, 0.0, NAN, 0.0];
    let mut s = Sampler::new(
        SamplerParams {
            temp: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerParams::default()
        },
        4,
    );
    let mut seen = [0usize; 4];
    for _ in 0..400 {
        seen[s.sample(&logits) as usize] += 1;
    }
    assert_eq!(seen[0] + seen[2], 0);
    assert!(seen[1] > 100 && seen[3] > 100, "{seen:?}");
}
