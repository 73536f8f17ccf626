//! Benchmarks: the speed and memory dimensions, measured on the device, and
//! the decision that combines them with accuracy.
//!
//! Owns `tidewatch bench`: retrieval (index build/open/query at 10k passages),
//! llama-bench-style pp/tg throughput, TTFT on real RAG prompts (cold and on a
//! prefix hit), alarm-to-diagnosis latency, and peak RSS split into anonymous
//! and file-backed memory. Each model configuration runs in its own child
//! process so peak memory is that configuration's alone.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::measure::eval::Case;
use crate::measure::stats::{self, mean_sd, percentile, MeanSd};
use crate::retrieval::{index, knowledge, Index};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Index(#[from] crate::retrieval::IndexError),
    #[error(transparent)]
    Eval(#[from] crate::measure::eval::EvalError),
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    #[error("bench worker for {what} failed: {reason}")]
    Worker { what: String, reason: String },
    // The config error is the source, printed after this by the error chain.
    #[error("{combo}: the daemon could not run with it")]
    Unconfigurable {
        combo: String,
        source: crate::config::ConfigError,
    },
    #[error("{0}")]
    Setup(String),
}

/// Retrieval figures at a given index size.
#[derive(Debug, Serialize)]
pub struct RetrievalBench {
    pub passages: u32,
    pub build_ms: f64,
    pub file_bytes: usize,
    pub raw_text_bytes: usize,
    pub bytes_per_passage: f64,
    pub size_over_raw: f64,
    pub open_ms: f64,
    pub queries: usize,
    pub query_p50_us: f64,
    pub query_p99_us: f64,
}

/// Builds an index of about `target` passages by varying the real knowledge
/// base (new ids, codes and sentence order per copy), then times it.
pub fn retrieval(
    knowledge_dir: &Path,
    cases: &[Case],
    target: usize,
    work: &Path,
) -> Result<RetrievalBench, BenchError> {
    let base = knowledge::load_dir(knowledge_dir)?;
    let per_round: usize = base
        .iter()
        .map(|d| knowledge::chunk(d).len())
        .sum::<usize>()
        .max(1);
    let rounds = target.div_ceil(per_round);
    let mut docs = Vec::with_capacity(base.len() * rounds);
    let mut raw = 0usize;
    for r in 0..rounds {
        for d in &base {
            let mut d = d.clone();
            if r > 0 {
                d.id = format!("{}-v{r}", d.id);
                d.codes = d.codes.iter().map(|c| format!("{c}-{r}")).collect();
                for (h, t) in &mut d.sections {
                    *h = format!("{h} v{r}");
                    let mut parts: Vec<&str> = t.split_inclusive(['.', '。', ';', '；']).collect();
                    let n = parts.len().max(1);
                    parts.rotate_left(r % n);
                    *t = format!("{} unit{r}", parts.concat());
                }
            }
            raw += d
                .sections
                .iter()
                .map(|(h, t)| h.len() + t.len())
                .sum::<usize>();
            docs.push(d);
        }
    }
    let t = Instant::now();
    let bytes = index::build(&docs)?;
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    std::fs::create_dir_all(work).map_err(|e| BenchError::Setup(e.to_string()))?;
    let path = work.join("bench.twx");
    crate::retrieval::write_index(&path, &bytes)?;
    // Best of several opens: the first also pays for reading the file into
    // the page cache, which a running daemon does once.
    let mut open_ms = f64::MAX;
    let mut idx = None;
    for _ in 0..5 {
        let t = Instant::now();
        let i = Index::open(&path)?;
        open_ms = open_ms.min(t.elapsed().as_secs_f64() * 1e3);
        idx = Some(i);
    }
    let idx = idx.ok_or_else(|| BenchError::Setup("index did not open".into()))?;
    let mut lat = Vec::new();
    for round in 0..(1000 / cases.len().max(1)).max(1) {
        for c in cases {
            let q = crate::retrieval::Query::of_alarm(&c.alarm);
            let t = Instant::now();
            let hits = idx.search(&q, 3)?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box((hits, round));
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok(RetrievalBench {
        passages: idx.n_passages(),
        build_ms,
        file_bytes: bytes.len(),
        raw_text_bytes: raw,
        bytes_per_passage: bytes.len() as f64 / f64::from(idx.n_passages().max(1)),
        size_over_raw: bytes.len() as f64 / raw.max(1) as f64,
        open_ms,
        queries: lat.len(),
        query_p50_us: percentile(&lat, 0.5),
        query_p99_us: percentile(&lat, 0.99),
    })
}

/// One model configuration to measure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Combo {
    pub model: PathBuf,
    pub threads: u32,
    pub batch: u32,
    pub ctx: u32,
    /// The KV cache's element type, as `[llm] kv_type`: "f16" or "q8_0".
    #[serde(default = "f16")]
    pub kv_type: String,
    pub pp: u32,
    pub tg: u32,
    pub reps: u32,
    /// RAG prompts for TTFT and latency: how many eval cases to run.
    pub rag_cases: usize,
    /// Diagnose the RAG prompts with speculation off and on as well.
    #[serde(default)]
    pub speculation: bool,
}

/// What one configuration measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComboResult {
    pub model: String,
    pub model_bytes: u64,
    pub params: u64,
    pub threads: u32,
    pub batch: u32,
    pub ctx: u32,
    #[serde(default = "f16")]
    pub kv_type: String,
    pub load_ms: f64,
    pub prompt_tps: f64,
    pub prompt_tps_sd: f64,
    pub gen_tps: f64,
    pub gen_tps_sd: f64,
    /// Medians over the probes that produced a first token; None if none did.
    pub ttft_cold_ms: Option<f64>,
    pub ttft_prefix_ms: Option<f64>,
    /// TTFT probes (cold and prefix hit) that produced no first token.
    pub ttft_failed: usize,
    /// Mean alarm-to-diagnosis time of the prefix-hit jobs that answered;
    /// None without RAG prompts or if every one failed.
    pub alarm_latency_ms: Option<f64>,
    /// Mean answer tokens per RAG diagnosis the model chose (sampled, or a
    /// branch point of a chosen item), and the ones fed to it in batches
    /// (JSON skeleton, the rest of a chosen item); None without RAG prompts.
    #[serde(default)]
    pub chosen_tokens: Option<f64>,
    #[serde(default)]
    pub fed_tokens: Option<f64>,
    /// Wall time of the daemon's jobs over llama.cpp's own decode time, minus
    /// one; None when no job was timed by llama_perf.
    pub gen_overhead: Option<f64>,
    pub peak_rss_anon_mib: f64,
    pub peak_rss_file_mib: f64,
    pub peak_rss_mib: f64,
    pub fits_budget: bool,
    /// Filled in by `--decide`.
    #[serde(default)]
    pub accuracy: Option<f64>,
    /// `--speculation`: the RAG prompts with lookup off and on.
    #[serde(default)]
    pub speculation: Option<crate::measure::speculation::SpecReport>,
}

/// Samples RssAnon and RssFile of this process every 20 ms and keeps the peaks.
struct RssSampler {
    stop: Arc<AtomicBool>,
    anon: Arc<AtomicU64>,
    file: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let anon = Arc::new(AtomicU64::new(0));
        let file = Arc::new(AtomicU64::new(0));
        let (s, a, f) = (stop.clone(), anon.clone(), file.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let now = stats::rss();
                a.fetch_max(now.anon_kib, Ordering::Relaxed);
                f.fetch_max(now.file_kib, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Self {
            stop,
            anon,
            file,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> (f64, f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let now = stats::rss();
        let a = self.anon.load(Ordering::Relaxed).max(now.anon_kib);
        let f = self.file.load(Ordering::Relaxed).max(now.file_kib);
        (stats::mib(a), stats::mib(f), stats::mib(now.peak_kib))
    }
}

/// Measures pp and tg the way llama-bench does: random tokens, a warm-up run,
/// then `reps` timed runs with an empty cache each time.
fn throughput(
    model: &llama_cpp_2::model::LlamaModel,
    c: &Combo,
) -> Result<(MeanSd, MeanSd), BenchError> {
    use llama_cpp_2::context::params::LlamaContextParams;
    use llama_cpp_2::llama_batch::LlamaBatch;
    use llama_cpp_2::token::LlamaToken;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(c.ctx.max(c.pp + c.tg + 16)))
        .with_n_batch(c.batch)
        .with_n_ubatch(c.batch.min(512))
        .with_n_threads(c.threads as i32)
        .with_n_threads_batch(c.threads as i32);
    // As the daemon's slots set it (llm::thread): llama.cpp turns on flash
    // attention for a quantized V cache where the CPU build supports it.
    let params = if c.kv_type == "q8_0" {
        use llama_cpp_2::context::params::KvCacheType;
        params
            .with_type_k(KvCacheType::Q8_0)
            .with_type_v(KvCacheType::Q8_0)
    } else {
        params
    };
    let mut ctx = model
        .new_context(crate::llm::backend(), params)
        .map_err(|e| BenchError::Setup(format!("context: {e}")))?;
    let n_vocab = model.n_vocab().max(2);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        LlamaToken((seed % n_vocab as u64) as i32)
    };
    let mut batch = LlamaBatch::new(c.batch.max(1) as usize, 1);
    let err = |e: String| BenchError::Setup(format!("decode: {e}"));
    let mut pp_runs = Vec::new();
    for rep in 0..=c.reps {
        ctx.clear_kv_cache();
        let toks: Vec<LlamaToken> = (0..c.pp).map(|_| rnd()).collect();
        let t = Instant::now();
        for (ci, chunk) in toks.chunks(c.batch as usize).enumerate() {
            batch.clear();
            for (j, tk) in chunk.iter().enumerate() {
                let pos = (ci * c.batch as usize + j) as i32;
                let last = ci * c.batch as usize + j + 1 == toks.len();
                batch
                    .add(*tk, pos, &[0], last)
                    .map_err(|e| err(e.to_string()))?;
            }
            ctx.decode(&mut batch).map_err(|e| err(e.to_string()))?;
        }
        if rep > 0 {
            pp_runs.push(f64::from(c.pp) / t.elapsed().as_secs_f64());
        }
    }
    let mut tg_runs = Vec::new();
    for rep in 0..=c.reps {
        ctx.clear_kv_cache();
        let t = Instant::now();
        for i in 0..c.tg {
            batch.clear();
            batch
                .add(rnd(), i as i32, &[0], true)
                .map_err(|e| err(e.to_string()))?;
            ctx.decode(&mut batch).map_err(|e| err(e.to_string()))?;
        }
        if rep > 0 {
            tg_runs.push(f64::from(c.tg) / t.elapsed().as_secs_f64());
        }
    }
    Ok((mean_sd(&pp_runs), mean_sd(&tg_runs)))
}

/// Runs one configuration in this process: the `--worker` child that
/// `commands::bench` starts for each combination.
pub async fn worker(
    cfg: &Config,
    c: &Combo,
    cases: &[Case],
    budget_mib: f64,
) -> Result<ComboResult, BenchError> {
    let rss = RssSampler::start();
    let mut run = cfg.clone();
    run.llm.model = c.model.clone();
    run.llm.threads = c.threads;
    run.llm.batch = c.batch;
    run.llm.ctx = c.ctx;
    run.llm.kv_type = kv_type(&c.kv_type);
    run.llm.slots = 1;
    // Every prompt is measured from a known cache: nothing saved to resume.
    run.llm.prompt_cache_mib = 0;
    let hard = run.watchdog.hard_timeout;
    let t = Instant::now();
    // The daemon's own loader (index, model, one slot), so what is measured
    // is what `run` starts; cold, without the saved prefix, so TTFT compares.
    let (pipeline, mut slots) = crate::load::pipeline(run, false).await?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let model = pipeline.model.model.clone();
    let c2 = c.clone();
    let measured = tokio::task::spawn_blocking(move || throughput(&model, &c2))
        .await
        .map_err(|e| BenchError::Setup(e.to_string()));
    let ((pp, pp_sd), (tg, tg_sd)) = match measured {
        Ok(Ok(m)) => m,
        Ok(Err(e)) | Err(e) => {
            crate::load::stop_slots(slots, hard).await;
            return Err(e);
        }
    };
    let info = pipeline.model.info.clone();
    let probed = if c.rag_cases > 0 && !cases.is_empty() {
        probe_cases(&pipeline, &mut slots[0], c, cases).await
    } else {
        Probed::default()
    };
    crate::load::stop_slots(slots, hard).await;
    let (anon, file, hwm) = rss.finish();
    let peak = hwm.max(anon + file);
    Ok(ComboResult {
        model: info.name,
        model_bytes: info.file_bytes,
        params: info.params,
        threads: c.threads,
        batch: c.batch,
        ctx: c.ctx,
        kv_type: c.kv_type.clone(),
        load_ms,
        prompt_tps: pp,
        prompt_tps_sd: pp_sd,
        gen_tps: tg,
        gen_tps_sd: tg_sd,
        ttft_cold_ms: probed.ttft.ttft_cold_ms,
        ttft_prefix_ms: probed.ttft.ttft_prefix_ms_p50,
        ttft_failed: probed.ttft.ttft_cold_failed + probed.ttft.ttft_prefix_failed,
        alarm_latency_ms: probed.latency,
        chosen_tokens: probed.split.map(|s| s.0),
        fed_tokens: probed.split.map(|s| s.1),
        gen_overhead: probed.overhead,
        peak_rss_anon_mib: anon,
        peak_rss_file_mib: file,
        peak_rss_mib: peak,
        fits_budget: peak <= budget_mib,
        accuracy: None,
        speculation: probed.spec,
    })
}

/// What the per-case probes of one configuration measured.
#[derive(Default)]
struct Probed {
    ttft: crate::measure::ttft::TtftStats,
    latency: Option<f64>,
    /// Mean model-chosen and fed tokens per diagnosis.
    split: Option<(f64, f64)>,
    overhead: Option<f64>,
    spec: Option<crate::measure::speculation::SpecReport>,
}

/// Diagnoses the first `c.rag_cases` cases on `slot`: TTFT cold and with the
/// static prefix, latency, the token split, the overhead over llama.cpp's own
/// decode time and, with `c.speculation`, lookup decoding off and on.
async fn probe_cases(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    c: &Combo,
    cases: &[Case],
) -> Probed {
    let prefix_tokens = pipeline.model.static_prefix_tokens();
    let (mut probes, mut lats, mut wall, mut llama) = (vec![], vec![], 0.0, 0.0);
    let (mut chosen, mut fed) = (0.0, 0.0);
    // Each prompt twice, as `eval` probes it: TTFT from an empty cache,
    // then the whole diagnosis with only the static prefix cached (as
    // every daemon job starts), so the two compare.
    let style = crate::llm::Style::Schema;
    for case in cases.iter().take(c.rag_cases.max(1)) {
        slot.keep_cache(0, false).await;
        let cold = crate::measure::eval::probe_ttft(pipeline, slot, &case.alarm, style).await;
        slot.keep_cache(prefix_tokens, false).await;
        let t = Instant::now();
        let tr = pipeline.diagnose_traced(slot, &case.alarm, style).await;
        if let Some(o) = &tr.first {
            lats.push(t.elapsed().as_secs_f64() * 1e3);
            chosen += f64::from(o.generated_tokens);
            fed += f64::from(o.fed_tokens);
            wall += o.total_ms;
            llama += o.llama_decode_ms;
        }
        probes.push(crate::measure::ttft::CaseProbes {
            cold,
            prefix: crate::measure::ttft::Probe::of(tr.first.as_ref().map(|o| o.ttft_ms)),
            repeat: crate::measure::ttft::Probe::Skipped,
        });
    }
    let n = lats.len() as f64;
    let spec = if c.speculation {
        let lookup = pipeline
            .cfg
            .llm
            .lookup
            .unwrap_or(crate::measure::speculation::DEFAULT_LOOKUP);
        let picked = &cases[..c.rag_cases.min(cases.len())];
        Some(crate::measure::speculation::run_spec(pipeline, slot, picked, 1, lookup, false).await)
    } else {
        None
    };
    Probed {
        ttft: crate::measure::ttft::stats(&probes),
        latency: stats::mean(&lats),
        split: (!lats.is_empty()).then_some((chosen / n, fed / n)),
        overhead: (llama > 0.0).then(|| wall / llama - 1.0),
        spec,
    }
}

/// Refuses a combination the daemon could not be configured with: the
/// config file with this combination's `[llm]` values must pass the daemon's
/// own validation, so `--decide` can only recommend what `run` accepts.
pub fn check_configurable(cfg_text: &str, cfg_path: &Path, c: &Combo) -> Result<(), BenchError> {
    let setup = |e: String| BenchError::Setup(format!("config {}: {e}", cfg_path.display()));
    let mut doc: toml::Table = cfg_text.parse().map_err(|e| setup(format!("{e}")))?;
    let llm = doc
        .entry("llm")
        .or_insert_with(|| toml::Value::Table(Default::default()));
    let llm = llm
        .as_table_mut()
        .ok_or_else(|| setup("[llm] is not a table".into()))?;
    llm.insert(
        "model".into(),
        toml::Value::String(c.model.display().to_string()),
    );
    llm.insert("threads".into(), toml::Value::Integer(c.threads.into()));
    llm.insert("batch".into(), toml::Value::Integer(c.batch.into()));
    llm.insert("ctx".into(), toml::Value::Integer(c.ctx.into()));
    llm.insert("kv_type".into(), toml::Value::String(c.kv_type.clone()));
    let text = toml::to_string(&doc).map_err(|e| setup(e.to_string()))?;
    crate::config::parse(&text, cfg_path)
        .map(drop)
        .map_err(|source| BenchError::Unconfigurable {
            combo: format!(
                "--threads {} --batch {} --ctx {} --kv-type {}",
                c.threads, c.batch, c.ctx, c.kv_type
            ),
            source,
        })
}

/// Parses "4G", "3500M", "4096" (MiB) into MiB.
pub fn parse_mib(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'G' | 'g' => (&s[..s.len() - 1], 1024.0),
        'M' | 'm' => (&s[..s.len() - 1], 1.0),
        _ => (s, 1.0),
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0)
        .map(|v| v * mul)
}

/// The recommendation: among configurations that fit the memory budget and
/// whose model is within `margin` of the best accuracy, the one with the
/// lowest alarm-to-diagnosis latency (generation speed breaks ties, and ranks
/// alone when no latency was measured). It names only settings the daemon
/// reads from its config.
#[derive(Debug, Serialize)]
pub struct Decision {
    pub chosen: Option<ComboResult>,
    pub reasons: Vec<String>,
}

pub fn decide(results: &[ComboResult], margin: f64) -> Decision {
    let mut reasons = Vec::new();
    let best_acc = results
        .iter()
        .filter_map(|r| r.accuracy)
        .fold(f64::NAN, f64::max);
    // When any configuration measured its latency, one that did not (every
    // probe failed) cannot be ranked against it.
    let latency_measured = results.iter().any(|r| r.alarm_latency_ms.is_some());
    let mut ok: Vec<&ComboResult> = Vec::new();
    for r in results {
        let tag = format!(
            "{} threads={} batch={} ctx={} kv={}",
            r.model, r.threads, r.batch, r.ctx, r.kv_type
        );
        if !r.fits_budget {
            reasons.push(format!(
                "reject {tag}: peak RSS {:.0} MiB exceeds the memory budget",
                r.peak_rss_mib
            ));
            continue;
        }
        if latency_measured && r.alarm_latency_ms.is_none() {
            reasons.push(format!(
                "reject {tag}: no alarm latency measured ({} TTFT probes failed)",
                r.ttft_failed
            ));
            continue;
        }
        match r.accuracy {
            Some(a) if best_acc.is_finite() && a + margin < best_acc => {
                reasons.push(format!(
                    "reject {tag}: accuracy {a:.2} is more than {margin:.2} below the best {best_acc:.2}"
                ));
                continue;
            }
            _ => {}
        }
        ok.push(r);
    }
    ok.sort_by(|a, b| {
        let lat = |r: &ComboResult| r.alarm_latency_ms.unwrap_or(0.0);
        lat(a)
            .total_cmp(&lat(b))
            .then(b.gen_tps.total_cmp(&a.gen_tps))
    });
    let chosen = ok.first().map(|r| (*r).clone());
    if let Some(c) = &chosen {
        reasons.push(format!(
            "choose {} threads={} batch={} ctx={}: fastest that fits ({}{:.1} tok/s generation, {:.1} tok/s prompt, peak {:.0} MiB{})",
            c.model,
            c.threads,
            c.batch,
            c.ctx,
            c.alarm_latency_ms
                .map(|l| format!("{l:.0} ms per alarm, "))
                .unwrap_or_default(),
            c.gen_tps,
            c.prompt_tps,
            c.peak_rss_mib,
            c.accuracy.map(|a| format!(", accuracy {a:.2}")).unwrap_or_default()
        ));
    } else {
        reasons.push("no configuration fits the memory budget and the accuracy margin".into());
    }
    Decision { chosen, reasons }
}

fn f16() -> String {
    "f16".into()
}

fn kv_type(name: &str) -> crate::config::KvType {
    match name {
        "q8_0" => crate::config::KvType::Q8_0,
        _ => crate::config::KvType::F16,
    }
}

/// A table in llama-bench's style.
pub fn table(results: &[ComboResult]) -> String {
    let mut s = String::from(
        "| model | size | params | threads | batch | ctx | kv | pp t/s | tg t/s | TTFT cold ms | TTFT prefix ms | TTFT failed | alarm ms | chosen / fed tokens | RSS anon MiB | RSS file MiB | fits | acc |\n|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
    );
    // A measurement that did not happen or failed is "-", never 0.
    let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.0}"));
    for r in results {
        s.push_str(&format!(
            "| {} | {:.0} MiB | {:.2} B | {} | {} | {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} |\n",
            r.model,
            r.model_bytes as f64 / 1048576.0,
            r.params as f64 / 1e9,
            r.threads,
            r.batch,
            r.ctx,
            r.kv_type,
            r.prompt_tps,
            r.prompt_tps_sd,
            r.gen_tps,
            r.gen_tps_sd,
            ms(r.ttft_cold_ms),
            ms(r.ttft_prefix_ms),
            r.ttft_failed,
            ms(r.alarm_latency_ms),
            match (r.chosen_tokens, r.fed_tokens) {
                (Some(c), Some(f)) => format!("{c:.0} / {f:.0}"),
                _ => "-".into(),
            },
            r.peak_rss_anon_mib,
            r.peak_rss_file_mib,
            if r.fits_budget { "yes" } else { "no" },
            r.accuracy.map(|a| format!("{a:.2}")).unwrap_or_else(|| "-".into()),
        ));
    }
    if results.iter().any(|r| r.speculation.is_some()) {
        s.push_str(
            "\nSpeculative decoding (the RAG prompts, lookup off then on, medians):\n\n| model | threads | batch | cases | gen ms off | gen ms lookup | lookup/off | acceptance | tok/s off | tok/s lookup | identical | differ: numerics / other |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for r in results {
            let Some(p) = &r.speculation else { continue };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {} | {} / {} |\n",
                r.model,
                r.threads,
                r.batch,
                p.cases,
                p.gen_ms_off_p50,
                p.gen_ms_on_p50,
                p.gen_on_over_off_p50,
                p.acceptance_rate,
                p.tokens_per_s_off_p50,
                p.tokens_per_s_on_p50,
                p.identical,
                p.differ_by_numerics,
                p.differ_otherwise,
            ));
        }
    }
    s
}

