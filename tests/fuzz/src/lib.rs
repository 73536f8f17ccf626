//! What the fuzz targets do with one input, apart from libFuzzer so that
//! `tests/fuzz_regressions.rs` can replay inputs (and saved crashes) under a
//! plain `cargo test` on stable. This file is also compiled as a module of that
//! test, so it holds no crate-level attributes.
//!
//! Both functions must never panic on any input: a panic here is a daemon
//! crash in the field (an alarm) or at start or on a query (an index). Where the
//! code promises more than "no panic", the promise is asserted too.

use tidewatch::alarm::{self, Alarm, AlarmError};
use tidewatch::retrieval::index::HEADER_LEN;
use tidewatch::retrieval::{Index, Query};

/// The topic prefix the alarm target parses topics against (the default one).
pub const PREFIX: &str = "tidewatch";
/// `mqtt.max_alarm_bytes`'s default.
pub const MAX_ALARM_BYTES: usize = 8192;
/// Longest error reason the alarm parser may produce, apart from the topic's
/// equipment that `EquipmentMismatch` quotes: reasons are published on the
/// error topic, and a hostile payload must not be echoed back at full size.
pub const MAX_REASON_BYTES: usize = 1024;

/// Alarm target. Input: one byte `n`, then `n` bytes of topic (fewer if the
/// input ends), then the payload. The payload goes through the daemon's path
/// (`equipment_from_topic` then `parse` against it) and the CLI's (`parse`
/// without a topic).
pub fn alarm(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (topic, payload) = rest.split_at(usize::from(n).min(rest.len()));
    // The daemon rejects a topic that is not UTF-8 before this (MQTT 5
    // topics come as bytes); lossy decoding keeps every input useful here.
    let topic = String::from_utf8_lossy(topic);
    match alarm::equipment_from_topic(PREFIX, &topic) {
        Ok(eq) => {
            assert!(!eq.is_empty() && !eq.contains('/'), "topic gave {eq:?}");
            check_alarm(
                payload,
                Some(eq),
                alarm::parse(payload, Some(eq), MAX_ALARM_BYTES),
            );
        }
        Err(e) => assert!(matches!(e, AlarmError::BadTopic(_)), "{e:?}"),
    }
    check_alarm(payload, None, alarm::parse(payload, None, MAX_ALARM_BYTES));
}

fn check_alarm(payload: &[u8], topic_eq: Option<&str>, r: Result<Alarm, AlarmError>) {
    let a = match r {
        Ok(a) => a,
        Err(e) => {
            let reason = e.to_string();
            if !matches!(e, AlarmError::EquipmentMismatch { .. }) {
                assert!(
                    reason.len() <= MAX_REASON_BYTES,
                    "{} byte reason: {reason}",
                    reason.len()
                );
            }
            return;
        }
    };
    // The README's wire contract, field by field.
    assert!(payload.len() <= MAX_ALARM_BYTES);
    let short = |field: &str, v: &str, limit: usize| {
        let n = v.chars().count();
        assert!(n <= limit, "{field} has {n} characters: {v:?}");
        assert!(!v.chars().any(char::is_control), "{field}: {v:?}");
        assert_eq!(v, v.trim(), "{field} is not trimmed");
    };
    short("id", &a.id, alarm::MAX_ID);
    short("equipment", &a.equipment, alarm::MAX_EQUIPMENT);
    short("code", &a.code, alarm::MAX_CODE);
    for (field, v) in [
        ("id", &a.id),
        ("equipment", &a.equipment),
        ("code", &a.code),
    ] {
        assert!(!v.is_empty(), "{field} is empty");
    }
    assert!(
        !a.equipment.contains(['/', '+', '#']),
        "equipment {:?}",
        a.equipment
    );
    if let Some(t) = topic_eq {
        assert_eq!(a.equipment, t, "equipment differs from the topic");
    }
    assert!(a.ts.len() <= 64, "ts {:?}", a.ts);
    if let Some(k) = &a.kind {
        short("kind", k, alarm::MAX_KIND);
    }
    if let Some(u) = &a.unit {
        short("unit", u, alarm::MAX_UNIT);
    }
    for (field, v) in [("value", a.value), ("threshold", a.threshold)] {
        if let Some(v) = v {
            assert!(
                v.is_finite() && v.abs() <= alarm::MAX_ABS_VALUE,
                "{field} {v}"
            );
        }
    }
    if let Some(m) = &a.message {
        assert!(!m.is_empty() && m.len() <= alarm::MAX_MESSAGE_BYTES);
        assert!(
            !m.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
            "message {m:?}"
        );
    }
    // A checked alarm is a fixed point: serialised (as the outbox and the
    // answer cache do) and parsed again, it is accepted unchanged. The limit is
    // raised because `1` comes back as `1.0`. Numbers may move by an ulp:
    // serde_json's default float parser is fast, not correctly rounded (its
    // `float_roundtrip` feature is off), which no sensor reading notices.
    let again = serde_json::to_vec(&a).expect("an alarm serialises");
    let b = alarm::parse(&again, Some(&a.equipment), 1 << 20)
        .unwrap_or_else(|e| panic!("re-parsing {} failed: {e}", String::from_utf8_lossy(&again)));
    let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(1.0),
        (x, y) => x == y,
    };
    assert!(close(a.value, b.value) && close(a.threshold, b.threshold));
    let exact = |x: &Alarm| Alarm {
        value: None,
        threshold: None,
        ..x.clone()
    };
    assert_eq!(
        exact(&a),
        exact(&b),
        "re-parsing {}",
        String::from_utf8_lossy(&again)
    );
}

