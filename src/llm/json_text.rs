//! Pure text helpers for the JSON the slot writes: what a token's piece
//! does inside a JSON string, where a cut value or head may end (whole
//! characters, outside escapes, at a clause), and the JSON text of a draft.

use super::grammar::Draft;

/// What a token's piece does to the JSON string value being sampled.
pub(super) enum Piece {
    Body,
    /// Ends the string; the value bytes are the first `n`.
    Close(usize),
    Invalid,
}

/// True if `bytes` (the head of a JSON string body) ends on a character
/// boundary and not inside an escape.
pub(super) fn head_is_whole(bytes: &[u8]) -> bool {
    let slashes = bytes.iter().rev().take_while(|&&b| b == b'\\').count();
    std::str::from_utf8(bytes).is_ok() && slashes % 2 == 0
}

/// What a sampled token's piece is inside a JSON string body: a quote
/// may only end it, and an escape or a control character is refused, as the
/// string-body grammar refuses them.
pub(super) fn classify(piece: &[u8]) -> Piece {
    for (i, b) in piece.iter().enumerate() {
        match b {
            b'"' => {
                return if i + 1 == piece.len() {
                    Piece::Close(i)
                } else {
                    Piece::Invalid
                }
            }
            b'\\' | 0x00..=0x1f | 0x7f => return Piece::Invalid,
            _ => {}
        }
    }
    if piece.is_empty() {
        Piece::Invalid
    } else {
        Piece::Body
    }
}

/// A value the cap or the budget cut off, back to the end of its last whole
/// sentence or clause, when that keeps at least a third of it: a summary that
/// ran past its share ends "…切换并清洗。主引擎lube_oil" otherwise. A point
/// inside a number ("2.5") is not an end.
pub(super) fn to_last_clause(s: &str) -> &str {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    for k in (0..chars.len()).rev() {
        let (at, c) = chars[k];
        let after = chars.get(k + 1).map(|x| x.1);
        let end = match c {
            '。' | '！' | '？' | '；' => true,
            '.' | '!' | '?' | ';' => after.is_none_or(|a| a.is_whitespace() || !a.is_ascii()),
            _ => false,
        };
        if !end {
            continue;
        }
        if at * 3 < s.len() {
            break;
        }
        let cut = at + c.len_utf8();
        return s[..cut].trim_end_matches([';', '；']);
    }
    s
}

/// Whether `bytes` end a sentence: a full stop, question or exclamation
/// mark, Chinese or Western. A point after a digit may be inside a number
/// ("2.5") and one after a lone letter inside an abbreviation ("e.g."), so
/// neither ends anything.
pub(super) fn ends_sentence(bytes: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(bytes) else {
        return false;
    };
    let mut rev = s.trim_end().chars().rev();
    match rev.next() {
        Some('。' | '！' | '？' | '!' | '?') => true,
        Some('.') => {
            let before: String = rev.take_while(|c| !c.is_whitespace()).collect();
            let letters = before.chars().filter(|c| c.is_alphabetic()).count();
            !before.starts_with(|c: char| c.is_ascii_digit())
                && letters > 1
                && !before.contains('.')
        }
        _ => false,
    }
}

/// A cut summary back to its last whole clause: the end of its last
/// sentence, or else of its last clause (a comma, a colon), or else the
/// whole text when it has neither. A summary cut at "…或面板" says less than
/// one that stops at the comma before it, and says nothing false.
pub(super) fn to_whole_clause(s: &str) -> &str {
    let s = to_last_clause(s);
    let sentence = |c: char| matches!(c, '。' | '！' | '？' | '.' | '!' | '?' | ';' | '；');
    if s.ends_with(sentence) {
        return s;
    }
    let clause = s
        .char_indices()
        .rev()
        .find(|&(at, c)| {
            let next = s[at + c.len_utf8()..].chars().next();
            match c {
                '，' | '、' | '：' => true,
                ',' | ':' => next.is_none_or(|n| n.is_whitespace()),
                _ => false,
            }
        })
        .map(|(at, _)| at);
    match clause {
        Some(at) if at > 0 => s[..at].trim_end(),
        _ => s,
    }
}

/// The bytes up to their last whole character: a value cut between tokens
/// can end inside one.
pub(super) fn valid_utf8_prefix(mut bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes.clone()) {
        Ok(s) => s,
        Err(e) => {
            bytes.truncate(e.utf8_error().valid_up_to());
            String::from_utf8(bytes).unwrap_or_default()
        }
    }
}

