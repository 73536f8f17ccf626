//! The .deb's postinst, run as root on every install and upgrade, makes the
//! state directories the daemon's user owns. That user can put a link in
//! place of `models`; root following it would hand the link's target to the
//! user. The postinst's own `state_dirs` runs here against a temp tree (the
//! box test, .ci/box-test.sh with BOX_DEB, reinstalls the real package over
//! such a link under systemd).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

const POSTINST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/debian/postinst");

/// Runs the postinst's `state_dirs` for `root` as user and group nobody:nogroup
/// (any user other than root shows a chown).
fn state_dirs(root: &Path) -> std::process::Output {
    let script = std::fs::read_to_string(POSTINST).unwrap();
    let start = script
        .find("\nstate_dirs() {")
        .expect("postinst defines state_dirs()");
    let end = start + script[start..].find("\n}\n").expect("state_dirs() ends") + 3;
    let f = &script[start..end];
    Command::new("sh")
        .arg("-ec")
        .arg(format!("{f}\nstate_dirs \"$1\" nobody nogroup"))
        .arg("sh")
        .arg(root)
        .output()
        .unwrap()
}

fn owner_mode(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid(), m.permissions().mode() & 0o7777)
}

#[test]
fn postinst_never_follows_a_link_planted_in_place_of_the_model_directory() {
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path();
    assert_eq!(
        owner_mode(root).0,
        0,
        "this test checks what postinst changes as root: run the tests as root (as CI and deploy/test.sh do)"
    );
    std::fs::create_dir_all(root.join("var/lib")).unwrap();
    let state = root.join("var/lib/tidewatch");
    let models = state.join("models");

    // A first install: both directories, the daemon's user's, 0750.
    let out = state_dirs(root);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(owner_mode(&state), (65534, 65534, 0o750));
    assert!(models.is_dir());
    assert_eq!(owner_mode(&models), (65534, 65534, 0o750));

    // The daemon's user replaces models with a link to a root directory.
    let target = root.join("etc");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_dir(&models).unwrap();
    std::os::unix::fs::symlink(&target, &models).unwrap();
    let out = state_dirs(root);
    assert!(out.status.success(), "an upgrade failed: {out:?}");
    assert_eq!(
        owner_mode(&target),
        (0, 0, 0o700),
        "postinst followed the link: its target changed owner or mode"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a link, not a directory"),
        "{out:?}"
    );
    assert!(std::fs::read_dir(&target).unwrap().next().is_none());

    // An upgrade over a model directory that is there keeps it as it is.
    std::fs::remove_file(&models).unwrap();
    std::fs::create_dir(&models).unwrap();
    std::fs::write(models.join("model.gguf"), b"gguf").unwrap();
    let out = state_dirs(root);
    assert!(out.status.success(), "{out:?}");
    assert!(models.join("model.gguf").exists());
}
