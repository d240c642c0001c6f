//! `lamina generate --file PROMPTS`: one prompt a line through the batch
//! scheduler, every running prompt decoded in the same forward pass, one
//! JSON object a line out, in the file's order.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use lamina_model::generate::GenerateOptions;
use lamina_model::scheduler::{Event, Refusal, Request, Scheduler, SchedulerOptions};
use serde_json::{Value, json};

use super::{Args, tokens_per_s};
use crate::embed::read_texts;

/// A prompt's running state while its slot generates it.
#[derive(Default)]
struct Running {
    item: usize,
    ids: Vec<u32>,
    text: String,
}

pub(super) fn run(args: &Args, file: &Path) -> Result<()> {
    // Read the input before loading the model, so bad input fails fast.
    let prompts: Vec<(usize, String)> = read_texts(Vec::new(), Some(&file.to_path_buf()))?
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    if prompts.is_empty() {
        bail!("{} holds no prompts (one a line)", file.display());
    }
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let loaded = args.model.load()?;
    let params = args.sample.params()?;
    let constraint = args.constraint(&loaded.tok)?;
    let opts = GenerateOptions {
        max_tokens: usize::try_from(args.n_predict).ok(),
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
    };
    let mut sched = Scheduler::new(
        &loaded.model,
        &loaded.tok,
        SchedulerOptions {
            slots: args.parallel,
            n_ctx: loaded.n_ctx,
            kv: args.model.kv(),
            budget: args.model.batch.max(1),
        },
    )?;
    let bar = ProgressBar::new(prompts.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} prompts {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let n = prompts.len();
    let mut results: Vec<Option<Value>> = vec![None; n];
    let mut slots: Vec<Running> = (0..sched.n_slots()).map(|_| Running::default()).collect();
    let (mut next, mut printed, mut failed) = (0, 0, 0);
    let (mut prompt_tokens, mut reused, mut generated) = (0, 0, 0);
    let mut out = std::io::stdout().lock();
    loop {
        while next < n && sched.has_room() {
            let (line, prompt) = &prompts[next];
            let error = |e: &dyn std::fmt::Display| json!({"line": line, "error": e.to_string()});
            let ids = match loaded.tok.encode_within(prompt, true, true, loaded.n_ctx) {
                Ok(ids) if ids.is_empty() => {
                    results[next] = Some(error(&"the prompt has no tokens"));
                    next += 1;
                    continue;
                }
                Ok(ids) => ids,
                Err(e) => {
                    results[next] = Some(error(&e));
                    next += 1;
                    continue;
                }
            };
            let req = Request {
                prompt: ids,
                sampler: params.clone(),
                opts: opts.clone(),
                constraint: constraint.clone(),
            };
            match sched.admit(req) {
                Ok(seq) => {
                    let s = &mut slots[seq];
                    (s.item, s.ids, s.text) = (next, Vec::new(), String::new());
                }
                Err(Refusal::Invalid(e)) => results[next] = Some(error(&e)),
                Err(Refusal::Full(_)) => bail!("the scheduler refused a prompt it had room for"),
            }
            next += 1;
        }
        let ran = sched.step(&*loaded.pool, &mut |ev| {
            match ev {
                Event::Token { seq, id, text, .. } => {
                    slots[seq].ids.push(id);
                    slots[seq].text.push_str(text);
                }
                Event::Done {
                    seq,
                    stop,
                    text,
                    usage,
                    ..
                } => {
                    let s = &mut slots[seq];
                    s.text.push_str(text);
                    prompt_tokens += usage.prompt_tokens;
                    reused += usage.reused_tokens;
                    generated += usage.completion_tokens;
                    let (line, prompt) = &prompts[s.item];
                    let mut doc = json!({
                        "line": line,
                        "text": std::mem::take(&mut s.text),
                        "ids": std::mem::take(&mut s.ids),
                        "stop": stop.as_str(),
                        "prompt_tokens": usage.prompt_tokens,
                        "reused_tokens": usage.reused_tokens,
                        "completion_tokens": usage.completion_tokens,
                    });
                    if args.echo {
                        doc["prompt"] = json!(prompt);
                    }
                    results[s.item] = Some(doc);
                }
                Event::Failed { seq, error } => {
                    let line = prompts[slots[seq].item].0;
                    results[slots[seq].item] =
                        Some(json!({"line": line, "error": error.to_string()}));
                }
            }
            true
        });
        // Answers go out in the file's order, each once all before it are done.
        while printed < n
            && let Some(doc) = results[printed].take()
        {
            failed += usize::from(doc.get("error").is_some());
            writeln!(out, "{doc}")?;
            printed += 1;
            bar.inc(1);
        }
        out.flush()?;
        bar.set_message(format!(
            "{:.1} tokens/s",
            tokens_per_s(generated, t0.elapsed())
        ));
        if ran == 0 && next >= n {
            break;
        }
    }
    bar.finish_and_clear();
    let time = t0.elapsed();
    eprintln!(
        "{n} prompts, {} at once: {prompt_tokens} prompt tokens ({reused} reused), {generated} \
         generated in {:.1} s ({:.1} tokens/s generated, {:.1} tokens/s in all)",
        sched.n_slots(),
        time.as_secs_f64(),
        tokens_per_s(generated, time),
        tokens_per_s(generated + prompt_tokens - reused, time),
    );
    if failed > 0 {
        bail!("{failed} of {n} prompts failed (their lines carry \"error\")");
    }
    Ok(())
}
