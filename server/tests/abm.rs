//! Agent-based models run for real: the Python worker with Mesa 3 from `.venv-abm/` (created
//! here if missing), the shipped examples, snapshots and branches, the limits, restarts and the
//! pool. These tests skip (with a message) only when `python3` itself is absent.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use simtree::abm::cli::{RunOptions, run_file};
use simtree::abm::model::AbmDocument;
use simtree::abm::venv::{ensure_venv, python_available};
use simtree::abm::worker::{Advance, Start, StepRecord};
use simtree::abm::{AbmError, AbmModel, AbmWorker, CheckPatch, Patch, Sandbox, WorkerConfig, WorkerLimits, WorkerPool};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The worker configuration, or `None` (after saying why) when python3 is not installed.
fn config(limits: WorkerLimits) -> Option<WorkerConfig> {
    if !python_available() {
        eprintln!("SKIPPED: python3 is not installed, so the ABM worker cannot run");
        return None;
    }
    let python = ensure_venv(&root()).expect("the ABM venv can be created");
    Some(WorkerConfig { python, script: root().join("assets/python/abm_worker.py"), limits, sandbox: Sandbox::Bwrap })
}

fn worker() -> Option<AbmWorker> {
    config(WorkerLimits::default()).map(|c| AbmWorker::spawn(c).expect("worker starts"))
}

fn example(name: &str) -> AbmModel {
    let text = std::fs::read_to_string(root().join("assets/abm").join(name)).unwrap();
    AbmDocument::parse(&text).unwrap().model().unwrap().clone()
}

fn value(r: &StepRecord, name: &str) -> i64 {
    r.values[name].as_i64().unwrap_or_else(|| panic!("{name} in {r:?}"))
}

