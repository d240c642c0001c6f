//! `lamina chat`: an interactive conversation. Each turn renders the whole
//! conversation with the chat template; the session keeps the KV cache, so
//! only the tokens after the common prefix (the new turn) are evaluated.
//! Ctrl-C stops the reply being written; at the prompt it leaves.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use lamina_model::chat::{ChatTemplate, Message, TemplateSource};
use lamina_model::generate::{GenerateOptions, StopReason};
use lamina_model::sampling::Sampler;

use crate::generate::{ModelArgs, SampleArgs, tokens_per_s};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// A Jinja chat template file to use instead of the model's.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// Most tokens per reply (-1: until end of turn or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    #[command(flatten)]
    sample: SampleArgs,
    /// Print prompt and reply speeds after each reply.
    #[arg(long)]
    stats: bool,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = args.model.load()?;
    let template = match &args.chat_template {
        Some(f) => {
            let src = std::fs::read_to_string(f)
                .with_context(|| format!("reading chat template {}", f.display()))?;
            ChatTemplate::new(&src, TemplateSource::Custom, &loaded.tok)?
        }
        None => ChatTemplate::for_model(&loaded.model.file, loaded.model.hp.family, &loaded.tok)?,
    };
    tracing::info!("chat template: {:?}", template.source);
    let mut sampler = Sampler::new(args.sample.params()?, loaded.model.hp.n_vocab);
    let mut session = loaded.session(&args.model)?;
    let opts = GenerateOptions {
        max_tokens: usize::try_from(args.n_predict).ok(),
        stop: Vec::new(),
        ignore_eos: false,
    };

    // Ctrl-C while a reply is written stops the reply; otherwise it leaves.
    let generating = Arc::new(AtomicBool::new(false));
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let (generating, cancel) = (generating.clone(), cancel.clone());
        ctrlc::set_handler(move || {
            if generating.load(Ordering::SeqCst) {
                cancel.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;
    }

    let mut messages: Vec<Message> = Vec::new();
    if let Some(s) = &args.system {
        messages.push(Message::new("system", s.clone()));
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if interactive {
        eprintln!(
            "Chatting with {}. /reset starts over, /exit or Ctrl-D leaves; Ctrl-C stops a reply.",
            args.model.model
        );
    }
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let input = line.trim_end_matches(['\n', '\r']);
        match input.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages.truncate(usize::from(args.system.is_some()));
                session.clear();
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", input));
        let prompt = template.render(&messages, true)?;
        let ids = loaded.tok.encode(&prompt, true, true);
        if ids.len() > session.n_ctx() {
            messages.pop();
            eprintln!(
                "error: the conversation would take {} tokens, more than the context of {} (/reset, or a larger --ctx)",
                ids.len(),
                session.n_ctx()
            );
            continue;
        }
        let pre = session.prefill(&ids, &*loaded.pool)?;
        tracing::info!(
            "prompt: {} tokens reused, {} evaluated",
            pre.reused,
            pre.evaluated
        );

        cancel.store(false, Ordering::SeqCst);
        generating.store(true, Ordering::SeqCst);
        let mut out = std::io::stdout().lock();
        let reply = session.generate(&mut sampler, &opts, &*loaded.pool, &mut |piece| {
            if !piece.is_empty() {
                // A closed stdout ends the reply; the next read ends the chat.
                if out
                    .write_all(piece.as_bytes())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    return false;
                }
            }
            !cancel.load(Ordering::SeqCst)
        });
        generating.store(false, Ordering::SeqCst);
        let reply = reply?;
        writeln!(out)?;
        out.flush()?;
        match reply.stop {
            StopReason::Cancelled => eprintln!("[stopped]"),
            StopReason::Context => eprintln!("[the context is full: /reset to continue]"),
            StopReason::Length => eprintln!("[reply cut at -n {}]", args.n_predict),
            _ => {}
        }
        if args.stats {
            eprintln!(
                "[prompt: {} new tokens, {:.1} tokens/s; reply: {} tokens, {:.1} tokens/s]",
                pre.evaluated,
                tokens_per_s(pre.evaluated, pre.time),
                reply.ids.len(),
                tokens_per_s(reply.ids.len(), reply.eval_time)
            );
        }
        messages.push(Message::new("assistant", reply.text));
    }
    Ok(())
}
