//! The command line as clap sees it: commands, options, their help and the
//! parsers that check each number where it is read. What a command does
//! lives in `commands` (one module each); the daemon is `daemon::run`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tidewatch",
    version,
    about = "Offline diagnosis daemon for marine equipment alarms",
    long_about = "tidewatch reads equipment alarms from MQTT ({prefix}/alarm/{equipment}), finds the \
relevant passages in an on-disk index of maintenance manuals, asks a small local LLM (llama.cpp, CPU) \
for a diagnosis and publishes it on {prefix}/diagnosis/{equipment}. Everything runs offline.",
    after_help = "Start with: tidewatch check-config --config /etc/tidewatch/tidewatch.toml\n\
The example config deploy/tidewatch.toml documents every key."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: MQTT in, diagnoses out (systemd Type=notify aware)
    Run {
        /// Config file (TOML)
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Diagnose one alarm from a JSON file and print the diagnosis JSON; no MQTT
    Diagnose {
        /// Config file (TOML)
        #[arg(long, short)]
        config: PathBuf,
        /// Alarm JSON file, as it would arrive on {prefix}/alarm/{equipment}, or a
        /// line of the eval set (its "alarm" is used); "-" reads stdin
        #[arg(long, short)]
        alarm: PathBuf,
        /// Site notes to diagnose with, one JSON note per line as `notes
        /// export` writes them (withdrawn ones do not count) [default: the
        /// notes kept in the config's state_dir]
        #[arg(long, value_name = "FILE")]
        notes: Option<PathBuf>,
    },
    /// Precompute the manuals' passage blocks into state_dir, so a fault's first alarm is fast
    ///
    /// Reads the prompt states of the passage blocks the manuals' own
    /// alarms retrieve (each code, in each language) into state_dir/kv/prompts,
    /// so a fault's first alarm reads only its alarm block. Skips what is
    /// there: stop it and run it again at will. install.sh runs it at idle
    /// priority after an install or a manuals update.
    Warm {
        /// Config file (TOML): the model, the index and state_dir to warm
        #[arg(long, short)]
        config: PathBuf,
        /// Only these alarm codes of the manuals (e.g. those the vessel raises
        /// most, first), comma-separated [default: every code]
        #[arg(long, value_delimiter = ',', value_name = "CODE,...")]
        codes: Vec<String>,
    },
    /// Build the retrieval index from manuals, or check manuals without building
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Search the index and print the best passages
    Query {
        /// Index file built by `tidewatch index build`
        #[arg(long, short, required_unless_present = "config")]
        index: Option<PathBuf>,
        /// Config file: search the index its knowledge.index names
        #[arg(long, short, conflicts_with = "index")]
        config: Option<PathBuf>,
        /// How many passages to print, 1..=50
        #[arg(long, short = 'k', default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=50))]
        top_k: u16,
        /// Print a JSON array of hits (doc, section, score, text)
        #[arg(long)]
        json: bool,
        /// Query text: an alarm code, words, or an operator's message in any language
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Measure accuracy on labeled alarms (knowledge/eval/alarms.jsonl)
    ///
    /// Every figure is also reported per writer and per kind style of the cases, each split
    /// tuning / held out.
    ///
    /// With --retrieval: retrieval and the coverage judgement only (hit@1, hit@3, misses per
    /// class, each rule's decisions), on --index or the config's knowledge.index; no model.
    /// Otherwise: the whole pipeline with the config's model (JSON validity, cause-keyword
    /// hit rate, degraded rate, TTFT and latency distribution), needs --config.
    Eval(EvalArgs),
    /// Measure speed and memory on this machine (and accuracy with --decide)
    ///
    /// Every combination of --model x --threads x --batch x --ctx runs in its own
    /// process: pp/tg throughput as llama-bench measures them, TTFT on real RAG prompts
    /// (cold and on a prefix hit), alarm-to-diagnosis latency and peak RSS (anonymous and
    /// file-backed). With --retrieval: the index at 10k passages instead.
    Bench(BenchArgs),
    /// Print diagnoses readably: pipe in `mosquitto_sub -v` output or diagnosis JSON lines
    ///
    /// Reads diagnosis JSON from stdin (or FILEs), one per line, or `topic payload` lines as
    /// `mosquitto_sub -v` prints them (a pretty-printed object may span lines), and prints each
    /// readably: equipment, code and alarm id, summary, probable causes with likelihood, numbered
    /// actions, cited manual sections, mode and timings. Status messages, rejections from
    /// {prefix}/error and alarms (`-t 'tidewatch/#'`) are shown one line each. A line that is not
    /// JSON, or a diagnosis that cannot be read, is reported on stderr with its line number and
    /// the rest are still shown; the exit status is then 1.
    Show(ShowArgs),
    /// Answer a diagnosis: the cause it named that was (or was not) the
    /// cause, or the cause in your own words; tidewatch keeps it as a site note
    ///
    /// Publishes on {prefix}/feedback/{equipment} through the config's broker, logged in as
    /// --username (an operator's login: never tidewatch's own) with the password in
    /// TIDEWATCH_MQTT_PASSWORD, then waits for tidewatch's answer: the site note it published on
    /// {prefix}/notes/{equipment}, or the reason it refused the feedback on {prefix}/error.
    /// --confirm and --reject count the probable causes as `tidewatch show` lists them; they read
    /// the diagnosis from state_dir, so run this on the board.
    Feedback(FeedbackArgs),
    /// Validate a config file, and open the index and load the model it names
    ///
    /// Checks every key, then that state_dir can be written (creating it, as
    /// the user this runs as), that the TLS files hold PEM, and opens the index
    /// and the examples and loads the model (seconds on the board; --offline
    /// skips all of it). Says `config FILE: ok` last, once every check passed;
    /// a failure names its key and exits 78.
    CheckConfig {
        /// Config file (TOML)
        #[arg(long, short)]
        config: PathBuf,
        /// Only check the file itself; do not open the model or the index
        #[arg(long)]
        offline: bool,
    },
    /// Manage the site notes: the crew's verdicts on diagnoses
    ///
    /// A note is the crew's word on one diagnosis: confirmed or rejected, the cause (one the
    /// diagnosis published, or the crew's own words), the remedy, who and when. Notes are kept
    /// in state_dir/notes/notes.jsonl, and the daemon uses those that count (not withdrawn) for
    /// the next alarms. Notes imported from another vessel stay marked as that vessel's.
    Notes {
        #[command(subcommand)]
        command: NotesCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum NotesCommand {
    /// List the notes: id, equipment, code, verdict, cause, by, date, vessel, withdrawn
    ///
    /// Vessel "-" is this vessel's own note. A withdrawn note is listed (with who withdrew
    /// it, and when) but no longer counts.
    List {
        /// Config file (TOML): the notes of its state_dir
        #[arg(long, short)]
        config: PathBuf,
        /// Only the notes that count (leave out withdrawn ones)
        #[arg(long)]
        counting: bool,
    },
    /// Write the notes as JSON lines, one note a line (withdrawn ones marked as such)
    #[command(after_help = "Share a vessel's notes with another:\n  \
tidewatch notes export --config /etc/tidewatch/tidewatch.toml --out nordic-star.jsonl\n\
and on the other vessel:\n  \
tidewatch notes import --config /etc/tidewatch/tidewatch.toml --vessel 'Nordic Star' nordic-star.jsonl")]
    Export {
        /// Config file (TOML): the notes of its state_dir
        #[arg(long, short)]
        config: PathBuf,
        /// Write to FILE (replaced whole) instead of stdout
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Only the notes that count (leave out withdrawn ones)
        #[arg(long)]
        counting: bool,
    },
    /// Add notes from JSON lines, as `export` writes them
    ///
    /// Every line is checked before any is added; a bad one is named by its line number and
    /// nothing is added. A note already here (same id) is skipped, so an import can be run
    /// again. A note that carries no vessel is the exporting vessel's own: give --vessel NAME to
    /// mark it as NAME's (its id becomes NAME:...), or --ours to restore this vessel's own notes
    /// from its export; without either, such a note is refused rather than silently taken as
    /// this vessel's. Notes that already name a vessel keep it.
    Import {
        /// Config file (TOML): the notes of its state_dir
        #[arg(long, short)]
        config: PathBuf,
        /// The vessel the notes come from (needed when a note names no vessel)
        #[arg(long, value_name = "NAME")]
        vessel: Option<String>,
        /// The notes are this vessel's own (a restore of its own export)
        #[arg(long, conflicts_with = "vessel")]
        ours: bool,
        /// JSON lines files ("-" is stdin)
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Withdraw a note: it stays listed, but the daemon stops using it within a second (it rereads the journal when it changes)
    Withdraw {
        /// Config file (TOML): the notes of its state_dir
        #[arg(long, short)]
        config: PathBuf,
        /// The note's id, as `tidewatch notes list` prints it
        id: String,
        /// Who withdraws it (a name or login, at most 64 bytes)
        #[arg(long, value_name = "NAME")]
        by: String,
    },
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Follow a live broker:\n  mosquitto_sub -v -t 'tidewatch/#' | tidewatch show\n\
One alarm without MQTT:\n  tidewatch diagnose --config FILE --alarm alarm.json | tidewatch show"
)]
pub struct ShowArgs {
    /// Files to read instead of stdin ("-" is stdin)
    pub files: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("cause").required(true).args(["confirm", "reject", "text"])),
    after_help = "Example:\n  TIDEWATCH_MQTT_PASSWORD=... tidewatch feedback a-1042 --confirm 2 \\\n    --remedy 'cleaned the cooler' --by 'J. Smith' --username operator \\\n    --config /etc/tidewatch/tidewatch.toml"
)]
pub struct FeedbackArgs {
    /// The alarm's id, as `tidewatch show` prints it
    pub alarm_id: String,
    /// Config file: the broker, topic_prefix and state_dir
    #[arg(long, short)]
    pub config: PathBuf,
    /// The Nth probable cause of the diagnosis (1 = the first listed) was the cause
    #[arg(long, value_name = "N", value_parser = usize_in(1, 64))]
    pub confirm: Option<usize>,
    /// The Nth probable cause was not the cause
    #[arg(long, value_name = "N", value_parser = usize_in(1, 64))]
    pub reject: Option<usize>,
    /// The cause in the crew's own words, when the diagnosis did not name it
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// What fixed it
    #[arg(long, value_name = "TEXT")]
    pub remedy: Option<String>,
    /// Who says so: a name or a login
    #[arg(long)]
    pub by: String,
    /// The alarm's equipment [default: the one tidewatch diagnosed the alarm id on]
    #[arg(long)]
    pub equipment: Option<String>,
    /// Broker login to publish as (an operator's); its password is read
    /// from TIDEWATCH_MQTT_PASSWORD [default: none, for a broker that takes
    /// anonymous clients]
    #[arg(long)]
    pub username: Option<String>,
    /// Seconds to wait for tidewatch's answer; 0 publishes and returns
    #[arg(long, default_value_t = 15, value_parser = usize_in(0, 3600))]
    pub wait: usize,
}

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// Config file (TOML); the model, index and [llm] settings to measure
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Labeled alarms, one JSON object per line [default: eval/alarms.jsonl
    /// beside the index, then the source tree's eval set]
    #[arg(long, value_name = "FILE")]
    pub cases: Option<PathBuf>,
    /// Retrieval only: no model
    #[arg(long)]
    pub retrieval: bool,
    /// Prompts only: token counts of every case's prompt (prefix, per-alarm
    /// suffix, passages kept); loads the model but generates nothing
    #[arg(long, conflicts_with = "retrieval")]
    pub prompts: bool,
    /// Index for --retrieval (default: the config's knowledge.index)
    #[arg(long, short)]
    pub index: Option<PathBuf>,
    /// Example alarms (the cases' format) that coverage also judges by, as
    /// the daemon does; a case they hold is judged without its own set (the
    /// digits of its id, as `plant-2304` is set 23) [default: the config's
    /// knowledge.examples, else the shipped examples/alarms.jsonl where the
    /// daemon finds it; never the eval set]
    #[arg(long, value_name = "FILE")]
    pub examples: Option<PathBuf>,
    /// Judge coverage by the manuals' words and retrieval's ranking alone,
    /// without example alarms
    #[arg(long, conflicts_with = "examples")]
    pub no_examples: bool,
    /// Only the first N cases
    #[arg(long, value_parser = usize_in(1, usize::MAX as u64))]
    pub limit: Option<usize>,
    /// Output style: schema (fixed JSON parts batched, values sampled) or
    /// grammar (the whole JSON sampled under a GBNF grammar; the reference)
    #[arg(long, default_value = "schema", value_parser = ["schema", "grammar"])]
    pub style: String,
    /// Print the report as JSON (default: a table)
    #[arg(long)]
    pub json: bool,
    /// Also write each case's published diagnosis to FILE, one JSON line
    /// per case ({"case": ..., "diagnosis": ...}), to compare two runs
    #[arg(long, value_name = "FILE", conflicts_with_all = ["retrieval", "prompts", "interleaved", "speculation", "answer", "tiers"])]
    pub diagnoses: Option<PathBuf>,
    /// Use this model instead of the config's llm.model
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Generation speed instead of accuracy: every 3rd case diagnosed with
    /// speculative decoding off, then on (the config's draft settings, or
    /// the defaults when llm.speculative is off), from the same cache
    #[arg(long, conflicts_with_all = ["retrieval", "prompts", "interleaved"])]
    pub speculation: bool,
    /// Prompt cache instead of accuracy: TTFT of N alarms cold, then the
    /// same alarms repeated with a new reading after 11 others
    #[arg(long, value_name = "N", value_parser = usize_in(1, 1000), conflicts_with_all = ["retrieval", "prompts"])]
    pub interleaved: Option<usize>,
    /// Prompt cache tiers instead of accuracy, side by side in one run, for
    /// the first N cases with a manual section (one per fault) that coverage
    /// takes for covered when raised under a plant code: cold (only
    /// the static prefix cached), the same alarm with a new reading after a
    /// restart and 20 other alarms (served by the disk tier), and the
    /// fault's first alarm under a plant code after `tidewatch warm` of
    /// their codes. Uncached prompt, fed and chosen tokens, TTFT and the A72
    /// projection per tier, against the tiers' targets. Runs in temporary
    /// state dirs, never the config's state_dir; needs
    /// llm.prompt_cache_disk_mib > 0
    #[arg(long, value_name = "N", value_parser = usize_in(1, 100), conflicts_with_all = ["retrieval", "prompts", "interleaved", "speculation", "answer"])]
    pub tiers: Option<usize>,
    /// Answer modes side by side in one run, each case through each mode
    /// in turn: model-chosen and fed tokens, generation time, TTFT,
    /// latency, cause keywords, grounding and validity per mode, and the
    /// A72 projection (e.g. --answer chosen,written)
    #[arg(long, value_delimiter = ',', value_parser = ["chosen", "written"], conflicts_with_all = ["retrieval", "prompts", "interleaved", "speculation"])]
    pub answer: Vec<String>,
    /// With --answer: where a chosen answer's summary comes from: the model,
    /// before the lists or after them, or composed from them with no model
    /// tokens (several: each is a mode of its own)
    #[arg(long, value_delimiter = ',', value_parser = ["first", "last", "composed"], requires = "answer")]
    pub summary: Vec<String>,
    /// With --answer: cap on the summary's tokens (default: llm.summary_tokens)
    #[arg(long, value_parser = clap::value_parser!(u32).range(8..=256), requires = "answer")]
    pub summary_tokens: Option<u32>,
    /// A vessel's history instead of accuracy (repeat for several files):
    /// each case's first alarm diagnosed and the crew's verdict on it
    /// noted, then each later occurrence diagnosed without notes and with
    /// the file's notes. Coverage right, the confirmed cause ranked first,
    /// the crew's cause offered, notes leaking onto other faults, latency
    /// and model steps, per writer and file. With --retrieval: every
    /// alarm answered from retrieval alone, as in an alarm storm (no model
    /// step), which measures what the notes do to coverage and ranking
    #[arg(long, value_name = "FILE", requires = "config", conflicts_with_all = ["prompts", "interleaved", "speculation", "answer", "tiers", "diagnoses"])]
    pub notes: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Config file; its [llm] values are the defaults for every list below
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Models to compare (default: the config's llm.model)
    #[arg(long, num_args = 1.., value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// Thread counts, e.g. 2,4 (1..=64, as llm.threads)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: Vec<u32>,
    /// Batch sizes (n_batch; n_ubatch is min(batch, 512) as in llama-bench; 16..=8192, as llm.batch)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(16..=8192))]
    pub batch: Vec<u32>,
    /// Context sizes (512..=32768, as llm.ctx)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(512..=32768))]
    pub ctx: Vec<u32>,
    /// KV cache types, e.g. f16,q8_0 (as llm.kv_type): state size, speed and,
    /// with --decide, accuracy of each
    #[arg(long, value_delimiter = ',', value_parser = ["f16", "q8_0"])]
    pub kv_type: Vec<String>,
    /// Prompt tokens per throughput run (llama-bench -p)
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=32768))]
    pub pp: u32,
    /// Generated tokens per throughput run (llama-bench -n)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tg: u32,
    /// Timed repetitions after one warm-up (llama-bench -r)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Eval alarms used as real RAG prompts for TTFT and latency (0 to skip)
    #[arg(long, default_value_t = 3, value_parser = usize_in(0, 10_000))]
    pub rag_cases: usize,
    /// Also diagnose each RAG prompt with speculative decoding off, then on
    /// (the config's draft settings, or the defaults when llm.speculative is
    /// off), and report generation time, acceptance and tokens/s side by side
    #[arg(long)]
    pub speculation: bool,
    /// Labeled alarms for RAG prompts and --decide, one JSON object per line
    /// [default: eval/alarms.jsonl beside the config's index, then the
    /// installed or source tree's eval set]
    #[arg(long, value_name = "FILE")]
    pub cases: Option<PathBuf>,
    /// Device memory, e.g. 4G
    #[arg(long, default_value = "4G")]
    pub memory_budget: String,
    /// Memory kept for the OS, broker and page cache
    #[arg(long, default_value = "1G")]
    pub os_reserve: String,
    /// Also measure accuracy per model and recommend a configuration
    #[arg(long)]
    pub decide: bool,
    /// Eval alarms per model for --decide
    #[arg(long, default_value_t = 12, value_parser = usize_in(1, 10_000))]
    pub eval_cases: usize,
    /// Accuracy margin for --decide: keep configurations within this of the best (0..=1)
    #[arg(long, default_value_t = 0.05, value_parser = fraction, allow_negative_numbers = true)]
    pub margin: f64,
    /// Fail (exit 1) if a daemon job's wall time exceeds llama.cpp's own
    /// decode time (llama_perf) by more than this many percent: the CI
    /// regression check on tidewatch's own per-token work
    #[arg(long, value_name = "PERCENT", value_parser = percent, allow_negative_numbers = true)]
    pub max_overhead: Option<f64>,
    /// Retrieval benchmark instead of the model
    #[arg(long)]
    pub retrieval: bool,
    /// Passages in the generated index for --retrieval
    #[arg(long, default_value_t = 10_000, value_parser = usize_in(1, 1_000_000))]
    pub passages: usize,
    /// Folder of manuals for --retrieval [default: the source tree's
    /// knowledge/ beside this binary's build]
    #[arg(long, value_name = "DIR")]
    pub knowledge: Option<PathBuf>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Also write the results as JSON to this file (with the table printed)
    #[arg(long, value_name = "FILE")]
    pub json_to: Option<PathBuf>,
    /// Internal: run one combination (JSON) and print its result
    #[arg(long, hide = true)]
    pub worker: Option<String>,
}

