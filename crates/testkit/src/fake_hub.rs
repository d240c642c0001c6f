//! A Hugging Face Hub on loopback for the tests of `lamina pull` and
//! `hf://` models: the repo listing (`/api/models/ORG/NAME/revision/main`)
//! and file downloads (`/ORG/NAME/resolve/main/FILE`) with the headers the
//! hub sends (`x-repo-commit`, `etag`, `x-linked-etag`) and byte ranges.
//! Faults on demand: a download that breaks off halfway, a corrupt file, a
//! gated repo.
//!
//! One thread per connection, each answered and closed; test use only.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use sha1::Sha1;
use sha2::{Digest, Sha256};

/// Files at least this large are served as LFS files (etag = SHA-256).
const LFS_MIN: u64 = 10_000;

/// One request the hub answered.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct File {
    path: PathBuf,
    len: u64,
    /// SHA-256 for LFS files, else git's blob SHA-1.
    etag: String,
    lfs: bool,
}

struct Repo {
    commit: String,
    files: Vec<(String, File)>,
    token: Option<String>,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, Repo>,
    seen: Vec<Seen>,
    /// File names whose next whole download stops halfway.
    break_next: Vec<String>,
    /// File names served with one byte flipped.
    corrupt: Vec<String>,
}

/// The hub; it stops serving when dropped (its thread ends with the test).
pub struct FakeHub {
    url: String,
    state: Arc<Mutex<State>>,
}

impl FakeHub {
    /// Listens on a free loopback port.
    pub fn start() -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = serve(stream, &state);
                });
            }
        });
        FakeHub { url, state }
    }

    /// The address to give as `HF_ENDPOINT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves `repo` (`ORG/NAME`) holding `files` (name in the repo, file
    /// on disk) and returns its commit.
    pub fn add_repo(&self, repo: &str, files: &[(&str, PathBuf)]) -> String {
        let mut listed = Vec::new();
        let mut names = Sha1::new();
        for (name, path) in files {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let len = bytes.len() as u64;
            let lfs = len >= LFS_MIN;
            let etag = if lfs {
                to_hex(&Sha256::digest(&bytes))
            } else {
                let mut h = Sha1::new();
                h.update(format!("blob {len}\0").as_bytes());
                h.update(&bytes);
                to_hex(&h.finalize())
            };
            names.update(name.as_bytes());
            names.update(etag.as_bytes());
            let file = File {
                path: path.clone(),
                len,
                etag,
                lfs,
            };
            listed.push((name.to_string(), file));
        }
        let commit = to_hex(&names.finalize());
        self.state().repos.insert(
            repo.to_string(),
            Repo {
                commit: commit.clone(),
                files: listed,
                token: None,
            },
        );
        commit
    }

    /// Answers requests for `repo` only with `Authorization: Bearer TOKEN`.
    pub fn gate(&self, repo: &str, token: &str) {
        if let Some(r) = self.state().repos.get_mut(repo) {
            r.token = Some(token.to_string());
        }
    }

    /// The next download of `file` (any repo) that asks for more than one
    /// byte sends half of what it promised, then closes the connection.
    pub fn break_next_download(&self, file: &str) {
        self.state().break_next.push(file.to_string());
    }

    /// Serves `file` (any repo) with one byte flipped (`true`) or intact.
    pub fn set_corrupt(&self, file: &str, corrupt: bool) {
        let mut s = self.state();
        s.corrupt.retain(|f| f != file);
        if corrupt {
            s.corrupt.push(file.to_string());
        }
    }

    /// Every request answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let path = target.split('?').next().unwrap_or("").to_string();
    let seen = Seen {
        method: method.clone(),
        path: path.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
    };
    let mut out = stream;
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    s.seen.push(seen.clone());
    let reply = route(&mut s, &seen);
    drop(s);
    match reply {
        Reply::Status(code, msg) => respond(&mut out, code, &[], msg.as_bytes()),
        Reply::Json(body) => respond(
            &mut out,
            200,
            &[("Content-Type", "application/json".into())],
            body.as_bytes(),
        ),
        Reply::File {
            file,
            commit,
            corrupt,
            broken,
        } => send_file(
            &mut out,
            &file,
            &commit,
            seen.range.as_deref(),
            corrupt,
            broken,
        ),
    }
}