/// A model whose one agent type runs `code` as its only behavior (topology none; tracked:
/// `globalVariable.ticks` and the string `globalVariable.seen`). Shared with the e2e tests.
fn tiny_model(code: &str) -> AbmModel {
    let text = std::fs::read_to_string(root().join("server/tests/fixtures/abm/one_behavior.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["agents"][0][0]["agentBehaviors"][0]["code"] = json!(code);
    serde_json::from_value(v).expect("tiny model parses")
}

/// An import is refused, with the reason, when its history cannot rebuild the model: a patch
/// the model does not declare, more steps than a rebuild may replay, or steps without history.
#[test]
fn an_imported_model_that_cannot_be_rebuilt_is_refused_with_the_reason() {
    use simtree::sim::{AbmSim, MAX_REBUILD_STEPS, Sim};
    let refused = |edit: &dyn Fn(&mut AbmSim)| {
        let mut a = AbmSim::new(example("sir_network.json"), 5);
        edit(&mut a);
        Sim::Abm(a).check_imported().unwrap_err().to_string()
    };
    let unknown: Patch =
        serde_json::from_value(json!({"target": "globalVariable", "name": "nope", "value": 1})).unwrap();
    assert_eq!(
        refused(&|a| a.history.push(Advance { patches: vec![unknown.clone()], reseed: None, steps: 1 })),
        "history[0]: the model declares no global variable 'nope'"
    );
    // A pending patch (a branch not yet run) is checked too, with or without a history.
    assert_eq!(
        refused(&|a| a.pending.push(unknown.clone())),
        "pending[0]: the model declares no global variable 'nope'"
    );
    assert_eq!(
        refused(&|a| a.history.push(Advance { patches: vec![], reseed: None, steps: MAX_REBUILD_STEPS + 1 })),
        format!("the history replays {} steps; at most {MAX_REBUILD_STEPS} can be rebuilt", MAX_REBUILD_STEPS + 1)
    );
    assert_eq!(
        refused(&|a| a.steps = 3),
        "the model is at step 3 but its history records only 0 steps (exports of agent-based models from \
         before histories were recorded cannot be rebuilt)"
    );
}

#[test]
fn sir_runs_to_termination() {
    let Some(mut w) = worker() else { return };
    let info = w.ping().unwrap();
    assert!(info.mesa.starts_with("3."), "{info:?}");
    let model = example("sir_network.json");
    let loaded = w.load(&model, 7).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.info.agents["Person"], 1000);
    assert!(loaded.info.edges.unwrap() > 2900, "{:?}", loaded.info);
    assert_eq!(loaded.initial["globalVariable.infectedCount"], 10);
    let report = w.step(loaded.id, 10_000).unwrap();
    let term = report.terminated.expect("the epidemic ends");
    assert_eq!(term.reason, "rule");
    assert_eq!(term.source_name.as_deref(), Some("globalVariable.infectedCount"));
    assert!(report.steps < 200, "ended by the rule, not maxSteps: {}", report.steps);
    assert_eq!(report.records.len() as u64, report.steps);
    for r in &report.records {
        let total = value(r, "globalVariable.susceptibleCount")
            + value(r, "globalVariable.infectedCount")
            + value(r, "globalVariable.recoveredCount");
        assert_eq!(total, 1000, "step {}", r.step);
        assert_eq!(r.values["agent.Person.agentAttribute.status"].as_array().unwrap().len(), 1000);
    }
    let last = report.records.last().unwrap();
    assert_eq!(value(last, "globalVariable.infectedCount"), 0);
    assert!(value(last, "globalVariable.recoveredCount") > 100, "{last:?}");
    // Stepping a finished model does nothing.
    let again = w.step(loaded.id, 5).unwrap();
    assert!(again.records.is_empty() && again.terminated.is_some());
}

#[test]
fn branches_from_a_snapshot_diverge_and_an_unchanged_one_reproduces_the_original() {
    let Some(mut w) = worker() else { return };
    let model = example("sir_network.json");
    let id = w.load(&model, 42).unwrap().id;
    let first = w.step(id, 20).unwrap();
    assert_eq!(first.steps, 20);
    assert!(first.terminated.is_none());
    let snap = w.snapshot(id).unwrap();
    assert!(snap.len() > 50_000, "a pickle of 1,000 agents: {} bytes", snap.len());
    let original = w.step(id, 10_000).unwrap();

    let mut run = |rate: Option<f64>| {
        let b = w.restore(&snap).unwrap();
        if let Some(rate) = rate {
            let p = Patch::GlobalVariable { name: "infectionRate".into(), value: json!(rate) };
            p.check(&model).unwrap();
            assert_eq!(w.set(b, &p).unwrap(), 1);
        }
        let r = w.step(b, 10_000).unwrap();
        w.drop_model(b).unwrap();
        r
    };
    let low = run(Some(0.02));
    let high = run(Some(0.15));
    let same = run(None);
    assert_eq!(same.records, original.records, "unchanged branch reproduces the run exactly");
    assert_eq!(same.steps, original.steps);
    let recovered = |r: &simtree::abm::StepReport| value(r.records.last().unwrap(), "globalVariable.recoveredCount");
    assert_ne!(low.records, high.records);
    assert!(recovered(&low) + 50 < recovered(&high), "low {} vs high {}", recovered(&low), recovered(&high));

    // The snapshot continues the same way in another process.
    let mut other = worker().unwrap();
    let c = other.restore(&snap).unwrap();
    assert_eq!(other.step(c, 10_000).unwrap().records, original.records);
}

#[test]
fn the_seed_example_runs_with_its_gaps_bridged_and_reported() {
    let Some(mut w) = worker() else { return };
    let text = std::fs::read_to_string(root().join("server/tests/fixtures/abm/seed000_sir_example.json")).unwrap();
    let model = AbmDocument::parse(&text).unwrap().model().unwrap().clone();
    let loaded = w.load(&model, 1).unwrap();
    let warnings = loaded.warnings.join("\n");
    assert!(warnings.contains("getTotalPopulation"), "{warnings}");
    assert!(warnings.contains("infectedCount"), "{warnings}");
    assert_eq!(loaded.info.agents["Person"], 1000);
    // Nobody is infected at the start, so nothing ever happens until maxSteps.
    let r = w.step(loaded.id, 1000).unwrap();
    assert_eq!(r.terminated.unwrap().reason, "maxSteps");
    assert_eq!(r.steps, 200);
    let statuses = r.records.last().unwrap().values["agent.Person.agentAttribute.status"].clone();
    assert!(statuses.as_array().unwrap().iter().all(|s| s == "S"));
}

#[test]
fn grid_and_spaceless_examples_run() {
    let Some(mut w) = worker() else { return };
    let fire = w.load(&example("forest_fire.json"), 3).unwrap();
    assert_eq!(fire.info.agents["Tree"], 960, "40 x 40 x 0.6");
    assert!(fire.initial["globalVariable.burningCount"].as_i64().unwrap() > 10);
    let r = w.step(fire.id, 1000).unwrap();
    assert_eq!(r.terminated.unwrap().source_name.as_deref(), Some("globalVariable.burningCount"));
    let last = r.records.last().unwrap();
    assert_eq!(value(last, "globalVariable.fineCount") + value(last, "globalVariable.burnedCount"), 960);

    let wealth = w.load(&example("wealth_exchange.json"), 3).unwrap();
    assert_eq!(wealth.initial["globalVariable.gini"], 0.0);
    let r = w.step(wealth.id, 1000).unwrap();
    assert_eq!(r.terminated.unwrap().reason, "maxSteps");
    assert_eq!(r.steps, 300);
    let last = r.records.last().unwrap();
    assert!(last.values["globalVariable.gini"].as_f64().unwrap() > 0.3, "{last:?}");
    assert_eq!(last.values["agent.Trader.agentAttribute.wealth"], 1.0, "money is conserved");
}

#[test]
fn agent_and_environment_patches_reach_the_model() {
    let Some(mut w) = worker() else { return };
    let model = example("forest_fire.json");
    let id = w.load(&model, 5).unwrap().id;
    w.step(id, 3).unwrap();
    // Put every fire out: the next step ends the run by its rule.
    let all = Patch::AgentAttribute {
        agent_type: "Tree".into(),
        name: "condition".into(),
        value: json!("Fine"),
        agent_id: None,
    };
    all.check(&model).unwrap();
    assert_eq!(w.set(id, &all).unwrap(), 960);
    let r = w.step(id, 10).unwrap();
    assert_eq!(r.steps, 4);
    assert_eq!(value(&r.records[0], "globalVariable.fineCount"), 960);
    // One tree set burning starts a new fire.
    let one = Patch::AgentAttribute {
        agent_type: "Tree".into(),
        name: "condition".into(),
        value: json!("Burning"),
        agent_id: Some(500),
    };
    let id2 = w.load(&model, 5).unwrap().id;
    w.set(id2, &all).unwrap();
    assert_eq!(w.set(id2, &one).unwrap(), 1);
    let r = w.step(id2, 1).unwrap();
    assert!(value(&r.records[0], "globalVariable.burnedCount") == 1);
    // Environment attribute and unknown names.
    let env = Patch::EnvironmentAttribute { name: "density".into(), value: json!(0.9) };
    assert_eq!(w.set(id2, &env).unwrap(), 1);
    assert_eq!(w.info(id2).unwrap().environment_attributes["density"], 0.9);
    let bad = Patch::GlobalVariable { name: "nope".into(), value: json!(1) };
    let e = w.set(id2, &bad).unwrap_err();
    assert!(matches!(&e, AbmError::BadRequest(m) if m.contains("nope")), "{e}");
    // A refused patch does not spoil the model.
    w.step(id2, 1).unwrap();
}

#[test]
fn mesa2_idioms_run_through_the_shim() {
    let Some(mut w) = worker() else { return };
    let code = "def act(self):\n    from mesa.time import RandomActivation\n    if self.unique_id == 1:\n        globalVariable.ticks = self.model.schedule.time\n    self.energy = self.model.schedule.get_agent_count() + len(self.model.schedule.agents)";
    let model = tiny_model(code);
    let id = w.load(&model, 1).unwrap().id;
    let r = w.step(id, 3).unwrap();
    // Mesa 2 numbering: schedule.time is 0 during the first step.
    let ticks: Vec<i64> = r.records.iter().map(|x| value(x, "globalVariable.ticks")).collect();
    assert_eq!(ticks, [0, 1, 2]);
    let info = w.info(id).unwrap();
    assert_eq!(info.steps, 3);
}

#[test]
fn model_code_errors_are_reported_with_their_source() {
    let Some(mut w) = worker() else { return };
    let model = tiny_model("def act(self):\n    x = 1\n    return self.energy / (self.energy - 1)");
    let id = w.load(&model, 1).unwrap().id;
    let e = w.step(id, 1).unwrap_err();
    let AbmError::ModelCode { message, traceback } = &e else { panic!("{e}") };
    assert!(message.contains("ZeroDivisionError"), "{message}");
    let tb = traceback.as_deref().unwrap_or_default();
    assert!(tb.contains("agent.Blob.agentBehavior.act, line 3"), "{tb}");
    // Half a step happened: the model is refused from now on.
    assert!(matches!(w.step(id, 1), Err(AbmError::Poisoned(_))));
    w.drop_model(id).unwrap();
    // A syntax error fails the load and names the element.
    let broken = tiny_model("def act(self)\n    pass");
    let e = w.load(&broken, 1).unwrap_err().to_string();
    assert!(e.contains("agent.Blob.agentBehavior.act") && e.contains("syntax"), "{e}");
}

#[test]
fn limits_stop_runaway_models_and_spare_the_others() {
    // A generous wall-clock timeout: on a busy machine CPU time accrues slower than wall time,
    // and this test is about the CPU and memory limits firing first.
    let limits = WorkerLimits { call_timeout: Duration::from_secs(60), cpu_seconds_per_call: 2, memory_bytes: 1 << 30 };
    let Some(cfg) = config(limits) else { return };
    let mut w = AbmWorker::spawn(cfg.clone()).unwrap();
    let sir = example("sir_network.json");
    // A healthy model, part-way through its run, and its reference continuation elsewhere.
    let healthy = w.load(&sir, 11).unwrap().id;
    w.step(healthy, 5).unwrap();
    let mut reference = AbmWorker::spawn(cfg.clone()).unwrap();
    let rid = reference.load(&sir, 11).unwrap().id;
    reference.step(rid, 5).unwrap();
    let expected = reference.step(rid, 10).unwrap().records;
    let pid = w.pid();

    // An infinite loop: stopped by the CPU budget; same process, reported.
    let spin = tiny_model("def act(self):\n    while True:\n        self.energy += 1");
    let s = w.load(&spin, 1).unwrap().id;
    let e = w.step(s, 1).unwrap_err();
    assert!(matches!(e, AbmError::CpuLimit(2)), "{e}");
    assert_eq!(w.pid(), pid, "the worker survived");
    assert!(matches!(w.step(s, 1), Err(AbmError::Poisoned(_))));

    // A huge allocation: stopped by the memory limit; reported.
    let hog = tiny_model("def act(self):\n    self.blob = bytearray(8 * 1024 ** 3)");
    let h = w.load(&hog, 1).unwrap().id;
    let e = w.step(h, 1).unwrap_err();
    assert!(matches!(e, AbmError::MemoryLimit(_)), "{e}");
    let grow = tiny_model(
        "def act(self):\n    chunks = []\n    while True:\n        chunks.append(bytearray(64 * 1024 * 1024))",
    );
    let g = w.load(&grow, 1).unwrap().id;
    let e = w.step(g, 1).unwrap_err();
    assert!(matches!(e, AbmError::MemoryLimit(_)), "{e}");
    assert_eq!(w.pid(), pid);

    // The healthy model goes on exactly as it would have.
    assert_eq!(w.step(healthy, 10).unwrap().records, expected);
}

#[test]
fn a_hung_or_crashed_worker_is_restarted_without_losing_snapshots() {
    let limits = WorkerLimits { call_timeout: Duration::from_secs(3), cpu_seconds_per_call: 2, memory_bytes: 1 << 30 };
    let Some(cfg) = config(limits) else { return };
    let mut w = AbmWorker::spawn(cfg).unwrap();
    let sir = example("sir_network.json");
    // One model snapshotted at step 5 (its checkpoint), one with unsaved progress.
    let saved = w.load(&sir, 21).unwrap().id;
    w.step(saved, 5).unwrap();
    let snap = w.snapshot(saved).unwrap();
    let unsaved = w.load(&sir, 22).unwrap().id;
    w.step(unsaved, 5).unwrap();
    let expected = {
        let mut other = worker().unwrap();
        let x = other.restore(&snap).unwrap();
        other.step(x, 10).unwrap().records
    };
    let pid = w.pid();

    // Sleeping uses no CPU, so only the wall-clock timeout can stop it.
    let sleeper = tiny_model("def act(self):\n    import time\n    time.sleep(60)");
    let s = w.load(&sleeper, 1).unwrap().id;
    let e = w.step(s, 1).unwrap_err();
    assert!(matches!(e, AbmError::Timeout(_)), "{e}");
    assert_eq!(w.restarts(), 1);
    assert!(matches!(w.step(s, 1), Err(AbmError::Lost(_))));
    assert!(matches!(w.step(unsaved, 1), Err(AbmError::Lost(_))));
    // The snapshotted model is back, transparently, in the new process.
    assert_eq!(w.step(saved, 10).unwrap().records, expected);
    assert_ne!(w.pid(), pid);

    // A hard crash of the interpreter: reported, restarted, snapshots still restore.
    let crasher = tiny_model("def act(self):\n    import os\n    os._exit(3)");
    let c = w.load(&crasher, 1).unwrap().id;
    let e = w.step(c, 1).unwrap_err();
    assert!(matches!(&e, AbmError::WorkerDied(m) if m.contains("3")), "{e}");
    assert_eq!(w.restarts(), 2);
    let again = w.restore(&snap).unwrap();
    assert_eq!(w.step(again, 10).unwrap().records, expected);
}

#[test]
fn the_pool_runs_replicates_in_parallel_with_distinct_seeds() {
    let Some(cfg) = config(WorkerLimits::default()) else {
        return;
    };
    let pool = WorkerPool::spawn(&cfg, 2).unwrap();
    assert_eq!(pool.size(), 2);
    let sir = example("sir_network.json");
    let snap = pool.with_worker(|w| {
        let id = w.load(&sir, 5).unwrap().id;
        w.step(id, 20).unwrap();
        w.snapshot(id).unwrap()
    });
    let plan = Advance { patches: vec![], reseed: None, steps: 10_000 };
    let seeds = [1, 2, 3, 1];
    let results: Vec<_> = pool
        .replicates(Start::Snapshot(&snap), &plan, &seeds)
        .into_iter()
        .map(|r| r.expect("replicate runs"))
        .collect();
    assert_eq!(results.len(), 4);
    // Seeds 1 (twice, on different workers) agree; different seeds differ.
    assert_eq!(results[0].report.records, results[3].report.records);
    // (Their pickles need not be byte-identical: pickle shares equal objects by identity,
    // which differs between processes; the states they hold are the same.)
    assert_ne!(results[0].report.records, results[1].report.records);
    assert_ne!(results[1].report.records, results[2].report.records);
    for r in &results {
        assert!(r.report.steps > 20);
        assert_eq!(r.before["globalVariable.infectedCount"], results[0].before["globalVariable.infectedCount"]);
    }
    // From the specification: each replicate is built with its seed.
    let fresh =
        pool.replicates(Start::Spec { model: &sir, seed: 0 }, &Advance { steps: 5, ..Advance::default() }, &[8, 9]);
    let fresh: Vec<_> = fresh.into_iter().map(Result::unwrap).collect();
    assert_ne!(fresh[0].report.records, fresh[1].report.records);
    // A patched plan applies to every replicate.
    let patched = pool.replicates(
        Start::Snapshot(&snap),
        &Advance {
            patches: vec![Patch::GlobalVariable { name: "recoveryRate".into(), value: json!(1.0) }],
            reseed: None,
            steps: 1,
        },
        &[1, 2],
    );
    for r in patched {
        let r = r.unwrap();
        // Recovery runs after infection, so with certain recovery nobody is left infected.
        assert_eq!(value(&r.report.records[0], "globalVariable.infectedCount"), 0);
    }
}

#[test]
fn the_run_command_prints_steps_as_text_and_json_lines() {
    let Some(cfg) = config(WorkerLimits::default()) else {
        return;
    };
    let options =
        RunOptions { steps: 30, seed: 4, json: true, root: root(), limits: cfg.limits.clone(), sandbox: cfg.sandbox };
    let path = root().join("assets/abm/wealth_exchange.json");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let summary = run_file(&path, &options, &mut out, &mut err).unwrap();
    assert_eq!(summary.steps, 30);
    let lines: Vec<Value> = String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 32, "start, 30 steps, end");
    assert_eq!(lines[0]["type"], "start");
    assert_eq!(lines[1]["type"], "step");
    assert_eq!(lines[1]["data"]["step"], 1);
    assert!(lines[30]["data"]["values"]["globalVariable.gini"].is_number());
    assert_eq!(lines[31]["type"], "end");

    let text_options = RunOptions { json: false, steps: 500, ..options };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let summary = run_file(&root().join("assets/abm/sir_network.json"), &text_options, &mut out, &mut err).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("1000 Person on a network topology, seed 4"), "{text}");
    assert!(text.contains("stopped after step"), "{text}");
    assert!(summary.terminated.unwrap().contains("infectedCount"));

    // Validation errors stop the run before any worker starts.
    let seed = root().join("server/tests/fixtures/abm/seed000_sir_example.json");
    let e = run_file(&seed, &text_options, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(matches!(&e, AbmError::Invalid(lines) if lines.len() == 2), "{e}");
}