/// Index target mode bit: recompute the header CRC after the fuzzer's edits.
/// Without it nearly every mutation dies at the checksum, and the body decoders
/// (document table, terms, postings, LZ4 passages) are never reached.
pub const RESEAL_CRC: u8 = 1;
/// Index target mode bit: also make the header's body length and last section
/// length agree with the input's real length, so insertions and deletions get
/// past the length checks.
pub const RESEAL_LENGTHS: u8 = 2;

/// Index target. Input: one mode byte (`RESEAL_*` bits; 0 = the bytes as they
/// are, which fuzzes the header and CRC checks), then the index file. If it
/// opens, a few searches run on it.
pub fn index(data: &[u8]) {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let mut bytes = file.to_vec();
    if mode & RESEAL_LENGTHS != 0 {
        fix_lengths(&mut bytes);
    }
    if mode & (RESEAL_CRC | RESEAL_LENGTHS) != 0 {
        reseal(&mut bytes);
    }
    let idx = match Index::from_bytes(bytes) {
        Ok(i) => i,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let n = idx.n_passages();
    let queries = [
        (Query::from_text("ME-LO-PRES-LO lube oil pressure low"), 3),
        (Query::from_text("主机滑油压力低，备用泵已启动"), 5),
        (
            Query {
                text: "pump worn seal leak".into(),
                code: Some("BLG-WELL-LVL-HI".into()),
                kind: Some("main_engine_lube_oil".into()),
                tag: Some("LO-PP-2".into()),
                lang: Default::default(),
            },
            1,
        ),
        // A large k decodes every matching passage, not just a shortlist.
        (
            Query::from_text("alarm check pump valve sensor 报警 检查"),
            10_000,
        ),
    ];
    for (q, k) in &queries {
        let Ok(hits) = idx.search(q, *k) else {
            continue;
        };
        assert!(hits.len() <= *k);
        for w in hits.windows(2) {
            assert!(
                w[0].score.total_cmp(&w[1].score).is_ge(),
                "hits out of order"
            );
        }
        for h in &hits {
            assert!(h.passage < n, "hit {} of {n} passages", h.passage);
        }
    }
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Sets the body length to the real one and stretches or shrinks the last
/// body section (passages) to match, where the other sections leave room.
pub fn fix_lengths(b: &mut [u8]) {
    if b.len() < HEADER_LEN {
        return;
    }
    let body = (b.len() - HEADER_LEN) as u64;
    b[32..40].copy_from_slice(&body.to_le_bytes());
    let others: u64 = (0..4).map(|i| u64::from(get_u32(b, 44 + i * 4))).sum();
    if let Some(last) = body.checked_sub(others).and_then(|l| u32::try_from(l).ok()) {
        put_u32(b, 60, last);
    }
}

/// Writes the CRC that `index.rs` expects: CRC-32 over the header with its CRC
/// field (bytes 40..44) zeroed, then the body. A copy of `index::checksum`,
/// kept private there; `tests/fuzz_regressions.rs` proves the two agree.
pub fn reseal(b: &mut [u8]) {
    if b.len() < HEADER_LEN {
        return;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&b[..40]);
    h.update(&[0u8; 4]);
    h.update(&b[44..]);
    let crc = h.finalize();
    put_u32(b, 40, crc);
}
