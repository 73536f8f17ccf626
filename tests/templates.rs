//! The hand-written chat templates (the fallback path) render exactly what
//! llama.cpp renders for the models' own Jinja templates, which are kept as
//! text fixtures, and thinking mode is switched off by prefilling.

mod common;

use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use tidewatch::prompt::{template_thinks, Family, EMPTY_THINK};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(common::repo().join("tests/fixtures/templates").join(name)).unwrap()
}

fn llama_render(model: &LlamaModel, jinja: &str) -> String {
    let tmpl = LlamaChatTemplate::new(jinja).unwrap();
    let msgs = vec![
        LlamaChatMessage::new("system".into(), "SYS".into()).unwrap(),
        LlamaChatMessage::new("user".into(), "USER".into()).unwrap(),
    ];
    model.apply_chat_template(&tmpl, &msgs, true).unwrap()
}

fn load_test_model() -> LlamaModel {
    LlamaModel::load_from_file(
        tidewatch::llm::backend(),
        common::test_model(),
        &LlamaModelParams::default(),
    )
    .unwrap()
}

#[test]
fn hand_written_templates_match_llama_cpp_and_the_fixtures() {
    let _serial = common::serial();
    let model = load_test_model();
    let cases = [
        ("qwen2.5.jinja", Family::ChatMl, "expected-chatml.txt"),
        ("smollm2.jinja", Family::SmolLm, "expected-chatml.txt"),
        ("llama3.jinja", Family::Llama3, "expected-llama3.txt"),
        ("gemma.jinja", Family::Gemma, "expected-gemma.txt"),
    ];
    for (jinja, family, expected) in cases {
        let t = fixture(jinja);
        assert_eq!(Family::detect(&t), Some(family), "{jinja}");
        let want = fixture(expected);
        assert_eq!(
            family.render("SYS", "USER"),
            want,
            "hand-written {family:?} vs {expected}"
        );
        assert_eq!(
            llama_render(&model, &t),
            want,
            "llama.cpp's rendering of {jinja} vs {expected}"
        );
        assert!(!template_thinks(&t), "{jinja} has no thinking mode");
    }
}

#[test]
fn thinking_templates_get_the_empty_think_block_prefilled() {
    let _serial = common::serial();
    let t = fixture("qwen3.jinja");
    assert!(template_thinks(&t));
    assert_eq!(Family::detect(&t), Some(Family::ChatMl));
    // What the template emits for enable_thinking=false is what tidewatch sends.
    let ours = format!("{}{EMPTY_THINK}", Family::ChatMl.render("SYS", "USER"));
    assert_eq!(ours, fixture("expected-qwen3-nothink.txt"));
}

#[test]
fn gguf_template_of_the_test_model_is_detected() {
    let _serial = common::serial();
    let model = load_test_model();
    let t = model.chat_template(None).unwrap().to_string().unwrap();
    assert_eq!(Family::detect(&t), Some(Family::SmolLm));
    assert_eq!(
        llama_render(&model, &t),
        Family::SmolLm.render("SYS", "USER")
    );
}

#[test]
fn the_system_prompt_stays_within_200_tokens() {
    let _serial = common::serial();
    let model = load_test_model();
    let n = model
        .vocab()
        .tokenize(tidewatch::prompt::SYSTEM_PROMPT.as_bytes(), false, false)
        .len();
    // The budget is 200: the prompt is paid once per slot, but every token of
    // it is also attended to by every token of every diagnosis.
    assert!(n <= 200, "the system prompt is {n} tokens");
    assert!(n > 100, "tokenizer returned {n} tokens: not a real count");
}
