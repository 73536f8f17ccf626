//! Manuals update without a restart. SIGHUP (what `systemctl reload` sends)
//! reopens `[knowledge] index` between jobs; a bad index is refused by name and
//! the old one stays in use.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(90);

/// A copy of knowledge/ without the main engine lube oil manuals (both
/// languages), so their passages cannot be retrieved until a reload.
fn knowledge_without_lube_oil(dir: &Path) -> PathBuf {
    let out = dir.join("knowledge-partial");
    copy_tree(&repo().join("knowledge"), &out, &|name| {
        !name.starts_with("main_engine_lube_oil")
    });
    out
}

fn copy_tree(from: &Path, to: &Path, keep: &dyn Fn(&str) -> bool) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(&name), keep);
        } else if keep(&name) {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// `config`, pointed at `index` instead of the shared test index.
fn config_with_index(dir: &Path, port: u16, prefix: &str, index: &Path) -> PathBuf {
    let p = config(dir, port, prefix, "", "");
    let text = std::fs::read_to_string(&p).unwrap();
    let shared = format!("index = \"{}\"", common::index().display());
    assert!(text.contains(&shared), "config() changed; update reload.rs");
    let text = text.replace(&shared, &format!("index = \"{}\"", index.display()));
    std::fs::write(&p, text).unwrap();
    p
}

/// Replaces `path` the way an operator (or `tidewatch index build`) should:
/// write beside it, then rename over it, so a reload never reads half a file.
fn replace_by_rename(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn occurrences(d: &Daemon, needle: &str) -> usize {
    d.log().matches(needle).count()
}

fn cites_lube_oil(d: &serde_json::Value) -> bool {
    d["sources"].as_array().unwrap().iter().any(|s| {
        s["doc"]
            .as_str()
            .unwrap()
            .starts_with("main_engine_lube_oil")
    })
}

async fn ask_lube_oil(c: &mut Client, id: &str) -> serde_json::Value {
    // The alarm end_to_end.rs proves the test model cites the lube oil manual for.
    let d = c
        .ask(
            "reload",
            id,
            "ME1",
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "主机滑油进口压力低，备用泵已启动",
        )
        .await;
    assert_full_diagnosis_shape(&d);
    d
}

/// A broker, and a daemon on its own `knowledge.twx` built from `knowledge`,
/// ready, with an operator client on prefix "reload".
struct Rig {
    _broker: Broker,
    dir: tempfile::TempDir,
    index: PathBuf,
    c: Client,
    d: Daemon,
}

async fn start_on_own_index(knowledge: impl FnOnce(&Path) -> PathBuf, client_id: &str) -> Rig {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("knowledge.twx");
    tidewatch::retrieval::build_file(&knowledge(dir.path()), &index).unwrap();
    let cfg = config_with_index(dir.path(), broker.port, "reload", &index);
    let c = Client::connect(broker.port, "reload", client_id).await;
    let d = Daemon::launch(&cfg).within(T).ready();
    Rig {
        _broker: broker,
        dir,
        index,
        c,
        d,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reopens_the_index_and_a_bad_index_is_refused_keeping_the_old_one() {
    let _serial = common::serial();
    let mut rig = start_on_own_index(knowledge_without_lube_oil, "reload-client").await;
    let (dir, index, c, d) = (&rig.dir, &rig.index, &mut rig.c, &mut rig.d);

    let before = ask_lube_oil(c, "r-1").await;
    assert!(
        !cites_lube_oil(&before),
        "the lube oil manual is not in the index yet: {before}"
    );

    // The manuals are updated: a new index is built aside and renamed into place.
    let fresh = dir.path().join("fresh.twx");
    tidewatch::retrieval::build_file(&repo().join("knowledge"), &fresh).unwrap();
    std::fs::rename(&fresh, index).unwrap();
    d.signal(Signal::SIGHUP);
    assert!(
        d.wait_log("index reloaded", Duration::from_secs(20)),
        "no reload after SIGHUP:\n{}",
        d.log()
    );
    let after = ask_lube_oil(c, "r-2").await;
    assert!(
        cites_lube_oil(&after),
        "the reloaded index's lube oil manual should be cited: {after}"
    );

    // A damaged index must be refused by name, and the good one kept.
    replace_by_rename(index, b"this is not a tidewatch index at all");
    d.signal(Signal::SIGHUP);
    assert!(
        d.wait_log("index reload refused", Duration::from_secs(20)),
        "no refusal after SIGHUP with a damaged index:\n{}",
        d.log()
    );
    let log = d.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("index reload refused"))
        .unwrap();
    assert!(
        refusal.contains(&index.display().to_string()) && refusal.contains("not a tidewatch index"),
        "the refusal should name the file and the reason: {refusal}"
    );
    assert_eq!(occurrences(d, "index reloaded"), 1, "{log}");
    let still = ask_lube_oil(c, "r-3").await;
    assert!(
        cites_lube_oil(&still),
        "the previous (good) index should still answer: {still}"
    );
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "the daemon should still run:\n{}",
        d.log()
    );
}

// The README used to warn that rewriting the index in place (`cp new.twx
// knowledge.twx`) could crash the daemon with SIGBUS: it mapped the file, and
// the pages under it were truncated. An operator's `cp` must not take the
// diagnoses down; the daemon now holds its own copy, and the next reload
// judges the new file like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_the_index_in_place_does_not_disturb_the_running_daemon() {
    let _serial = common::serial();
    let mut rig = start_on_own_index(|_| repo().join("knowledge"), "inplace-client").await;
    let (index, c, d) = (&rig.index, &mut rig.c, &mut rig.d);
    assert!(cites_lube_oil(&ask_lube_oil(c, "p-1").await));

    // Truncated and rewritten in place, as `cp` or a half-finished copy does.
    std::fs::write(index, b"half a file").unwrap();
    let during = ask_lube_oil(c, "p-2").await;
    assert!(
        cites_lube_oil(&during),
        "the index the daemon opened should still answer: {during}"
    );
    d.signal(Signal::SIGHUP);
    assert!(
        d.wait_log("index reload refused", Duration::from_secs(20)),
        "the rewritten file should be refused on reload:\n{}",
        d.log()
    );
    assert!(cites_lube_oil(&ask_lube_oil(c, "p-3").await));
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "the daemon should still run:\n{}",
        d.log()
    );
}