// -- The sandbox, hard kills, cancellation and rebuilding (issue 10) --

/// Host processes whose command line contains `marker` (model code execs `sleep <marker>` so
/// that its processes can be found from outside the sandbox).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Model code that forks a detached grandchild (double fork + setsid) running `sleep <marker>`.
fn detach_code(marker: &str, then: &str) -> String {
    format!(
        "def act(self):\n    import os\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n            os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n        os._exit(0)\n    os.wait()\n{then}"
    )
}

#[test]
fn model_code_sees_no_secrets_files_network_or_host_processes() {
    let Some(cfg) = config(WorkerLimits::default()) else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = std::env::temp_dir().join(format!("simtree-sandbox-escape-{}", std::process::id()));
    let _ = std::fs::remove_file(&outside);
    // Everything model code can find out goes into a tracked string variable.
    let code = format!(
        r#"def act(self):
    import os, socket
    seen = []
    seen.append('env=' + ','.join(sorted(os.environ)))
    for p in ('/proc/1/environ', '/etc/passwd', '{root}', '{home}'):
        try:
            seen.append(p + '=' + repr(open(p, 'rb').read()[:2000]) if os.path.isfile(p) else p + '=' + repr(os.listdir(p)))
        except Exception as e:
            seen.append(p + '!' + type(e).__name__)
    try:
        with open('{outside}', 'w') as f:
            f.write('escaped')
        seen.append('write=ok')
    except Exception as e:
        seen.append('write!' + type(e).__name__)
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=2)
        seen.append('connect=ok')
    except Exception as e:
        seen.append('connect!' + type(e).__name__)
    seen.append('pids=' + ','.join(sorted(p for p in os.listdir('/proc') if p.isdigit())))
    globalVariable.seen = ' | '.join(seen)"#,
        root = root().canonicalize().unwrap().display(),
        home = std::env::var("HOME").unwrap_or_else(|_| "/root".into()),
        outside = outside.display(),
    );
    let model = tiny_model(&code);
    let mut w = AbmWorker::spawn(cfg).unwrap();
    let id = w.load(&model, 1).unwrap().id;
    let report = w.step(id, 1).unwrap();
    let seen = report.records[0].values["globalVariable.seen"].as_str().unwrap().to_string();
    eprintln!("model code saw: {seen}");
    // The test process's environment (cargo sets CARGO_*) reaches neither the worker nor the
    // sandbox's PID 1.
    assert!(!seen.contains("CARGO"), "{seen}");
    let env: Vec<&str> = seen.split(" | ").next().unwrap()["env=".len()..].split(',').collect();
    for k in &env {
        assert!(
            ["PATH", "HOME", "PWD", "LC_CTYPE"].contains(k) || k.starts_with("PYTHON") || k.ends_with("_NUM_THREADS"),
            "unexpected variable {k} in {env:?}"
        );
    }
    assert!(seen.contains("/etc/passwd!"), "no /etc: {seen}");
    // The checkout shows only the (read-only) venv; its sources and data are absent.
    let checkout = format!("{}=['.venv-abm']", root().canonicalize().unwrap().display());
    assert!(seen.contains(&checkout), "no checkout: {seen}");
    // Home is absent, or shows only the way to a pyenv interpreter's (read-only) prefix.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    assert!(seen.contains(&format!("{home}!")) || seen.contains(&format!("{home}=['.pyenv']")), "no home: {seen}");
    assert!(seen.contains("connect!PermissionError"), "no network (the socket itself is refused): {seen}");
    assert!(listener.accept().is_err(), "no connection reached the host");
    assert!(!outside.exists(), "nothing written to the host's /tmp");
    // Its own PID namespace: bwrap's init and the worker, nothing of the host.
    assert!(seen.ends_with("pids=1,2"), "{seen}");
}

