//! The files a checked config names, tried at start: `state_dir` can be
//! written, and the index, the model and the TLS files can be read. Each
//! error names the key, so a typo in a path reads as one
//! (`config key knowledge.index: /srv/k.twx: no such file or directory`).
//!
//! Only opens and creates: whether an index or a model is well formed is
//! for the loaders, which say so themselves.

use std::path::Path;

use super::{Config, ConfigError};

/// Checks every path in `cfg`, in the file's order; the first problem is
/// the error. Creates `state_dir` (as the daemon would) to prove it can.
pub fn check_files(cfg: &Config) -> Result<(), ConfigError> {
    let bad = |key: &'static str, file: &Path, problem: String| ConfigError::File {
        key,
        file: file.to_owned(),
        problem,
        path: cfg.path.clone(),
    };
    writable_dir(&cfg.state_dir).map_err(|p| bad("state_dir", &cfg.state_dir, p))?;
    if let Some(tls) = &cfg.mqtt.tls {
        readable_file(&tls.ca).map_err(|p| bad("mqtt.tls.ca", &tls.ca, p))?;
        if let Some((cert, key)) = &tls.client_auth {
            readable_file(cert).map_err(|p| bad("mqtt.tls.cert", cert, p))?;
            readable_file(key).map_err(|p| bad("mqtt.tls.key", key, p))?;
        }
    }
    readable_file(&cfg.knowledge.index)
        .map_err(|p| bad("knowledge.index", &cfg.knowledge.index, p))?;
    readable_file(&cfg.llm.model).map_err(|p| bad("llm.model", &cfg.llm.model, p))?;
    Ok(())
}

/// An I/O error as a lowercase reason without the "(os error N)" that the
/// key and path already make redundant.
pub fn io_problem(e: &std::io::Error) -> String {
    let s = e.to_string();
    let s = match s.find(" (os error") {
        Some(i) => &s[..i],
        None => &s,
    };
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

fn readable_file(p: &Path) -> Result<(), String> {
    let f = std::fs::File::open(p).map_err(|e| io_problem(&e))?;
    let meta = f.metadata().map_err(|e| io_problem(&e))?;
    if meta.is_dir() {
        return Err("is a directory, not a file".into());
    }
    Ok(())
}

fn writable_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot be created: {}", io_problem(&e)))?;
    let probe = dir.join(format!(".tidewatch-write-test-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| format!("cannot be written: {}", io_problem(&e)))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_in(dir: &Path, extra: &str) -> Config {
        let text = format!(
            "state_dir = \"state\"\n[knowledge]\nindex = \"k.twx\"\n[llm]\nmodel = \"m.gguf\"\n{extra}"
        );
        crate::config::parse(&text, &dir.join("tidewatch.toml")).unwrap()
    }

    #[test]
    fn a_missing_index_is_named_by_its_key_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.gguf"), b"x").unwrap();
        let e = check_files(&cfg_in(dir.path(), ""))
            .unwrap_err()
            .to_string();
        let want = format!(
            "config key knowledge.index: {}: no such file or directory ({})",
            dir.path().join("k.twx").display(),
            dir.path().join("tidewatch.toml").display()
        );
        assert_eq!(e, want);
    }

    #[test]
    fn a_state_dir_that_cannot_be_made_is_named_by_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = cfg_in(dir.path(), "").clone();
        let cfg = Config {
            state_dir: "/proc/nope".into(),
            ..cfg
        };
        let e = check_files(&cfg).unwrap_err().to_string();
        assert!(
            e.starts_with("config key state_dir: /proc/nope: cannot be created: "),
            "{e}"
        );
    }

    #[test]
    fn a_model_that_is_a_directory_is_named_by_its_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.twx"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("m.gguf")).unwrap();
        let e = check_files(&cfg_in(dir.path(), ""))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "config key llm.model: {}: is a directory",
                dir.path().join("m.gguf").display()
            )),
            "{e}"
        );
        std::fs::remove_dir(dir.path().join("m.gguf")).unwrap();
        std::fs::write(dir.path().join("m.gguf"), b"x").unwrap();
        check_files(&cfg_in(dir.path(), "")).unwrap();
        assert!(dir.path().join("state").is_dir(), "state_dir is made");
    }
}
