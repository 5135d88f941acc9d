//! `simtree run`: a scenario run headless ([`crate::headless`] builds and runs it), its events
//! printed one line each, and the run written to a folder.

use super::*;

/// The options of `simtree run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario id (file stem in assets/scenarios).
    #[arg(long, required_unless_present = "scenario_file", conflicts_with = "scenario_file")]
    scenario: Option<String>,
    /// A scenario document of your own instead: a social scenario, a trading scenario or an
    /// agent-based model (checked as `POST /devui/simtree` checks it).
    #[arg(long)]
    scenario_file: Option<PathBuf>,
    /// Turns to run (default: the scenario's default_turns).
    #[arg(long)]
    turns: Option<u64>,
    /// Seed for the simulator's RNG (default: the scenario's seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print JSON lines instead of human-readable lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    llm: LlmArgs,
    /// Folder to write the run to: tree.json (importable with POST /devui/simtree/import),
    /// log.jsonl, usage.json and records.json.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The data folder a trading document's `episode.dataset` is read from (default:
    /// $SIMTREE_DATA, else the platform data folder; opened only for such a document).
    #[arg(long, env = "SIMTREE_DATA")]
    data: Option<PathBuf>,
    /// A PostgreSQL database to read `episode.dataset` from instead of a data folder.
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    database_url: Option<String>,
}

/// `simtree run`: one advance of a fresh tree, printed as it happens. Output stops quietly when
/// the reader goes away (`| head`); the run itself still finishes so `--out` is complete.
pub(super) fn run_headless(a: RunArgs, g: &Ground) -> Result<(), String> {
    use std::io::IsTerminal;
    let backend = a.llm.backend()?;
    let (scenario, document) = match &a.scenario_file {
        Some(file) => {
            let (label, doc) = read_scenario_file(file)?;
            (label, Some(doc))
        }
        None => (a.scenario.clone().unwrap_or_default(), None),
    };
    let (sim, default_turns, abm) = match (&document, &a.scenario_file) {
        (Some(doc), Some(file)) => {
            let user = crate::scenario::UserScenario::from_document(&scenario, doc)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let market = match crate::workbench::dataset_of(doc) {
                Some(name) if name != crate::workbench::SHIPPED_DATASET => {
                    Some(uploaded_market(&a, name).map_err(|e| format!("{}: {e}", file.display()))?)
                }
                _ => None,
            };
            crate::headless::fresh_sim((&user).into(), a.seed, &g.assets, g.sandbox, market)
                .map_err(|e| format!("{}: {e}", file.display()))?
        }
        _ => {
            let entry = ScenarioEntry::find(&g.library, &scenario)?;
            crate::headless::fresh_sim(entry, a.seed, &g.assets, g.sandbox, None).map_err(|e| e.to_string())?
        }
    };
    let turns = a.turns.unwrap_or(default_turns);
    let req = crate::backend::RunRequest {
        scenario: &scenario,
        sim: &sim,
        replay: None,
        budget: None,
        abm,
        watch: Default::default(),
    };
    let (ctx, ledger) = crate::backend::run_ctx(&backend, req).map_err(|e| e.to_string())?;
    let counted = Arc::new(crate::headless::Counted::new(ctx.llm.clone()));
    let ctx = RunCtx { llm: counted.clone(), ..ctx };
    let initial = sim.fork().initial_events();
    let mut tree = crate::tree::SimTree::new(&scenario, sim);
    tree.document = document.map(Arc::new);

    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(turns);
        let style = indicatif::ProgressStyle::with_template("{bar:30} turn {pos}/{len} {msg} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut closed = None;
    let json = a.json;
    let mut print = |e: &Event| {
        if closed.is_some() {
            return;
        }
        let line = if json { serde_json::to_string(e).unwrap_or_default() } else { human_line(e) };
        if let Err(err) = writeln!(out, "{line}") {
            closed = Some(err);
        }
    };
    for e in &initial {
        print(e);
    }
    let mut sink = |e: Event| {
        if let Some(bar) = &progress
            && crate::sim::counts_as_turn(&e)
        {
            bar.inc(1);
            bar.set_message(format!(
                "· {} calls · ~{} tokens",
                counted.calls.load(std::sync::atomic::Ordering::Relaxed),
                counted.words.load(std::sync::atomic::Ordering::Relaxed)
            ));
        }
        print(&e);
    };
    let rt = runtime()?;
    let mut finished =
        rt.block_on(crate::headless::advance(tree, turns, &ctx, &ledger, &mut sink)).map_err(|e| e.to_string())?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let broken = match closed {
        Some(err) if err.kind() != std::io::ErrorKind::BrokenPipe => return Err(err.to_string()),
        Some(_) => true,
        None => out.flush().is_err(),
    };
    if let Some(dir) = &a.out {
        write_run(dir, &mut finished)?;
    }
    if let Some(e) = &finished.error {
        return Err(e.clone());
    }
    if !json && !broken {
        let sim = finished.sim();
        let turns = sim.as_deref().map_or(0, Sim::turns);
        let kind = sim.as_deref().map_or("", Sim::kind);
        eprintln!("-- {turns} turns run ({kind})");
    }
    Ok(())
}

/// Writes a finished run to `dir`: the tree export, the run's log lines, its usage and records.
pub(super) fn write_run(dir: &std::path::Path, run: &mut crate::headless::Finished) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{}: cannot write {what}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| fail("the folder", &e))?;
    let export = run.export().map_err(|e| e.to_string())?;
    let put = |name: &str, text: String| std::fs::write(dir.join(name), text).map_err(|e| fail(name, &e));
    put("tree.json", serde_json::to_string(&export).map_err(|e| fail("tree.json", &e))?)?;
    let mut log = String::new();
    run.tree
        .for_each_log_entry(run.node, |l| {
            log.push_str(l);
            log.push('\n');
        })
        .map_err(|e| fail("log.jsonl", &e))?;
    put("log.jsonl", log)?;
    let usage = crate::llm::ledger::UsageTotals::of(&run.records);
    put("usage.json", serde_json::to_string_pretty(&usage).map_err(|e| fail("usage.json", &e))?)?;
    put("records.json", serde_json::to_string(&run.records).map_err(|e| fail("records.json", &e))?)
}

