//! `tidewatch feedback`: a watchkeeper's word on a diagnosis, published on
//! `{prefix}/feedback/{equipment}` through the config's broker, then
//! tidewatch's answer (the site note it kept, or why it refused) printed.
//!
//! Which cause `--confirm N` names, and on which equipment, is read from
//! the record of published diagnoses in state_dir (`feedback::Published`),
//! and the feedback is checked there as the daemon will check it, so a
//! mistake is reported before anything is sent. Connects with the daemon's
//! own connection code (`daemon::connection`) but never as the daemon: a
//! tool logged in as tidewatch would take over its session and could make
//! the broker discard the alarms it holds for it.

use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::{Filter, Packet, PubAckReason, SubscribeReasonCode};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event};

use super::CommandError;
use crate::alarm::Topics;
use crate::cli::FeedbackArgs;
use crate::config::Config;
use crate::feedback::{self, Feedback, Published};
use crate::notes::{NoteCause, Verdict};

/// The environment variable the login's password is read from: never a
/// command-line argument, which every local user can read in /proc.
pub const PASSWORD_ENV: &str = "TIDEWATCH_MQTT_PASSWORD";

/// How long to wait for the broker to take the feedback, whatever --wait.
const PUBACK_WAIT: Duration = Duration::from_secs(15);

pub fn run(args: &FeedbackArgs) -> Result<(), CommandError> {
    let cfg = crate::config::load(&args.config)?;
    let login = login(
        args.username.as_deref(),
        cfg.mqtt.username.as_deref(),
        std::env::var(PASSWORD_ENV).ok(),
    )?;
    let needs_record = args.equipment.is_none() || args.text.is_none();
    let published = if needs_record {
        Some(Published::read(&cfg.state_dir)?)
    } else {
        None
    };
    let (equipment, fb) = compose(args, published.as_ref(), now_to_the_second())?;
    if let Some(p) = &published {
        // The daemon's own checks, before anything is sent.
        feedback::note(fb.clone(), &equipment, p)?;
    }
    super::runtime()?.block_on(send(&cfg, login, &equipment, &fb, args.wait as u64))
}

/// Now, RFC 3339 to the second: the note's id holds it, and a person may
/// type it (`tidewatch notes withdraw`).
fn now_to_the_second() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| crate::diagnosis::now_rfc3339())
}

/// The login to publish as: `--username` with the password from the
/// environment, never the daemon's own (`daemon`), or none.
fn login(
    given: Option<&str>,
    daemon: Option<&str>,
    password: Option<String>,
) -> Result<Option<(String, String)>, CommandError> {
    match (given, daemon) {
        (Some(u), Some(d)) if u == d => Err(CommandError::Usage(format!(
            "--username {u} is tidewatch's own login: a tool logged in as it takes over the daemon's session; use an operator's login"
        ))),
        (Some(u), _) => Ok(Some((u.to_string(), password.unwrap_or_default()))),
        (None, Some(d)) => Err(CommandError::Usage(format!(
            "the config logs in as {d}, tidewatch's own login, which this command must not use: give --username (an operator's login) and its password in {PASSWORD_ENV}"
        ))),
        (None, None) => Ok(None),
    }
}

/// The feedback the arguments say, at `ts`, and its equipment: the cause
/// `--confirm`/`--reject` count among the diagnosis's probable causes (its
/// manual source when it has one, else its words), or `--text`.
fn compose(
    args: &FeedbackArgs,
    published: Option<&Published>,
    ts: String,
) -> Result<(String, Feedback), CommandError> {
    let record = match published {
        None => None,
        Some(p) => {
            let found: Vec<_> = match &args.equipment {
                Some(e) => p.get(&args.alarm_id, e).into_iter().collect(),
                None => p.find(&args.alarm_id).collect(),
            };
            match found.as_slice() {
                [r] => Some(*r),
                [] => {
                    return Err(CommandError::Usage(format!(
                        "tidewatch published no diagnosis of alarm {:?}{} among the last {} it keeps; check the id with `tidewatch show`",
                        args.alarm_id,
                        args.equipment
                            .as_deref()
                            .map(|e| format!(" on {e}"))
                            .unwrap_or_default(),
                        feedback::MAX_PUBLISHED
                    )))
                }
                many => {
                    let on: Vec<&str> = many.iter().map(|r| r.alarm.equipment.as_str()).collect();
                    return Err(CommandError::Usage(format!(
                        "alarm {:?} was diagnosed on {}: give --equipment",
                        args.alarm_id,
                        on.join(", ")
                    )));
                }
            }
        }
    };
    let equipment = match (&args.equipment, record) {
        (Some(e), _) => e.clone(),
        (None, Some(r)) => r.alarm.equipment.clone(),
        (None, None) => return Err(CommandError::Usage("give --equipment".into())),
    };
    let (verdict, cause) = match (args.confirm, args.reject, &args.text) {
        (_, _, Some(t)) => (Verdict::Confirmed, NoteCause::Text(t.clone())),
        (Some(n), _, None) => (Verdict::Confirmed, nth_cause(record, n, "--confirm")?),
        (None, Some(n), None) => (Verdict::Rejected, nth_cause(record, n, "--reject")?),
        (None, None, None) => {
            return Err(CommandError::Usage(
                "give --confirm N, --reject N or --text".into(),
            ))
        }
    };
    let fb = Feedback {
        alarm_id: args.alarm_id.clone(),
        verdict,
        cause,
        remedy: args.remedy.clone(),
        by: args.by.clone(),
        ts,
    };
    Ok((equipment, fb))
}