/// Why a result fails the overhead check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OverheadFault {
    /// No job was timed by llama_perf: a check that cannot fail must not pass.
    Unmeasured,
    /// The daemon's jobs took this much longer than llama.cpp's decode time.
    Over(f64),
    /// llama_perf counted this much more than the jobs' wall time, which
    /// only happens when its timing leaks in from outside the job.
    Under(f64),
}

/// The first result that fails the overhead check, and why. An overhead a
/// hair below zero is a measured "nothing added" (clock granularity), so
/// only a shortfall as large as the allowed overhead counts as broken.
pub fn over_overhead(
    results: &[ComboResult],
    max_percent: f64,
) -> Option<(&ComboResult, OverheadFault)> {
    results.iter().find_map(|r| {
        let fault = match r.gen_overhead {
            None => OverheadFault::Unmeasured,
            Some(o) if o * 100.0 > max_percent => OverheadFault::Over(o),
            Some(o) if -o * 100.0 > max_percent => OverheadFault::Under(o),
            Some(_) => return None,
        };
        Some((r, fault))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(model: &str, lat: f64, acc: f64, fits: bool) -> ComboResult {
        ComboResult {
            model: model.into(),
            model_bytes: 0,
            params: 0,
            threads: 2,
            batch: 512,
            ctx: 2048,
            kv_type: f16(),
            load_ms: 0.0,
            prompt_tps: 10.0,
            prompt_tps_sd: 0.0,
            gen_tps: 10.0,
            gen_tps_sd: 0.0,
            ttft_cold_ms: None,
            ttft_prefix_ms: None,
            ttft_failed: 0,
            alarm_latency_ms: (lat > 0.0).then_some(lat),
            chosen_tokens: None,
            fed_tokens: None,
            gen_overhead: None,
            peak_rss_anon_mib: 0.0,
            peak_rss_file_mib: 0.0,
            peak_rss_mib: 100.0,
            fits_budget: fits,
            accuracy: Some(acc),
            speculation: None,
        }
    }

    #[test]
    fn the_table_shows_speculation_side_by_side_only_when_measured() {
        let plain = table(&[r("a", 100.0, 0.5, true)]);
        assert!(!plain.contains("Speculative decoding"));
        let mut m = r("a", 100.0, 0.5, true);
        m.speculation = Some(crate::measure::speculation::SpecReport {
            cases: 3,
            gen_ms_off_p50: 8200.0,
            gen_ms_on_p50: 8759.0,
            gen_on_over_off_p50: 1.1,
            acceptance_rate: 0.63,
            tokens_per_s_off_p50: 18.8,
            tokens_per_s_on_p50: 17.6,
            identical: 2,
            differ_by_numerics: 1,
            ..Default::default()
        });
        let t = table(&[m]);
        assert!(
            t.contains("| a | 2 | 512 | 3 | 8200 | 8759 | 1.10 | 0.63 | 18.8 | 17.6 | 2 | 1 / 0 |"),
            "{t}"
        );
    }

    #[test]
    fn decision_takes_fastest_that_fits_within_accuracy_margin() {
        let rs = vec![
            r("big", 900.0, 0.90, false),
            r("mid", 500.0, 0.86, true),
            r("tiny", 100.0, 0.40, true),
        ];
        let d = decide(&rs, 0.05);
        // big does not fit; tiny is fast but far below the best accuracy (0.90).
        assert_eq!(d.chosen.unwrap().model, "mid");
        assert!(d.reasons.iter().any(|x| x.starts_with("reject big")));
        assert!(d.reasons.iter().any(|x| x.starts_with("reject tiny")));
    }

    #[test]
    fn overhead_check_flags_slow_jobs_and_unmeasured_ones() {
        let with = |o: Option<f64>| ComboResult {
            gen_overhead: o,
            ..r("m", 1.0, 1.0, true)
        };
        assert!(over_overhead(&[with(Some(0.005)), with(Some(0.029))], 3.0).is_none());
        assert_eq!(
            over_overhead(&[with(Some(0.005)), with(Some(0.031))], 3.0).map(|(_, f)| f),
            Some(OverheadFault::Over(0.031))
        );
        assert_eq!(
            over_overhead(&[with(None)], 3.0).map(|(_, f)| f),
            Some(OverheadFault::Unmeasured)
        );
    }

    // The project's CI machine measured -0.0 % (the daemon adds nothing
    // llama_perf does not see) and the old check, reading every overhead
    // <= 0 as "unmeasured", failed the run.
    #[test]
    fn a_measured_overhead_of_zero_or_a_hair_below_passes() {
        let with = |o: Option<f64>| ComboResult {
            gen_overhead: o,
            ..r("m", 1.0, 1.0, true)
        };
        assert!(over_overhead(&[with(Some(-0.0004))], 3.0).is_none());
        assert!(over_overhead(&[with(Some(0.0))], 3.0).is_none());
        // llama_perf counting far more than the jobs' wall time is its
        // timing leaking across jobs: the figure is wrong, not fast.
        assert_eq!(
            over_overhead(&[with(Some(-0.2))], 3.0).map(|(_, f)| f),
            Some(OverheadFault::Under(-0.2))
        );
    }

    // The daemon has no KV-type key, so a recommendation
    // must not name one.
    #[test]
    fn the_recommendation_names_only_settings_the_daemon_reads() {
        let d = decide(&[r("mid", 500.0, 0.86, true)], 0.05);
        let chose = d.reasons.last().unwrap();
        assert!(chose.starts_with("choose mid"), "{chose}");
        assert!(!chose.contains("kv"), "{chose}");
    }

    // A configuration whose every latency probe failed has
    // no latency; it must not be ranked as if it had a fast one.
    #[test]
    fn a_configuration_without_a_measured_latency_is_not_chosen() {
        let failed = ComboResult {
            gen_tps: 1e6,
            ttft_failed: 6,
            ..r("failed", 0.0, 0.90, true)
        };
        let d = decide(&[failed, r("mid", 500.0, 0.90, true)], 0.05);
        assert_eq!(d.chosen.unwrap().model, "mid");
        assert!(d.reasons.iter().any(|x| x.starts_with("reject failed")));
    }

    fn combo(threads: u32, batch: u32, ctx: u32) -> Combo {
        Combo {
            model: "other.gguf".into(),
            threads,
            batch,
            ctx,
            kv_type: f16(),
            pp: 512,
            tg: 64,
            reps: 1,
            rag_cases: 0,
            speculation: false,
        }
    }

    const CFG: &str = "state_dir = \"/tmp/tw\"\n[mqtt]\nhost = \"127.0.0.1\"\nport = 1883\n\
        topic_prefix = \"tidewatch\"\n[knowledge]\nindex = \"k.twx\"\n[llm]\nmodel = \"m.gguf\"\n\
        threads = 2\nprompt_budget = 640\nmax_tokens = 256\n";

    // --decide may only recommend what the daemon accepts,
    // so bench refuses, up front, what the config validation would refuse.
    #[test]
    fn a_combination_the_daemon_would_refuse_is_an_error_naming_the_option() {
        let path = Path::new("/etc/tidewatch/tidewatch.toml");
        assert!(check_configurable(CFG, path, &combo(4, 512, 2048)).is_ok());
        // 640 + 256 + 64 tokens do not fit a 512-token context.
        let chain = |c: Combo| {
            let e = check_configurable(CFG, path, &c).unwrap_err();
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            format!("{e}: {}", source.unwrap_or_default())
        };
        let e = chain(combo(4, 512, 512));
        assert!(e.contains("--ctx 512") && e.contains("llm.ctx"), "{e}");
        let e = chain(combo(65, 512, 2048));
        assert!(
            e.contains("--threads 65") && e.contains("llm.threads"),
            "{e}"
        );
    }

    #[test]
    fn memory_sizes_parse() {
        assert_eq!(parse_mib("4G"), Some(4096.0));
        assert_eq!(parse_mib("3500M"), Some(3500.0));
        assert_eq!(parse_mib("x"), None);
    }
}
