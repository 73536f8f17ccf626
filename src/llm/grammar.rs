//! The output grammar of a diagnosis as the model sees it: the fixed JSON
//! skeleton, the grammars for the free parts, and the limits on each.
//!
//! Schema-driven generation feeds every fixed part (keys, brackets, quotes) to
//! the model as prompt-like batched tokens and only samples the values; the
//! whole-output GBNF grammar is the slower reference path it is measured
//! against. Pure text; no model here.

/// Most causes / actions a diagnosis carries; more only costs tokens on the board.
pub const MAX_CAUSES: usize = 3;
pub const MAX_ACTIONS: usize = 4;
/// Token cap per written cause or action: a value that hits its cap is
/// closed by us. The summary's cap is `llm.summary_tokens`.
pub const ITEM_TOKENS: usize = 28;

pub const LIKELIHOODS: [&str; 3] = ["high", "medium", "low"];

/// Fixed parts of the skeleton, in order.
pub const OPEN: &str = "{\"summary\":\"";
pub const SUMMARY_TO_CAUSES: &str = "\",\"probable_causes\":[{\"cause\":\"";
pub const CAUSE_TO_LIKELIHOOD: &str = "\",\"likelihood\":\"";
pub const NEXT_CAUSE: &str = "\"},{\"cause\":\"";
pub const CAUSES_TO_ACTIONS: &str = "\"}],\"actions\":[\"";
pub const NEXT_ITEM: &str = "\",\"";
pub const ACTIONS_TO_SOURCES: &str = "\"],\"sources\":[\"";
pub const SOURCES_END: &str = "\"]}";
/// A chosen answer whose summary comes last: the model reads the lists
/// first, and the summary is written knowing them.
pub const OPEN_CAUSES: &str = "{\"probable_causes\":[{\"cause\":\"";
pub const ACTIONS_TO_SUMMARY: &str = "\"],\"summary\":\"";

/// The candidates of a chosen answer: the numbered manual items the prompt
/// shows, as the manuals have them (not escaped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choices {
    pub causes: Vec<String>,
    pub actions: Vec<String>,
}

/// A text as the body of a JSON string: escaped, without its quotes. What
/// the model reads of a manual item inside the answer.
pub fn json_body(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or_default()
        .to_string()
}

/// GBNF for the body of one JSON string and its closing quote. No escapes and
/// no control characters, so whatever is sampled is valid JSON as it stands.
pub const STRING_BODY_GBNF: &str = r#"root ::= [^"\\\x7F\x00-\x1F]* "\"""#;

/// GBNF for the whole diagnosis object with `n_passages` citable passages: the
/// reference path (everything sampled, keys and punctuation included).
pub fn full_gbnf(n_passages: usize) -> String {
    let n = n_passages.max(1);
    let srcs: Vec<String> = (1..=n).map(|i| format!("\"\\\"P{i}\\\"\"")).collect();
    format!(
        r#"root ::= "{{\"summary\":" str ",\"probable_causes\":[" cause ("," cause){{0,{mc}}} "],\"actions\":[" str ("," str){{0,{ma}}} "],\"sources\":[" src ("," src){{0,{ms}}} "]}}"
cause ::= "{{\"cause\":" str ",\"likelihood\":" lik "}}"
lik ::= "\"high\"" | "\"medium\"" | "\"low\""
src ::= {srcs}
str ::= "\"" [^"\\\x7F\x00-\x1F]{{1,240}} "\""
"#,
        mc = MAX_CAUSES - 1,
        ma = MAX_ACTIONS - 1,
        ms = n - 1,
        srcs = srcs.join(" | "),
    )
}

/// The parts of a diagnosis the model produced, before they are checked
/// against the retrieved passages.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct Draft {
    pub summary: String,
    pub probable_causes: Vec<DraftCause>,
    pub actions: Vec<String>,
    /// Passage labels such as "P2".
    pub sources: Vec<String>,
    /// In a chosen answer, the index into `Choices::actions` of each action.
    #[serde(skip)]
    pub action_items: Vec<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct DraftCause {
    pub cause: String,
    pub likelihood: String,
    /// In a chosen answer, the index into `Choices::causes`.
    #[serde(skip)]
    pub item: Option<usize>,
}

/// Maps "P2" to the zero-based passage index, if it names one we retrieved.
pub fn passage_index(label: &str, n_passages: usize) -> Option<usize> {
    let i: usize = label.trim().strip_prefix('P')?.parse().ok()?;
    (1..=n_passages).contains(&i).then(|| i - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skeleton_with_values_is_valid_json() {
        let json = format!(
            "{OPEN}oil{SUMMARY_TO_CAUSES}filter{CAUSE_TO_LIKELIHOOD}high{NEXT_CAUSE}pump{CAUSE_TO_LIKELIHOOD}low{CAUSES_TO_ACTIONS}a1{NEXT_ITEM}a2{ACTIONS_TO_SOURCES}P1{NEXT_ITEM}P3{SOURCES_END}"
        );
        let d: Draft = serde_json::from_str(&json).unwrap();
        assert_eq!(d.probable_causes.len(), 2);
        assert_eq!(d.sources, vec!["P1", "P3"]);
    }

    #[test]
    fn chosen_skeleton_with_the_summary_last_is_valid_json() {
        let item = "Never open \"hot\" doors\\ 严禁";
        let json = format!(
            "{OPEN_CAUSES}{}{CAUSE_TO_LIKELIHOOD}high{CAUSES_TO_ACTIONS}{}{ACTIONS_TO_SUMMARY}short\"}}",
            json_body(item),
            json_body("a2")
        );
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["probable_causes"][0]["cause"], item);
        assert_eq!(v["actions"][0], "a2");
        assert_eq!(v["summary"], "short");
    }

    #[test]
    fn passage_labels_outside_the_retrieved_set_are_refused() {
        assert_eq!(passage_index("P1", 3), Some(0));
        assert_eq!(passage_index("P3", 3), Some(2));
        assert_eq!(passage_index("P4", 3), None);
        assert_eq!(passage_index("P0", 3), None);
        assert_eq!(passage_index("doc", 3), None);
    }

    #[test]
    fn full_grammar_names_every_passage() {
        let g = full_gbnf(3);
        assert!(g.contains(r#""\"P3\"""#), "{g}");
        assert!(g.starts_with("root ::="));
    }
}