/// The `n`th probable cause (from 1) of the recorded diagnosis.
fn nth_cause(
    record: Option<&feedback::Record>,
    n: usize,
    flag: &str,
) -> Result<NoteCause, CommandError> {
    let causes = record.map(|r| r.answered.causes.as_slice()).unwrap_or(&[]);
    let c = causes.get(n.wrapping_sub(1)).ok_or_else(|| {
        CommandError::Usage(format!(
            "{flag} {n}: the diagnosis listed {} probable causes",
            causes.len()
        ))
    })?;
    Ok(match &c.source {
        Some(s) => NoteCause::Source(s.clone()),
        // A cause in the model's words has no place in the manuals: the
        // crew confirms those words.
        None => NoteCause::Text(c.cause.clone()),
    })
}

/// Publishes `fb` and waits up to `wait` for tidewatch's answer.
async fn send(
    cfg: &Config,
    login: Option<(String, String)>,
    equipment: &str,
    fb: &Feedback,
    wait: u64,
) -> Result<(), CommandError> {
    let broker = format!("{}:{}", cfg.mqtt.host, cfg.mqtt.port);
    let fail = |reason: String| CommandError::Broker {
        broker: broker.clone(),
        reason,
    };
    let topics = Topics {
        prefix: cfg.mqtt.topic_prefix.clone(),
    };
    let user = login.as_ref().map(|l| l.0.clone());
    let id = format!("tidewatch-feedback-{}", std::process::id());
    let mut o =
        crate::daemon::connection(&cfg.mqtt, &id, login).map_err(|e| fail(e.to_string()))?;
    o.set_clean_start(true);
    let (client, mut events) = AsyncClient::new(o, 16);
    let topic = topics.feedback_on(equipment);
    let notes_topic = topics.notes(equipment);
    let payload = serde_json::to_vec(fb).map_err(|e| fail(e.to_string()))?;
    if wait > 0 {
        client
            .subscribe_many([
                Filter::new(notes_topic.clone(), QoS::AtLeastOnce),
                Filter::new(topics.error(), QoS::AtMostOnce),
            ])
            .await
            .map_err(|e| fail(e.to_string()))?;
    }
    client
        .publish(topic.clone(), QoS::AtLeastOnce, false, payload)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let note_id = crate::notes::make_id(None, &fb.alarm_id, &fb.ts);
    let started = tokio::time::Instant::now();
    let mut published = false;
    loop {
        let limit = if published {
            Duration::from_secs(wait)
        } else {
            PUBACK_WAIT.max(Duration::from_secs(wait))
        };
        let Ok(ev) = tokio::time::timeout_at(started + limit, events.poll()).await else {
            if !published {
                return Err(fail(format!(
                    "the broker did not take the feedback within {} s",
                    limit.as_secs()
                )));
            }
            eprintln!("published on {topic}; tidewatch did not answer within {wait} s (it handles feedback when it is back: the broker keeps it for it)");
            break;
        };
        match ev.map_err(|e| fail(e.to_string()))? {
            Event::Incoming(Packet::PubAck(a)) => match a.reason {
                PubAckReason::Success | PubAckReason::NoMatchingSubscribers => {
                    published = true;
                    if wait == 0 {
                        println!("published on {topic}");
                        break;
                    }
                }
                r => {
                    return Err(fail(format!(
                        "the broker refused the feedback ({r:?}): its ACL must let {} write {}/feedback/#",
                        user.as_deref().unwrap_or("this login"),
                        topics.prefix
                    )))
                }
            },
            Event::Incoming(Packet::SubAck(s))
                if s.return_codes
                    .iter()
                    .any(|c| !matches!(c, SubscribeReasonCode::Success(_))) =>
            {
                eprintln!("cannot read tidewatch's answer ({notes_topic} and {}): the broker's ACL does not let this login read them", topics.error());
            }
            Event::Incoming(Packet::Publish(p)) => {
                let v: serde_json::Value = serde_json::from_slice(&p.payload).unwrap_or_default();
                if p.topic == notes_topic.as_bytes() && v["id"] == note_id.as_str() {
                    println!(
                        "tidewatch kept site note {note_id} ({} by {}) and published it on {notes_topic}",
                        fb.verdict.as_str(),
                        fb.by
                    );
                    break;
                }
                if v["topic"] == topic.as_str() && v["alarm_id"] == fb.alarm_id.as_str() {
                    return Err(fail(format!(
                        "tidewatch refused the feedback: {}",
                        v["reason"].as_str().unwrap_or("(no reason given)")
                    )));
                }
            }
            _ => {}
        }
    }
    let _ = client.disconnect().await;
    // Let the DISCONNECT out; a broker that is gone ends this at once.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while events.poll().await.is_ok() {}
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_own_login_is_never_used() {
        assert!(login(None, Some("tidewatch"), None).is_err());
        assert!(login(Some("tidewatch"), Some("tidewatch"), None).is_err());
        assert_eq!(
            login(Some("operator"), Some("tidewatch"), Some("pw".into())).unwrap(),
            Some(("operator".into(), "pw".into()))
        );
        assert_eq!(login(None, None, None).unwrap(), None);
    }
}