fn count(got: &[String], pred: impl Fn(&str) -> bool) -> usize {
    got.iter().filter(|m| pred(m)).count()
}

/// For Type=notify, `systemctl reload` shows the unit "reloading" from
/// RELOADING=1 (with MONOTONIC_USEC, which systemd 253+ wants alongside it)
/// until READY=1; a refused reload must end with READY=1 too, or the unit
/// would stay "reloading" until systemd's timeout.
#[test]
fn reload_is_announced_reloading_then_ready_also_when_refused() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("knowledge.twx");
    tidewatch::retrieval::build_file(&repo().join("knowledge"), &index).unwrap();
    let cfg = config_with_index(dir.path(), broker.port, "rnotify", &index);
    let mut n = notify_socket(dir.path());
    let d = Daemon::launch(&cfg).notify(&mut n).within(T).ready();
    let ready = |g: &[String]| count(g, |m| m == "READY=1");
    assert_eq!(ready(&n.got), 1, "READY=1 before any reload: {:?}", n.got);

    d.signal(Signal::SIGHUP);
    assert!(
        n.drain(Duration::from_secs(20), |g| ready(g) == 2),
        "no READY=1 after a reload: {:?}\n{}",
        n.got,
        d.log()
    );
    let got = &n.got;
    let first_ready = got.iter().position(|m| m == "READY=1").unwrap();
    let reloading = got
        .iter()
        .position(|m| m.lines().any(|l| l == "RELOADING=1"))
        .unwrap_or_else(|| panic!("no RELOADING=1: {got:?}"));
    let second_ready = got.iter().rposition(|m| m == "READY=1").unwrap();
    assert!(
        first_ready < reloading && reloading < second_ready,
        "order: {got:?}"
    );
    let usec = got[reloading]
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("RELOADING=1 without MONOTONIC_USEC: {got:?}"));
    assert!(usec.parse::<u64>().unwrap() > 0, "{usec}");
    assert!(
        got[reloading..second_ready]
            .iter()
            .any(|m| m.starts_with("STATUS=") && m.contains("reloaded")),
        "no STATUS saying the index was reloaded: {got:?}"
    );

    // A missing index: refused, and the reload still ends with READY=1.
    std::fs::remove_file(&index).unwrap();
    d.signal(Signal::SIGHUP);
    assert!(
        n.drain(Duration::from_secs(20), |g| ready(g) == 3),
        "no READY=1 after a refused reload: {:?}\n{}",
        n.got,
        d.log()
    );
    let got = &n.got;
    let reloadings = count(got, |m| m.lines().any(|l| l == "RELOADING=1"));
    assert_eq!(reloadings, 2, "{got:?}");
    let third_ready = got.iter().rposition(|m| m == "READY=1").unwrap();
    assert!(
        got[second_ready..third_ready]
            .iter()
            .any(|m| m.starts_with("STATUS=") && m.contains("refused")),
        "no STATUS saying the reload was refused: {got:?}"
    );
    assert!(
        d.wait_log("index reload refused", Duration::from_secs(5)),
        "{}",
        d.log()
    );
    let log = d.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("index reload refused"))
        .unwrap();
    assert!(
        refusal.contains(&index.display().to_string()),
        "the refusal should name the file: {refusal}"
    );
}

// A mapped plant code was checked at start; manuals reloaded without its
// code leave it mapped to nothing, and the journal says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_manuals_lack_a_mapped_code_says_so() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("knowledge.twx");
    tidewatch::retrieval::build_file(&repo().join("knowledge"), &index).unwrap();
    let cfg = config_with_index(dir.path(), broker.port, "reload", &index);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[knowledge.plant_codes]\n\"AMS-77\" = \"ME-LO-PRES-LO\"\n");
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::launch(&cfg).within(T).ready();
    let warning =
        "knowledge.plant_codes: AMS-77 = ME-LO-PRES-LO: the reloaded manuals have no such code";
    assert!(!d.log().contains(warning), "{}", d.log());

    let partial = dir.path().join("partial.twx");
    tidewatch::retrieval::build_file(&knowledge_without_lube_oil(dir.path()), &partial).unwrap();
    std::fs::rename(&partial, &index).unwrap();
    d.signal(Signal::SIGHUP);
    assert!(
        d.wait_log("index reloaded", Duration::from_secs(20)),
        "no reload after SIGHUP:\n{}",
        d.log()
    );
    assert!(
        d.wait_log(warning, Duration::from_secs(5)),
        "no warning for the mapped code:\n{}",
        d.log()
    );
}
