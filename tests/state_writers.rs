//! Two processes saving the same prompt-prefix state at once (the daemon's
//! slot and `tidewatch warm` beside it, on the same slot number): neither may
//! remove or rename the other's half-written temp file, so every save
//! succeeds and the file under the real name is always one writer's whole
//! file. The second writer is this test binary run again.

use std::path::Path;
use std::process::Command;

/// Set in the child: the state file it saves to.
const CHILD_PATH: &str = "TIDEWATCH_TEST_STATE_WRITER";
/// Large enough that a save's write and fsync take a while, so two writers'
/// saves overlap on every round.
const SIZE: usize = 2 << 20;
const ROUNDS: usize = 40;

/// Saves a file of `SIZE` bytes of `fill` `ROUNDS` times, as slot 0.
fn save_rounds(path: &Path, fill: u8) -> Vec<String> {
    let bytes = vec![fill; SIZE];
    (0..ROUNDS)
        .filter_map(|i| {
            tidewatch::llm::prefix::save(path, &bytes, 0)
                .err()
                .map(|e| format!("round {i}: {e}"))
        })
        .collect()
}

/// The file under the real name is one writer's, whole.
fn whole(path: &Path) -> Result<(), String> {
    let b = std::fs::read(path).map_err(|e| e.to_string())?;
    let first = b.first().copied();
    if b.len() != SIZE || b.iter().any(|&x| Some(x) != first) {
        return Err(format!(
            "{} bytes, first {first:?}, mixed: {}",
            b.len(),
            b.iter().any(|&x| Some(x) != first)
        ));
    }
    Ok(())
}

#[test]
fn two_processes_saving_one_state_never_clobber_each_other() {
    if let Some(path) = std::env::var_os(CHILD_PATH) {
        let errors = save_rounds(Path::new(&path), 2);
        assert!(
            errors.is_empty(),
            "the other writer's saves failed: {errors:?}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv").join("prefix-a-b.kv");
    // Both start from a whole file, so a reader never finds none.
    tidewatch::llm::prefix::save(&path, &vec![0; SIZE], 0).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_saving_one_state_never_clobber_each_other",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_PATH, &path)
        .spawn()
        .unwrap();
    let reader = {
        let path = path.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = whole(&path) {
                    bad.push(e);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            bad
        });
        (stop, h)
    };
    let errors = save_rounds(&path, 1);
    let child_ok = child.wait().unwrap().success();
    reader.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let bad_reads = reader.1.join().unwrap();
    assert!(errors.is_empty(), "this writer's saves failed: {errors:?}");
    assert!(
        child_ok,
        "the other writer's saves failed (its output is above)"
    );
    assert!(
        bad_reads.is_empty(),
        "{} reads found a file that is no writer's whole file: {:?}",
        bad_reads.len(),
        &bad_reads[..bad_reads.len().min(5)]
    );
    whole(&path).unwrap();
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temp files left behind: {left:?}");
}