pub(super) fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The uploaded dataset `name` of the data folder (or database) `simtree run` names, checked as
/// the server checks it when it loads it.
pub(super) fn uploaded_market(a: &RunArgs, name: &str) -> Result<Arc<MarketData>, String> {
    let storage = StorageArgs {
        data: a.data.clone(),
        ephemeral: false,
        database_url: a.database_url.clone(),
        cache_mb: 0,
        max_import_bytes: 0,
        lease_secs: crate::store::lease::DEFAULT_LEASE.as_secs(),
    };
    let store = storage.open()?.ok_or("no store to read the dataset from")?;
    let owned = name.to_string();
    let text = store.read(move |db| db.dataset(&owned)).map_err(|e| e.to_string())?;
    let text = text.ok_or_else(|| {
        format!("scenario: episode.dataset: no dataset called '{name}' in {} (see simtree data import)", store.location)
    })?;
    let d = crate::trading::dataset::parse_dataset(&text).map_err(|e| format!("dataset '{name}': {e}"))?;
    Ok(Arc::new(d.market))
}

/// Largest scenario file `--scenario-file` reads (the server's default body limit is 2 MiB).
pub(super) const MAX_SCENARIO_FILE_BYTES: u64 = 16 << 20;

/// A scenario document from a file: its id (the file stem) and its JSON.
pub(super) fn read_scenario_file(path: &std::path::Path) -> Result<(String, Value), String> {
    let shown = path.display();
    let len = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?.len();
    if len > MAX_SCENARIO_FILE_BYTES {
        return Err(format!("{shown}: {len} bytes; a scenario file may have at most {MAX_SCENARIO_FILE_BYTES}"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let doc = serde_json::from_str(&text).map_err(|e| format!("{shown}: not valid JSON: {e}"))?;
    let id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "document".into());
    Ok((id, doc))
}

/// One readable line per event.
pub(crate) fn human_line(e: &Event) -> String {
    let d = &e.data;
    match e.kind {
        EventType::SystemBroadcast => format!("[broadcast] {}", s(d, "text")),
        EventType::AgentProcessStart => format!("[step] {} step {}", s(d, "agent"), d["step"]),
        EventType::AgentProcessEnd => format!("[decided] {} {}", s(d, "agent"), d["actions"]),
        EventType::ActionStart => format!("[action] {} {}", s(d, "agent"), d["action"]),
        EventType::ActionEnd => format!(
            "[result] {} {} {}",
            s(d, "agent"),
            if d["success"] == Value::Bool(true) { "ok" } else { "failed" },
            d["summary"].as_str().unwrap_or("-")
        ),
        EventType::AgentCtxDelta => {
            format!("[ctx] {} <{}> {}", s(d, "agent"), s(d, "role"), s(d, "content").replace('\n', "\\n"))
        }
        EventType::PlanUpdate => format!("[plan] {} {}", s(d, "agent"), d["plan"]),
        EventType::EmotionUpdate => format!("[emotion] {} {}", s(d, "agent"), s(d, "emotion")),
        EventType::LandlordDeal => format!("[deal] bottom {}", d["bottom"]),
        EventType::DecisionPoint => format!("[decision] {} value {}", d["log"]["case_id"], d["value"]),
        EventType::AbmStep => format!("[step {}] {}", d["step"], d["values"]),
        EventType::AgentError => format!("[error] {} step {}: {}", s(d, "agent"), d["step"], s(d, "error")),
        EventType::Counterfactual => format!("[what if] {}", d["ops"]),
    }
}