#[test]
fn a_fork_is_refused_and_a_runaway_call_dies_with_its_sandbox() {
    let limits = WorkerLimits { call_timeout: Duration::from_secs(3), ..WorkerLimits::default() };
    let Some(cfg) = config(limits) else { return };
    let mut w = AbmWorker::spawn(cfg).unwrap();
    // Model code may not start processes: the fork fails in the model, nothing is left behind
    // (the worker still reaps its PID namespace after each call, should one get through).
    let marker = format!("{}.4242", std::process::id());
    let forker = tiny_model(&detach_code(&marker, ""));
    let id = w.load(&forker, 1).unwrap().id;
    let e = w.step(id, 1).unwrap_err().to_string();
    assert!(e.contains("may not start processes"), "{e}");
    assert_eq!(processes_with(&marker), Vec::<String>::new());

    // A call that ignores SIGXCPU and spins: killed by the wall clock, its sandbox with it.
    let tail = "def act(self):\n    import signal\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n    while True:\n        pass\n";
    let runaway = tiny_model(tail);
    let id = w.load(&runaway, 1).unwrap().id;
    let started = std::time::Instant::now();
    let e = w.step(id, 1).unwrap_err();
    assert!(matches!(e, AbmError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
    // The worker restarts for the next call.
    assert!(w.ping().is_ok());
}

#[test]
fn a_cancelled_call_frees_its_worker_within_a_second() {
    use simtree::abm::worker::CancelToken;
    let Some(cfg) = config(WorkerLimits::default()) else {
        return;
    };
    let pool = std::sync::Arc::new(WorkerPool::spawn(&cfg, 1).unwrap());
    let sleeper = tiny_model("def act(self):\n    import time\n    time.sleep(600)");
    let token = CancelToken::new();
    let guard = token.cancel_on_drop();
    let (p, t) = (pool.clone(), token.clone());
    let call = std::thread::spawn(move || {
        p.with_worker_cancellable(&t, |w| {
            w.advance(Start::Spec { model: &sleeper, seed: 1 }, &Advance { steps: 1, ..Advance::default() })
        })
    });
    // Wait until the call holds the worker, and a bit more so that it is inside model code.
    while pool.idle() > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // What an aborted tokio task does: drop the guard it held.
    let dropped = std::time::Instant::now();
    drop(guard);
    let next = CancelToken::new();
    let got_worker = pool.with_worker_cancellable(&next, |_| Ok(dropped.elapsed())).unwrap();
    assert!(got_worker < Duration::from_secs(1), "a new call waited {got_worker:?}");
    let e = call.join().unwrap().unwrap_err();
    assert_eq!(e, AbmError::Cancelled);
    // The killed worker restarts for the next call.
    let info = pool.with_worker_cancellable(&next, |w| w.ping()).unwrap();
    eprintln!(
        "worker free {got_worker:?} after the cancel; restarted and answering {:?} after it (pid {})",
        dropped.elapsed(),
        info.pid
    );
    // A call cancelled while it waits for a worker never starts.
    let cancelled = CancelToken::new();
    cancelled.cancel();
    let e = pool.with_worker_cancellable(&cancelled, |w| w.ping()).unwrap_err();
    assert_eq!(e, AbmError::Cancelled);
}

#[test]
fn a_node_rebuilt_from_its_history_continues_exactly_like_the_original() {
    use simtree::engine::Event;
    use simtree::sim::{AbmSim, RunCtx, Sim};
    use simtree_shared::Op;
    let Some(cfg) = config(WorkerLimits::default()) else {
        return;
    };
    let pool = std::sync::Arc::new(WorkerPool::spawn(&cfg, 1).unwrap());
    let ctx = RunCtx {
        llm: std::sync::Arc::new(simtree::llm::MockClient),
        tools: std::sync::Arc::new(simtree::trading::agents::MockToolModel),
        abm: Some(pool),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let run = |sim: &mut Sim, steps: u64| -> Vec<Event> {
        let mut events = Vec::new();
        let mut sink = |e: Event| events.push(e);
        rt.block_on(sim.run(steps, &ctx, &mut sink)).unwrap();
        events
    };
    // A history with every kind of advance: plain steps, a patch, and a replicate's reseed.
    let mut sim = Sim::Abm(AbmSim::new(example("sir_network.json"), 5));
    run(&mut sim, 8);
    sim.apply_op(&Op::AbmSetGlobal { name: "infectionRate".into(), value: json!(0.2) }).unwrap();
    run(&mut sim, 4);
    sim.replicate(3);
    run(&mut sim, 3);

    let mut imported = sim.fork();
    imported.distrust();
    let Sim::Abm(a) = &imported else { unreachable!() };
    assert!(a.snapshot.is_none() && a.history.len() == 3);
    let original = run(&mut sim, 10);
    let rebuilt = run(&mut imported, 10);
    assert_eq!(original.len(), 10);
    let data = |events: &[Event]| events.iter().map(|e| e.data.clone()).collect::<Vec<_>>();
    assert_eq!(data(&rebuilt), data(&original), "same abm_step values");
    assert_eq!(imported.turns(), 25);

    // A serialized node carries its history but never a snapshot, and a snapshot given in JSON
    // is not read.
    let mut v = serde_json::to_value(&sim).unwrap();
    assert!(v.get("snapshot").is_none(), "{}", v.to_string().len());
    v["snapshot"] = json!("gASVBAAAAAAAAAB9lC4=");
    let back: Sim = serde_json::from_value(v).unwrap();
    let Sim::Abm(b) = &back else { unreachable!() };
    assert!(b.snapshot.is_none());
    assert_eq!(b.history.len(), 4);
}
