//! What `simtree abm validate | schema | run` do, as functions the top-level CLI calls (it owns
//! the argument parsing). Output goes to the writers given, so the functions are testable.
//!
//! * `validate FILE` prints one line per finding (`error[code] path: message`) and a summary;
//!   the result says whether the model is free of errors (exit status 1 otherwise).
//! * `schema --provider P` prints the request fragment for that provider.
//! * `run FILE --steps N [--seed S] [--json]` validates, starts the worker, and prints the
//!   tracked variables after initialization and after every step; `--json` prints JSON lines
//!   `{"type": "start" | "step" | "end", "data": …}` like `simtree run --json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::AbmError;
use super::model::AbmDocument;
use super::sandbox::Sandbox;
use super::schema::{Provider, wrapped};
use super::validate::validate_document;
use super::worker::{AbmWorker, StepRecord, WorkerConfig, WorkerLimits};

/// Steps asked of the worker per call while running, so output streams.
const STEPS_PER_CALL: u64 = 25;

fn io(e: std::io::Error) -> AbmError {
    AbmError::Io(e.to_string())
}

/// Reads and parses a model file (envelope, LLM answer or bare model).
pub(crate) fn read_document(path: &Path) -> Result<AbmDocument, AbmError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| AbmError::Io(format!("cannot read {}: {e}", path.display())))?;
    AbmDocument::parse(&text).map_err(|e| AbmError::Parse(format!("{}: {e}", path.display())))
}

/// `simtree abm validate FILE`: prints the findings; `Ok(true)` when there are no errors.
pub(crate) fn validate_file(path: &Path, out: &mut dyn Write) -> Result<bool, AbmError> {
    let doc = read_document(path)?;
    let report = validate_document(&doc);
    for issue in &report.issues {
        writeln!(out, "{issue}").map_err(io)?;
    }
    let errors = report.errors().count();
    let warnings = report.warnings().count();
    writeln!(out, "{}: {errors} error(s), {warnings} warning(s)", path.display()).map_err(io)?;
    Ok(errors == 0)
}

/// `simtree abm schema --provider openai|gemini|claude`: prints the provider's request fragment.
pub(crate) fn print_schema(provider: &str, out: &mut dyn Write) -> Result<(), AbmError> {
    let provider: Provider = provider.parse().map_err(AbmError::BadRequest)?;
    let text = serde_json::to_string_pretty(&wrapped(provider)).map_err(|e| AbmError::Protocol(e.to_string()))?;
    writeln!(out, "{text}").map_err(io)
}

/// Options of `simtree abm run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Steps to run at most (the model may stop earlier).
    pub steps: u64,
    /// Seed of the model's random generators.
    pub seed: u64,
    /// JSON lines instead of text.
    pub json: bool,
    /// The project root holding `.venv-abm/` and `assets/python/` (the venv is created there if
    /// missing).
    pub root: PathBuf,
    pub limits: WorkerLimits,
    /// Where model code runs (`--unsafe-abm` for none).
    pub sandbox: Sandbox,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub steps: u64,
    pub terminated: Option<String>,
}