/// The JSON the schema path produced, for logs and validity checks.
pub(super) fn render_raw(d: &Draft) -> String {
    let causes: Vec<serde_json::Value> = d
        .probable_causes
        .iter()
        .map(|c| serde_json::json!({"cause": c.cause, "likelihood": c.likelihood}))
        .collect();
    serde_json::json!({
        "summary": d.summary,
        "probable_causes": causes,
        "actions": d.actions,
        "sources": d.sources,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_ends_at_its_stop_but_not_inside_a_number_or_an_abbreviation() {
        let ends = |s: &str| ends_sentence(s.as_bytes());
        assert!(ends("主机滑油压力低，可能由滑油泵故障导致。"));
        assert!(ends("冷却水温度高！"));
        assert!(ends("Lube oil pressure low, likely a worn pump."));
        assert!(ends("Is the strainer clogged?"));
        assert!(ends("Pressure low. "));
        assert!(!ends("主机滑油压力低，可能由"));
        assert!(!ends("Pressure fell to 2."));
        assert!(!ends("Check the valves, e.g."));
        assert!(!ends("Check valve A."));
        assert!(!ends("Lube oil pressure low, likely"));
        assert!(!ends("."));
        assert!(!ends(""));
        // A character cut between tokens is not a stop yet.
        assert!(!ends_sentence(&"压力低。".as_bytes()[..10]));
    }

    #[test]
    fn a_head_is_whole_on_a_character_boundary_outside_an_escape() {
        assert!(head_is_whole("运行泵".as_bytes()));
        assert!(!head_is_whole(&"运行泵".as_bytes()[..8]));
        assert!(!head_is_whole(br"say \"));
        assert!(!head_is_whole(br"a\\\"));
        assert!(head_is_whole(br"a\\"));
        assert!(head_is_whole(b""));
    }

    #[test]
    fn a_cut_summary_ends_at_its_last_whole_clause() {
        assert_eq!(
            to_whole_clause("蓄电池电压低，可能是太阳能输入不足，或面板"),
            "蓄电池电压低，可能是太阳能输入不足"
        );
        assert_eq!(
            to_whole_clause("Battery low: solar input weak, or the panels"),
            "Battery low: solar input weak"
        );
        assert_eq!(
            to_whole_clause("蓄电池电压低。可能是太阳能"),
            "蓄电池电压低。"
        );
        assert_eq!(to_whole_clause("no clause at all"), "no clause at all");
        // A decimal comma-less number is no clause end.
        assert_eq!(
            to_whole_clause("pressure 2,5 bar low"),
            "pressure 2,5 bar low"
        );
    }

    #[test]
    fn a_cut_off_value_ends_at_its_last_clause() {
        assert_eq!(
            to_last_clause(
                "核对现场压力表，压力持续下降应降速；查滤器压差，切换并清洗。主引擎lube_oil"
            ),
            "核对现场压力表，压力持续下降应降速；查滤器压差，切换并清洗。"
        );
        assert_eq!(
            to_last_clause("Check the cooler. Reduce load if rising; check the valve posi"),
            "Check the cooler. Reduce load if rising"
        );
        // A decimal point is not an end, and nothing short is kept.
        assert_eq!(
            to_last_clause("pressure fell to 1.6 bar and keeps"),
            "pressure fell to 1.6 bar and keeps"
        );
        assert_eq!(
            to_last_clause("Low. and then a long trailing fragment"),
            "Low. and then a long trailing fragment"
        );
    }

    #[test]
    fn pieces_are_classified_for_json_strings() {
        assert!(matches!(classify(b"oil"), Piece::Body));
        assert!(matches!(classify(b"\""), Piece::Close(0)));
        assert!(matches!(classify(b"ing\""), Piece::Close(3)));
        assert!(matches!(classify(b"\","), Piece::Invalid));
        assert!(matches!(classify(b"a\\n"), Piece::Invalid));
        assert!(matches!(classify(b"\n"), Piece::Invalid));
    }

    #[test]
    fn split_utf8_is_cut_back_to_a_char_boundary() {
        let mut b = "滑油".as_bytes().to_vec();
        b.pop();
        assert_eq!(valid_utf8_prefix(b), "滑");
    }
}
