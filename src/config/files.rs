//! The files a checked config names, tried at start: `state_dir` can be
//! written, and the index, the model and the TLS files can be read. Each
//! error names the key, so a typo in a path reads as one
//! (`config key knowledge.index: /srv/k.twx: no such file or directory`).
//!
//! Only opens and creates, and reads the TLS files' PEM framing (the
//! connection alone would read them, and fail only by retrying): whether an
//! index or a model is well formed is for the loaders, which say so
//! themselves.

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
        pem_certificates(&tls.ca).map_err(|p| bad("mqtt.tls.ca", &tls.ca, p))?;
        if let Some((cert, key)) = &tls.client_auth {
            pem_certificates(cert).map_err(|p| bad("mqtt.tls.cert", cert, p))?;
            pem_private_key(key).map_err(|p| bad("mqtt.tls.key", key, p))?;
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

/// A TLS file is read by the connection only, on each retry: a file that
/// holds no PEM certificate would show as a broker that never answers.
fn pem_certificates(p: &Path) -> Result<(), String> {
    let bytes = read_file(p)?;
    let mut found = 0;
    for c in rustls_pemfile::certs(&mut bytes.as_slice()) {
        c.map_err(|e| format!("is not PEM: {e}"))?;
        found += 1;
    }
    if found == 0 {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(())
}

fn pem_private_key(p: &Path) -> Result<(), String> {
    match rustls_pemfile::private_key(&mut read_file(p)?.as_slice()) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("holds no PEM private key (-----BEGIN PRIVATE KEY-----)".into()),
        Err(e) => Err(format!("is not PEM: {e}")),
    }
}

fn read_file(p: &Path) -> Result<Vec<u8>, String> {
    readable_file(p)?;
    std::fs::read(p).map_err(|e| io_problem(&e))
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

    // A CA file holding no certificate passed every check; the broker
    // connection then failed on each retry, for ever.
    #[test]
    fn tls_files_that_hold_no_pem_are_named_by_their_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.twx"), b"x").unwrap();
        std::fs::write(dir.path().join("m.gguf"), b"x").unwrap();
        std::fs::write(dir.path().join("ca.crt"), b"garbage\n").unwrap();
        let tls = "[mqtt]\nhost = \"b\"\n[mqtt.tls]\nca = \"ca.crt\"\n";
        let e = check_files(&cfg_in(dir.path(), tls))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "config key mqtt.tls.ca: {}: holds no PEM certificate",
                dir.path().join("ca.crt").display()
            )),
            "{e}"
        );
        std::fs::write(dir.path().join("ca.crt"), CERT).unwrap();
        check_files(&cfg_in(dir.path(), tls)).unwrap();
        std::fs::write(dir.path().join("c.crt"), CERT).unwrap();
        std::fs::write(dir.path().join("c.key"), CERT).unwrap();
        let auth = format!("{tls}cert = \"c.crt\"\nkey = \"c.key\"\n");
        let e = check_files(&cfg_in(dir.path(), &auth))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config key mqtt.tls.key: "), "{e}");
        assert!(e.contains("holds no PEM private key"), "{e}");
    }

    /// A self-signed certificate: only its PEM framing is read here.
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBfTCCASOgAwIBAgIUb2jLcRBi+9pBkcbHAaEKXiYhgNMwCgYIKoZIzj0EAwIw\nFDESMBAGA1UEAwwJdGlkZXdhdGNoMB4XDTI2MTIwNzIzNTQ1OFoXDTM2MTIwNDIz\nNTQ1OFowFDESMBAGA1UEAwwJdGlkZXdhdGNoMFkwEwYHKoZIzj0CAQYIKoZIzj0D\nAQcDQgAEm4D2U/HNj7pCmjHRYEWzNh6ADcSlQNrQDGXKkBDQYX6anEete8nTEQ0/\nvEDU6Sl6Ji97Kt+rsMtMWxEgh/mqZKNTMFEwHQYDVR0OBBYEFOzEFYMcApv6J2qN\nSNiEo+GboCuDMB8GA1UdIwQYMBaAFOzEFYMcApv6J2qNSNiEo+GboCuDMA8GA1Ud\nEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgdSnk7+7i1Xb4ShNFtv2jd8jo\nYRCyVzJJn8MOdCFrMcoCIQCnT5OVK14KUzIfnrFkgm6ggodCnIyaRNEy90MlW4AM\nuw==\n-----END CERTIFICATE-----\n";

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
