//! The two languages of the manuals and the answers, and which one a text
//! is in: plants mix them, and a text is in the one most of it is in.
//!
//! An alarm's language is its message's (`Alarm::language`): its answer,
//! the manual items the answer quotes and the notes around them are all
//! in it. A plant's Chinese name for the machine (its `kind`) or a code
//! does not make an English text Chinese.

/// A Chinese log carries the plant's tags, units and abbreviations in
/// Latin letters (`No.2 DG LO 压力低 0.18 MPa`), and an English one at most
/// a name in Chinese (`AHU-2 (实验室空调) supply fan trip`): an ideograph
/// weighs as two Latin words.
const IDEOGRAPH_WEIGHT: usize = 2;

/// A language the manuals are written in, as the knowledge base names it
/// (`-en.md`, `-zh.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Language {
    #[default]
    English,
    Chinese,
}

impl Language {
    /// The language most of `text` is written in: Chinese when its
    /// ideographs, at `IDEOGRAPH_WEIGHT` each, are at least as many as its
    /// runs of Latin letters.
    pub fn of_text(text: &str) -> Self {
        let ideographs = text.chars().filter(|&c| is_cjk(c)).count();
        let latin_words = text
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| !w.is_empty())
            .count();
        match ideographs > 0 && ideographs * IDEOGRAPH_WEIGHT >= latin_words {
            true => Language::Chinese,
            false => Language::English,
        }
    }

    /// The knowledge base's name for it, as a passage's `lang` holds it.
    pub fn code(self) -> &'static str {
        match self {
            Language::English => "en",
            Language::Chinese => "zh",
        }
    }
}

/// True for a CJK ideograph.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF)
}

/// True if the text holds any CJK ideograph.
pub fn has_cjk(s: &str) -> bool {
    s.chars().any(is_cjk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_with_any_ideograph_is_chinese() {
        assert_eq!(Language::of_text("主机滑油压力低"), Language::Chinese);
        assert_eq!(
            Language::of_text("NO.2 DG 滑油 press low"),
            Language::Chinese
        );
        assert_eq!(Language::of_text("NO.2 DG LO PRESS LOW"), Language::English);
        assert_eq!(Language::of_text(""), Language::English);
    }

    #[test]
    fn a_text_is_in_the_language_most_of_it_is_written_in() {
        // An English watch log that names a space in Chinese.
        assert_eq!(
            Language::of_text(
                "AC-F02 AHU-2 (实验室空调) supply fan trip at 0305, thermal overload relay \
                 tripped; reset once, ran 4 min and tripped again"
            ),
            Language::English
        );
        // A Chinese log with the plant's tags, units and abbreviations.
        assert_eq!(
            Language::of_text("No.2 DG LO press 0.18 MPa 低报警，已换滤器 FLT-2"),
            Language::Chinese
        );
        assert_eq!(Language::of_text("ME LO 压力低"), Language::Chinese);
        assert_eq!(Language::Chinese.code(), "zh");
        assert_eq!(Language::English.code(), "en");
    }
}