enum Reply {
    Status(u16, String),
    Json(String),
    File {
        file: (PathBuf, u64, String, bool),
        commit: String,
        corrupt: bool,
        broken: bool,
    },
}

fn route(s: &mut State, req: &Seen) -> Reply {
    if req.method != "GET" && req.method != "HEAD" {
        return Reply::Status(405, "method not allowed".into());
    }
    let (repo_name, rest, listing) = match req.path.strip_prefix("/api/models/") {
        Some(p) => match p.split_once("/revision/") {
            Some((repo, rev)) => (repo.to_string(), rev.to_string(), true),
            None => return Reply::Status(404, "not found".into()),
        },
        None => match req.path.trim_start_matches('/').split_once("/resolve/") {
            Some((repo, rest)) => (repo.to_string(), rest.to_string(), false),
            None => return Reply::Status(404, "not found".into()),
        },
    };
    let Some(repo) = s.repos.get(&repo_name) else {
        return Reply::Status(401, "Repository not found".into());
    };
    if let Some(token) = &repo.token
        && req.authorization.as_deref() != Some(&format!("Bearer {token}"))
    {
        return Reply::Status(401, "gated".into());
    }
    if listing {
        let siblings: Vec<_> = repo
            .files
            .iter()
            .map(|(n, _)| serde_json::json!({ "rfilename": n }))
            .collect();
        let body = serde_json::json!({ "id": repo_name, "sha": repo.commit, "siblings": siblings });
        return Reply::Json(body.to_string());
    }
    let Some(name) = rest.strip_prefix("main/") else {
        return Reply::Status(404, "only main is served".into());
    };
    let Some((_, f)) = repo.files.iter().find(|(n, _)| n == name) else {
        return Reply::Status(404, "Entry not found".into());
    };
    let file = (f.path.clone(), f.len, f.etag.clone(), f.lfs);
    let commit = repo.commit.clone();
    let corrupt = s.corrupt.iter().any(|c| c == name);
    let wants_body = req.range.as_deref() != Some("bytes=0-0");
    let broken = wants_body
        && match s.break_next.iter().position(|b| b == name) {
            Some(i) => {
                s.break_next.remove(i);
                true
            }
            None => false,
        };
    Reply::File {
        file,
        commit,
        corrupt,
        broken,
    }
}

fn respond(
    out: &mut TcpStream,
    code: u16,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)
}

fn send_file(
    out: &mut TcpStream,
    (path, len, etag, lfs): &(PathBuf, u64, String, bool),
    commit: &str,
    range: Option<&str>,
    corrupt: bool,
    broken: bool,
) -> std::io::Result<()> {
    let (start, end) = match range.and_then(|r| r.strip_prefix("bytes=")) {
        Some(r) => {
            let (a, b) = r.split_once('-').unwrap_or((r, ""));
            let a: u64 = a.parse().unwrap_or(0);
            let b: u64 = b.parse().unwrap_or(len.saturating_sub(1));
            (a, b.min(len.saturating_sub(1)))
        }
        None => (0, len.saturating_sub(1)),
    };
    if start > end && *len > 0 {
        return respond(out, 416, &[], b"range not satisfiable");
    }
    let count = end + 1 - start;
    let mut head = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {count}\r\nConnection: close\r\nx-repo-commit: {commit}\r\n",
        if range.is_some() { 206 } else { 200 }
    );
    if range.is_some() {
        head.push_str(&format!("Content-Range: bytes {start}-{end}/{len}\r\n"));
    }
    if *lfs {
        head.push_str(&format!(
            "x-linked-etag: \"{etag}\"\r\nx-linked-size: {len}\r\netag: \"lfs-pointer\"\r\n"
        ));
    } else {
        head.push_str(&format!("etag: \"{etag}\"\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(start))?;
    let send = if broken { count / 2 } else { count };
    let mut body = Vec::with_capacity(send as usize);
    f.take(send).read_to_end(&mut body)?;
    if corrupt {
        let mid = (len / 2).checked_sub(start).filter(|&i| i < send);
        if let Some(i) = mid {
            body[i as usize] ^= 0x20;
        }
    }
    out.write_all(&body)?;
    out.flush()
}