/// A count within `lo..=hi`; clap names the option in the error.
fn usize_in(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(lo..=hi)
}

/// A finite number in 0..=1.
fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be 0..=1, got {s}"))
    }
}

/// A finite percentage, 0 or more.
fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!(
            "must be a finite number of percent, 0 or more, got {s}"
        ))
    }
}

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Check the manuals, then chunk them and write the index file
    ///
    /// Every problem in a manual is printed as `file:line: what is wrong, and
    /// what to write instead` (docs/manuals.md is the format). An error stops
    /// the build before anything is written; so does a warning with --strict.
    Build {
        /// Folder of manuals (*.md with front matter; README.md is skipped)
        #[arg(long, short)]
        knowledge: PathBuf,
        /// Output index file (replaced whole, so a running daemon may reload it)
        #[arg(long, short)]
        out: PathBuf,
        /// Fail on warnings too
        #[arg(long)]
        strict: bool,
    },
    /// Check the manuals in DIR as `build` does, and write nothing
    Check {
        /// Folder of manuals (*.md with front matter; README.md is skipped)
        dir: PathBuf,
        /// Fail on warnings too
        #[arg(long)]
        strict: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("tidewatch").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    // `--config` had no help text in diagnose, check-config and eval.
    #[test]
    fn every_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(
            &<Cli as clap::CommandFactory>::command(),
            "tidewatch",
            &mut missing,
        );
        assert!(missing.is_empty(), "options without help: {missing:?}");
    }

    // `bench --batch 0` panicked in `chunks(0)`; every number
    // bench and eval take is checked where it is parsed, naming the option.
    #[test]
    fn invalid_numbers_are_errors_naming_the_option() {
        let bad: &[(&[&str], &str)] = &[
            (&["bench", "--batch", "0"], "--batch"),
            (&["bench", "--batch", "512,0"], "--batch"),
            (&["bench", "--threads", "0"], "--threads"),
            (&["bench", "--threads", "65"], "--threads"),
            (&["bench", "--ctx", "0"], "--ctx"),
            (&["bench", "--pp", "0"], "--pp"),
            (&["bench", "--tg", "0"], "--tg"),
            (&["bench", "--reps", "0"], "--reps"),
            (&["bench", "--eval-cases", "0"], "--eval-cases"),
            (&["bench", "--passages", "0"], "--passages"),
            (&["bench", "--margin", "-0.1"], "--margin"),
            (&["bench", "--margin", "NaN"], "--margin"),
            (&["bench", "--max-overhead", "-1"], "--max-overhead"),
            (&["eval", "--cases", "c.jsonl", "--limit", "0"], "--limit"),
            (&["eval", "--limit", "0"], "--limit"),
        ];
        for (args, option) in bad {
            match parse(args) {
                Ok(_) => panic!("{args:?} was accepted"),
                Err(e) => assert!(e.contains(option), "{args:?}: {e}"),
            }
        }
        assert!(parse(&[
            "bench",
            "--batch",
            "16,8192",
            "--ctx",
            "2048",
            "--rag-cases",
            "0"
        ])
        .is_ok());
        assert!(parse(&["bench", "--margin", "0", "--max-overhead", "3"]).is_ok());
    }
}