/// `simtree abm run FILE --steps N [--seed S] [--json]`. Validation errors stop it before the
/// worker starts; warnings go to `err`.
pub fn run_file(
    path: &Path,
    options: &RunOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunSummary, AbmError> {
    let doc = read_document(path)?;
    let model = doc
        .model()
        .ok_or_else(|| AbmError::BadRequest(format!("{}: a failure envelope holds no model", path.display())))?
        .clone();
    let report = validate_document(&doc);
    if !report.is_ok() {
        return Err(AbmError::Invalid(report.error_lines()));
    }
    for w in report.warnings() {
        writeln!(err, "{w}").map_err(io)?;
    }
    if !super::venv::python_available() {
        return Err(AbmError::Spawn("python3 is not installed".into()));
    }
    let mut config =
        WorkerConfig::for_root(&options.root).with_limits(options.limits.clone()).with_sandbox(options.sandbox);
    // `$SIMTREE_PYTHON` names the interpreter: the checkout's venv is then neither used nor
    // made (a user who cannot write the checkout, or read its venv's interpreter, runs models
    // with an interpreter of their own).
    if std::env::var_os("SIMTREE_PYTHON").is_none() {
        config.python = super::venv::ensure_venv(&options.root).map_err(|e| AbmError::Spawn(e.to_string()))?;
    }
    let mut worker = AbmWorker::spawn(config)?;
    let loaded = worker.load(&model, options.seed)?;
    for w in &loaded.warnings {
        writeln!(err, "runner: {w}").map_err(io)?;
    }
    if options.json {
        let start = json!({"type": "start", "data": {
            "seed": options.seed, "info": loaded.info, "values": loaded.initial, "warnings": loaded.warnings
        }});
        writeln!(out, "{start}").map_err(io)?;
    } else {
        let agents: Vec<String> = loaded.info.agents.iter().map(|(t, n)| format!("{n} {t}")).collect();
        writeln!(
            out,
            "{}: {} on a {} topology, seed {}",
            path.display(),
            agents.join(", "),
            loaded.info.topology,
            options.seed
        )
        .map_err(io)?;
        let record = StepRecord { step: 0, values: loaded.initial.clone() };
        writeln!(out, "{}", format_record(&record)).map_err(io)?;
    }
    let mut done = 0;
    let mut last = loaded.info.steps;
    let mut terminated = loaded.info.terminated.clone();
    while done < options.steps && terminated.is_none() {
        let n = STEPS_PER_CALL.min(options.steps - done);
        let report = worker.step(loaded.id, n)?;
        for r in &report.records {
            if options.json {
                writeln!(out, "{}", json!({"type": "step", "data": r})).map_err(io)?;
            } else {
                writeln!(out, "{}", format_record(r)).map_err(io)?;
            }
        }
        done += report.records.len() as u64;
        last = report.steps;
        terminated = report.terminated.clone();
        if report.records.is_empty() {
            break;
        }
    }
    let reason = terminated.as_ref().map(|t| match &t.source_name {
        Some(s) => format!("{} ({s})", t.reason),
        None => t.reason.clone(),
    });
    if options.json {
        let end = json!({"type": "end", "data": {"steps": last, "terminated": terminated}});
        writeln!(out, "{end}").map_err(io)?;
    } else {
        match &reason {
            Some(r) => writeln!(out, "stopped after step {last}: {r}"),
            None => writeln!(out, "ran to step {last}"),
        }
        .map_err(io)?;
    }
    let _ = worker.drop_model(loaded.id);
    Ok(RunSummary { steps: last, terminated: reason })
}

/// One text line per step: `step 12  infectedCount=80  status={I: 80, S: 920}`. Agent-level
/// arrays are summarised (counts of strings, mean of numbers); `--json` has them whole.
pub(crate) fn format_record(r: &StepRecord) -> String {
    let mut line = format!("step {:>4}", r.step);
    for (name, value) in &r.values {
        let short = name.rsplit('.').next().unwrap_or(name);
        line.push_str(&format!("  {short}={}", brief(value)));
    }
    line
}

fn brief(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.4}"),
            _ => n.to_string(),
        },
        Value::Array(items) => {
            let nums: Vec<f64> = items.iter().filter_map(Value::as_f64).collect();
            if !items.is_empty() && nums.len() == items.len() {
                format!("mean {:.4}", nums.iter().sum::<f64>() / nums.len() as f64)
            } else {
                let mut counts = std::collections::BTreeMap::new();
                for i in items {
                    let key = i.as_str().map(str::to_owned).unwrap_or_else(|| i.to_string());
                    *counts.entry(key).or_insert(0u64) += 1;
                }
                let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                format!("{{{}}}", parts.join(", "))
            }
        }
        Value::Object(map) => {
            let parts: Vec<String> = map.iter().map(|(k, x)| format!("{k}: {}", brief(x))).collect();
            format!("{{{}}}", parts.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name)
    }

    #[test]
    fn validate_prints_findings_and_a_summary() {
        let mut out = Vec::new();
        let ok = validate_file(&fixture("tests/fixtures/abm/seed000_sir_example.json"), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!ok);
        assert!(text.contains("error[unknown-function] model.agents[0][0].initialCount.function"), "{text}");
        assert!(text.contains(": 2 error(s), "), "{text}");

        let mut out = Vec::new();
        assert!(validate_file(&fixture("../assets/abm/wealth_exchange.json"), &mut out).unwrap());
        assert!(String::from_utf8(out).unwrap().contains("0 error(s), 0 warning(s)"));

        let err = validate_file(&fixture("no/such/file.json"), &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }

    #[test]
    fn schema_prints_the_provider_fragment() {
        let mut out = Vec::new();
        print_schema("gemini", &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["config"]["responseSchema"]["propertyOrdering"].is_array());
        let err = print_schema("llama", &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("openai, gemini or claude"));
    }

    #[test]
    fn records_are_summarised_in_text() {
        let r = StepRecord {
            step: 3,
            values: [
                ("globalVariable.infectedCount".to_owned(), json!(80)),
                ("globalVariable.gini".to_owned(), json!(0.25)),
                ("agent.Person.agentAttribute.status".to_owned(), json!(["S", "I", "S"])),
                ("agent.Person.agentAttribute.age".to_owned(), json!([1, 2])),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(format_record(&r), "step    3  infectedCount=80  gini=0.2500  status={I: 1, S: 2}  age=mean 1.5000");
    }
}
