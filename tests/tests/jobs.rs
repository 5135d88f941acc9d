//! The run queue (issue 26, item 3; `store/jobs.rs`) against a private, real PostgreSQL:
//! concurrent claimers never take one job twice; a claimer that stops heartbeating loses its
//! job to another, and its late completion is refused with nothing written; a job that keeps
//! losing its worker ends dead after its attempts; a graceful stop hands claims back without
//! counting an attempt; a database restart mid-claim leaves the claim with its holder; a
//! listener is woken by a queued job.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use simtree::store::jobs::{Listener, Queue, Status};
use simtree::store::lease::Lease;
use simtree_e2e::Postgres;

/// A queue connection with an identity of its own (`name` makes it unique in this process)
/// whose claims lapse after `lapse`.
fn queue(pg: &Postgres, name: &str, lapse: Duration) -> Queue {
    let mut me = Lease::this_process(lapse);
    me.holder.push_str(&format!("-{name}"));
    Queue::connect(&pg.url, me, Some("worker")).expect("connect the queue")
}

#[test]
fn concurrent_claimers_never_take_one_job_twice_and_each_job_finishes_once() {
    let pg = Postgres::start();
    let mut q = queue(&pg, "producer", Duration::from_secs(30));
    const JOBS: u64 = 300;
    for node in 0..JOBS {
        q.enqueue(1, node, "run", "{}", 3).unwrap();
    }
    q.enqueue(1, 0, "run", "{\"again\":true}", 3).unwrap();
    let taken: Arc<Mutex<BTreeMap<u64, Vec<String>>>> = Arc::default();
    let claimers: Vec<_> = (0..8)
        .map(|k| {
            let url = pg.url.clone();
            let taken = taken.clone();
            std::thread::spawn(move || {
                let mut me = Lease::this_process(Duration::from_secs(30));
                me.holder.push_str(&format!("-claimer{k}"));
                let mut q = Queue::connect(&url, me.clone(), Some("worker")).unwrap();
                loop {
                    let jobs = q.claim(1 + k % 4).unwrap();
                    if jobs.is_empty() {
                        return;
                    }
                    for j in jobs {
                        assert_eq!(j.attempts, 1, "{j:?}");
                        taken.lock().unwrap().entry(j.node).or_default().push(me.holder.clone());
                        q.finish(j.tree, j.node, Status::Done, None, &[]).unwrap();
                    }
                }
            })
        })
        .collect();
    for c in claimers {
        c.join().unwrap();
    }
    let taken = taken.lock().unwrap();
    assert_eq!(taken.len() as u64, JOBS, "every job was claimed");
    let twice: Vec<_> = taken.iter().filter(|(_, by)| by.len() != 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    let claimers: BTreeSet<&String> = taken.values().flatten().collect();
    assert!(claimers.len() > 1, "the work spread: {claimers:?}");
    let ended = q.ended().unwrap();
    assert_eq!(ended.len() as u64, JOBS);
    assert!(ended.iter().all(|r| r.status == Status::Done && r.attempts == 1));
    assert!(q.claim(10).unwrap().is_empty());
}

#[test]
fn a_claimer_that_stops_heartbeating_loses_its_job_and_cannot_complete_it() {
    let pg = Postgres::start();
    let lapse = Duration::from_millis(1500);
    let mut a = queue(&pg, "a", lapse);
    let mut b = queue(&pg, "b", lapse);
    a.enqueue(7, 3, "run", "{}", 3).unwrap();
    let job = a.claim(5).unwrap();
    assert_eq!(job.len(), 1);
    // While a heartbeats, b finds nothing.
    for _ in 0..3 {
        std::thread::sleep(lapse / 3);
        assert_eq!(a.heartbeat().unwrap(), vec![(7, 3)]);
        assert!(b.claim(5).unwrap().is_empty(), "a claim renewed in time is kept");
    }
    // a stops heartbeating: past the lapse b takes the job over (a second attempt).
    std::thread::sleep(lapse + Duration::from_millis(200));
    let taken = b.claim(5).unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].node, taken[0].attempts), (3, 2));
    assert_eq!(a.heartbeat().unwrap(), Vec::<(u64, u64)>::new(), "a no longer holds it");
    // a's late result is refused, and nothing it wrote beside it is committed.
    let late = a
        .finish(
            7,
            3,
            Status::Done,
            None,
            &[simtree::store::Write::Dataset { name: "written-by-a-late-claimer".into(), body: "x".into() }],
        )
        .unwrap_err();
    assert!(late.message().contains("no longer this process's claim"), "{late}");
    assert!(late.message().contains("claimed by"), "{late}");
    assert_eq!(pg.sql("SELECT COUNT(*) FROM datasets WHERE name = 'written-by-a-late-claimer'").trim(), "0");
    assert!(a.retry(7, 3, "boom").unwrap().is_none(), "nor can it put it back");
    b.finish(7, 3, Status::Done, None, &[]).unwrap();
    let row = b.row(7, 3).unwrap().unwrap();
    assert_eq!((row.status, row.attempts, row.claimed_by), (Status::Done, 2, None));
    assert!(b.finish(7, 3, Status::Done, None, &[]).is_err(), "finished once");
    b.forget(7, 3).unwrap();
    assert!(b.row(7, 3).unwrap().is_none());
}

#[test]
fn a_job_that_keeps_losing_its_worker_is_dead_after_max_attempts_and_retries_stop_too() {
    let pg = Postgres::start();
    // (The shortest lapse a claim can have: a second.)
    let lapse = Duration::from_secs(1);
    let mut q = queue(&pg, "poison", lapse);
    q.enqueue(2, 1, "run", "{}", 3).unwrap();
    for attempt in 1..=3 {
        let jobs = q.claim(1).unwrap();
        assert_eq!(jobs.len(), 1, "attempt {attempt}");
        assert_eq!(jobs[0].attempts, attempt);
        // The worker "crashes": no heartbeat, no result.
        std::thread::sleep(lapse + Duration::from_millis(150));
    }
    assert!(q.claim(1).unwrap().is_empty(), "never a fourth attempt");
    let row = q.row(2, 1).unwrap().unwrap();
    assert_eq!(row.status, Status::Dead);
    let error = row.error.unwrap();
    assert!(error.contains("given up after 3 attempts"), "{error}");
    assert!(q.ended().unwrap().iter().any(|r| r.node == 1 && r.status == Status::Dead));

    // A job its worker puts back after failures: queued again, then dead at its last attempt.
    q.enqueue(2, 2, "run", "{}", 2).unwrap();
    let first = q.claim(1).unwrap();
    assert_eq!(first[0].node, 2);
    assert_eq!(q.retry(2, 2, "the provider refused").unwrap(), Some(Status::Queued));
    assert_eq!(q.claim(1).unwrap()[0].attempts, 2);
    assert_eq!(q.retry(2, 2, "the provider refused").unwrap(), Some(Status::Dead));
    let row = q.row(2, 2).unwrap().unwrap();
    assert_eq!(row.error.as_deref(), Some("given up after 2 attempts: the provider refused"));
}

#[test]
fn a_graceful_stop_hands_claims_back_without_counting_the_attempt() {
    let pg = Postgres::start();
    let mut a = queue(&pg, "a", Duration::from_secs(30));
    for node in 0..3 {
        a.enqueue(4, node, "run", "{}", 3).unwrap();
    }
    assert_eq!(a.claim(2).unwrap().len(), 2);
    assert_eq!(a.close().unwrap(), 2);
    let mut b = queue(&pg, "b", Duration::from_secs(30));
    let jobs = b.claim(10).unwrap();
    assert_eq!(jobs.len(), 3, "handed back at once, not after a lapse");
    assert!(jobs.iter().all(|j| j.attempts == 1), "{jobs:?}");
    assert_eq!(pg.sql("SELECT COUNT(*) FROM workers").trim(), "1", "a left the list");
}

#[test]
fn a_database_restart_mid_claim_leaves_the_claim_with_its_holder() {
    let pg = Postgres::start();
    let lapse = Duration::from_secs(5);
    let mut a = queue(&pg, "a", lapse);
    let mut b = queue(&pg, "b", lapse);
    a.enqueue(9, 0, "run", "{}", 3).unwrap();
    assert_eq!(a.claim(1).unwrap().len(), 1);
    pg.restart();
    // The connection comes back (with backoff): heartbeats resume within the lapse.
    let start = Instant::now();
    let held = loop {
        match a.heartbeat() {
            Ok(held) => break held,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(4), "not reconnected: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(held, vec![(9, 0)]);
    let start = Instant::now();
    while b.claim(1).is_err() {
        assert!(start.elapsed() < Duration::from_secs(6), "b never reconnected");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(b.claim(1).unwrap().is_empty(), "the claim stayed with a");
    a.finish(9, 0, Status::Done, None, &[]).unwrap();
    assert_eq!(b.row(9, 0).unwrap().unwrap().status, Status::Done);
}

#[test]
fn a_listener_is_woken_by_a_queued_job_and_by_an_ended_one() {
    let pg = Postgres::start();
    let mut listener = Listener::connect(&pg.url).unwrap();
    let mut q = queue(&pg, "a", Duration::from_secs(30));
    assert!(listener.wait(Duration::from_millis(100)).is_empty());
    q.enqueue(5, 6, "run", "{}", 3).unwrap();
    let start = Instant::now();
    assert_eq!(listener.wait(Duration::from_secs(5)), vec!["queued".to_string()]);
    assert!(start.elapsed() < Duration::from_secs(1));
    q.claim(1).unwrap();
    q.finish(5, 6, Status::Failed, Some("the run failed"), &[]).unwrap();
    assert_eq!(listener.wait(Duration::from_secs(5)), vec!["done:5:6:failed".to_string()]);
    let row = q.row(5, 6).unwrap().unwrap();
    assert_eq!((row.status, row.error.as_deref()), (Status::Failed, Some("the run failed")));
    // A restart cuts the listening connection: it comes back by itself.
    pg.restart();
    let start = Instant::now();
    let mut woken = Vec::new();
    while woken.is_empty() && start.elapsed() < Duration::from_secs(10) {
        let _ = q.enqueue(5, 7 + start.elapsed().as_millis() as u64, "run", "{}", 3);
        woken = listener.wait(Duration::from_millis(300));
    }
    assert!(woken.contains(&"queued".to_string()), "{woken:?}");
}

// ---- runs as jobs: a server with --jobs and `simtree worker` processes ----

/// A fake OpenAI-shaped provider answering as the mock would after `delay`; counts the
/// requests it got by their message lists.
#[derive(Clone)]
struct Provider {
    seen: Arc<Mutex<Vec<serde_json::Value>>>,
    delay: Duration,
    /// Called on each request (the poison test kills workers from here).
    on_request: Arc<dyn Fn() + Send + Sync>,
    /// Requests answered: what a provider bills (a call whose caller died before its answer
    /// was sent is not billed; see `caller_gone`).
    billed: Arc<std::sync::atomic::AtomicUsize>,
    /// Its caller was killed: what it answers from now on reaches nobody and is not billed.
    caller_gone: Arc<std::sync::atomic::AtomicBool>,
}

impl Provider {
    fn billed(&self) -> usize {
        self.billed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn completions(
    axum::extract::State(p): axum::extract::State<Provider>,
    axum::Json(body): axum::Json<serde_json::Value>,
) -> axum::Json<serde_json::Value> {
    p.seen.lock().unwrap().push(body["messages"].clone());
    (p.on_request)();
    tokio::time::sleep(p.delay).await;
    if !p.caller_gone.load(std::sync::atomic::Ordering::SeqCst) {
        p.billed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    let text = simtree_e2e::mock_reply(&body);
    axum::Json(serde_json::json!({
        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

async fn provider(delay: Duration, on_request: Arc<dyn Fn() + Send + Sync>) -> (String, Provider) {
    let p = Provider { seen: Arc::default(), delay, on_request, billed: Arc::default(), caller_gone: Arc::default() };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(completions)).with_state(p.clone());
    (simtree_e2e::serve_provider(app).await.0, p)
}

/// The flags of a server that queues its runs for workers (none of its own) and holds a 2 s lease.
fn queueing(pg: &Postgres) -> [&str; 6] {
    ["--database-url", pg.url.as_str(), "--jobs", "--no-worker", "--lease-secs", "2"]
}

/// `env` as the harness takes it.
fn env_pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn llm_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("LLM_DIALECT", "openai".into()),
        ("LLM_BASE_URL", url.to_string()),
        ("LLM_API_KEY", "sk-test-secret".into()),
        ("LLM_MODEL", "fake-model".into()),
        ("LLM_MAX_CONCURRENCY", "64".into()),
        ("LLM_TIMEOUT_S", "10".into()),
    ]
}

/// A `simtree worker` process; killed on drop. Counts the jobs it reported done, and the runs
/// it stopped because it found their claim lost.
struct Worker {
    child: std::process::Child,
    done: Arc<std::sync::atomic::AtomicUsize>,
    lost: Arc<std::sync::atomic::AtomicUsize>,
    /// Jobs it claimed that another process had claimed before (a second attempt or later).
    reclaimed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Worker {
    fn start(pg: &Postgres, env: &[(&'static str, String)], flags: &[&str]) -> Worker {
        use std::io::BufRead;
        let mut child = std::process::Command::new(simtree_e2e::simtree_bin())
            .args(["worker", "--database-url", &pg.url])
            .args(flags)
            .env("RUST_LOG", "simtree=info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn simtree worker");
        let stderr = child.stderr.take().unwrap();
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lost = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reclaimed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (counted, lost_counted, reclaimed_counted) = (done.clone(), lost.clone(), reclaimed.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("job claimed") && !line.contains("attempt=1") {
                    reclaimed_counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                if line.contains("job done") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                if line.contains("lost its job") {
                    lost_counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                if line.contains("WARN") || line.contains("ERROR") {
                    eprintln!("worker: {line}");
                }
            }
        });
        Worker { child, done, lost, reclaimed }
    }

    fn done(&self) -> usize {
        self.done.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The jobs it has finished, once at least `n` (or after 10 s): a job's end is committed
    /// before the worker logs "job done", so a node can read done before its line is counted.
    fn done_at_least(&self, n: usize) -> usize {
        let until = Instant::now() + Duration::from_secs(10);
        while self.done() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.done()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits until `n` processes take jobs (the `workers` table).
fn wait_for_workers(pg: &Postgres, n: usize) {
    let start = Instant::now();
    while pg.sql("SELECT COUNT(*) FROM workers").trim().parse::<usize>().unwrap_or(0) < n {
        assert!(start.elapsed() < Duration::from_secs(20), "the workers did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn jobs_server(pg: &Postgres, env: &[(&'static str, String)], extra: &[&str]) -> simtree_e2e::Server {
    let mut flags = vec!["--database-url", pg.url.as_str(), "--jobs", "--job-lapse-secs", "2"];
    flags.extend_from_slice(extra);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    simtree_e2e::Server::start_env(&flags, &env)
}

async fn statuses(s: &simtree_e2e::Server, tree: u64) -> BTreeMap<u64, String> {
    let (status, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(status, 200, "{g}");
    g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_u64().unwrap(), n["status"].as_str().unwrap_or("").to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fan_out_spreads_over_two_workers_and_looks_as_an_in_process_one() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(40), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker"]);
    let workers =
        [Worker::start(&pg, &env, &["--concurrency", "2"]), Worker::start(&pg, &env, &["--concurrency", "2"])];
    wait_for_workers(&pg, 2);
    let tree = s.create("simple_chat").await;
    let mut watcher = s.watch(&format!("/devui/simtree/{tree}/events")).await;
    let started = Instant::now();
    let children = simtree_e2e::fan_out(&s, tree, 0, 16, 2).await;
    let took = started.elapsed();
    assert_eq!(children.len(), 16);
    let statuses = statuses(&s, tree).await;
    for c in &children {
        assert_eq!(statuses[c], "done", "child {c}");
    }
    let until = Instant::now() + Duration::from_secs(10);
    while workers[0].done() + workers[1].done() < 16 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (a, b) = (workers[0].done(), workers[1].done());
    assert_eq!(a + b, 16, "each child ran once");
    assert!(a > 0 && b > 0, "the work spread over both workers: {a} and {b}");
    // The tree's watcher saw every child start, progress and finish, in order per child.
    let mut seen: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut finished = 0;
    while finished < 16 {
        let m = watcher.next(Duration::from_secs(10)).await.expect("a message");
        let kind = m["type"].as_str().unwrap().to_string();
        if let Some(node) = m["data"]["node"].as_u64() {
            finished += usize::from(kind == "run_finish");
            seen.entry(node).or_default().push(kind);
        }
    }
    for c in &children {
        let kinds = &seen[c];
        assert_eq!(kinds.first().map(String::as_str), Some("attached"), "{c}: {kinds:?}");
        assert_eq!(kinds[1], "run_start", "{c}: {kinds:?}");
        assert!(kinds.iter().any(|k| k == "run_progress"), "{c}: {kinds:?}");
        assert_eq!(kinds.last().map(String::as_str), Some("run_finish"), "{c}: {kinds:?}");
    }
    // The same fan-out in one process (no queue) logs the same entries.
    let env_pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let alone = simtree_e2e::Server::start_env(&[], &env_pairs);
    let other = alone.create("simple_chat").await;
    let theirs = simtree_e2e::fan_out(&alone, other, 0, 16, 2).await;
    for (mine, theirs) in children.iter().zip(&theirs) {
        let a = simtree_e2e::own_entries(&s, tree, *mine).await;
        let b = simtree_e2e::own_entries(&alone, other, *theirs).await;
        assert!(!a.is_empty());
        assert_eq!(a, b, "child {mine}: the job's log differs from the in-process run's");
    }
    eprintln!("16 children over 2 workers in {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_a_worker_mid_fan_out_loses_no_child() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(150), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker"]);
    let mut doomed = Worker::start(&pg, &env, &["--concurrency", "4", "--job-lapse-secs", "2"]);
    let _survivor = Worker::start(&pg, &env, &["--concurrency", "4", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 2);
    let tree = s.create("simple_chat").await;
    let started = Instant::now();
    let fan = s.fan_out_in_background(tree, 0, 3, 16);
    // Once the doomed worker holds some runs, it dies without a word.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let held = pg.sql("SELECT COUNT(*) FROM jobs WHERE status = 'claimed'");
        if held.trim().parse::<u64>().unwrap_or(0) >= 6 || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.kill9();
    let reply =
        tokio::time::timeout(Duration::from_secs(30), fan).await.expect("every child ended within 30 s").unwrap();
    let children: Vec<u64> =
        reply["children"].as_array().unwrap_or_else(|| panic!("{reply}")).iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(children.len(), 16, "{reply}");
    let statuses = statuses(&s, tree).await;
    for c in &children {
        assert_eq!(statuses[c], "done", "child {c}");
        let entries = simtree_e2e::own_entries(&s, tree, *c).await;
        let first = simtree_e2e::own_entries(&s, tree, children[0]).await;
        assert_eq!(entries, first, "child {c}: a re-run child logs as the others (the mock is deterministic)");
    }
    eprintln!("16 children with a worker killed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_kills_its_worker_every_time_ends_failed_after_its_attempts() {
    let pg = Postgres::start();
    // Every request the provider gets kills every worker (as a run that crashes its process).
    let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
    let kill = {
        let pids = pids.clone();
        Arc::new(move || {
            for pid in pids.lock().unwrap().iter() {
                // SAFETY: a signal to a child process of this test.
                unsafe {
                    libc::kill(*pid as i32, libc::SIGKILL);
                }
            }
        })
    };
    let (url, seen) = provider(Duration::from_millis(10), kill).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker", "--job-attempts", "2"]);
    let tree = s.create("simple_chat").await;
    let run = {
        let base = s.base.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/devui/simtree/{tree}/advance"))
                .json(&serde_json::json!({"parent": 0, "turns": 1}))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    let started = Instant::now();
    let mut workers = Vec::new();
    while !run.is_finished() {
        assert!(started.elapsed() < Duration::from_secs(30), "the poisoned run never ended");
        // Keep one worker alive: a new one whenever the last was killed.
        let alive = workers.last_mut().is_some_and(|w: &mut Worker| w.child.try_wait().ok().flatten().is_none());
        if !alive {
            let w = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "1"]);
            pids.lock().unwrap().push(w.child.id());
            workers.push(w);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = run.await.unwrap();
    let error = reply["error"].as_str().unwrap_or_else(|| panic!("{reply}"));
    assert!(error.contains("given up after 2 attempts"), "{error}");
    let child = reply["child"].as_u64().unwrap();
    assert_eq!(statuses(&s, tree).await[&child], "failed");
    assert!(seen.seen.lock().unwrap().len() >= 2, "tried twice");
    // The node shows the error on reload too (it is stored).
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{child}/info")).await;
    assert!(info.to_string().contains("given up after 2 attempts"), "{info}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_run_job_replays_what_its_killed_worker_recorded_and_pays_only_the_rest() {
    let pg = Postgres::start();
    // The third request the provider gets kills the worker that sent it (before it is answered).
    const KILL_AT: usize = 3;
    let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kill = {
        let (pids, count) = (pids.clone(), count.clone());
        Arc::new(move || {
            if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == KILL_AT {
                for pid in pids.lock().unwrap().iter() {
                    // SAFETY: a signal to a child process of this test.
                    unsafe {
                        libc::kill(*pid as i32, libc::SIGKILL);
                    }
                }
            }
        })
    };
    let (url, seen) = provider(Duration::from_millis(20), kill).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker"]);
    let mut first = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "1"]);
    pids.lock().unwrap().push(first.child.id());
    wait_for_workers(&pg, 1);
    let tree = s.create("simple_chat").await;
    let run = {
        let base = s.base.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/devui/simtree/{tree}/advance"))
                .json(&serde_json::json!({"parent": 0, "turns": 3}))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    };
    let start = Instant::now();
    while first.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "the first worker was never killed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _second = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "1"]);
    let reply = tokio::time::timeout(Duration::from_secs(30), run).await.expect("the run ended").unwrap();
    assert!(reply["error"].is_null(), "{reply}");
    let child = reply["child"].as_u64().unwrap();
    assert_eq!(statuses(&s, tree).await[&child], "done");
    // The same advance in one process: how many calls it makes, and its log.
    let (alone_url, alone_seen) = provider(Duration::from_millis(1), Arc::new(|| {})).await;
    let alone_env = llm_env(&alone_url);
    let pairs: Vec<(&str, &str)> = alone_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let alone = simtree_e2e::Server::start_env(&[], &pairs);
    let other = alone.create("simple_chat").await;
    let theirs = simtree_e2e::advance(&alone, other, 0, 3).await;
    let calls = alone_seen.seen.lock().unwrap().len();
    assert!(calls > KILL_AT, "the run makes more calls than the kill comes after ({calls})");
    let paid = seen.seen.lock().unwrap().clone();
    // The two calls recorded before the kill were replayed; only the one in flight was sent again.
    assert_eq!(paid.len(), calls + 1, "each recorded call was paid once");
    assert_eq!(paid[KILL_AT - 1], paid[KILL_AT], "the call in flight at the kill was sent again");
    let distinct: BTreeSet<String> = paid.iter().map(|m| m.to_string()).collect();
    assert_eq!(distinct.len(), calls, "no other request was repeated");
    assert_eq!(
        simtree_e2e::own_entries(&s, tree, child).await,
        simtree_e2e::own_entries(&alone, other, theirs).await,
        "the resumed run logs as an uninterrupted one"
    );
    // Its stored log is the run's, once: the rows the killed attempt left were replaced.
    let stored = pg.sql(&format!("SELECT entries FROM logs WHERE tree = {tree} AND node = {child} ORDER BY idx"));
    let stored = stored.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(stored, simtree_e2e::own_entries(&s, tree, child).await.len());
    // Its node's records hold every call, replayed ones included.
    let (_, calls_view) = s.get(&format!("/devui/simtree/{tree}/node/{child}/calls")).await;
    assert_eq!(calls_view["calls"].as_array().map_or(0, Vec::len), calls, "{calls_view}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_with_jobs_runs_them_itself_and_a_cancel_reaches_the_job() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(100), Arc::new(|| {})).await;
    let env = llm_env(&url);
    // No worker process: the server's own worker takes the runs.
    let s = jobs_server(&pg, &env, &[]);
    wait_for_workers(&pg, 1);
    assert_eq!(pg.sql("SELECT role FROM workers").trim(), "serve");
    let tree = s.create("simple_chat").await;
    let child = simtree_e2e::advance(&s, tree, 0, 1).await;
    assert_eq!(statuses(&s, tree).await[&child], "done");
    // A long run, cancelled while a worker runs it: the node ends cancelled, the job too.
    let long = s.advance_in_background(tree, child, 200);
    let running = s.first_running(tree).await;
    let start = Instant::now();
    while pg.sql(&format!("SELECT status FROM jobs WHERE node = {running}")).trim() != "claimed" {
        assert!(start.elapsed() < Duration::from_secs(10), "never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = s.post(&format!("/devui/simtree/{tree}/node/{running}/cancel"), &serde_json::json!({})).await;
    assert_eq!(status, 200, "{body}");
    let reply = long.await.unwrap();
    assert_eq!(reply["error"], "the run was cancelled", "{reply}");
    assert_eq!(statuses(&s, tree).await[&running], "cancelled");
    // The cancelled node keeps its parent's state and can be advanced from.
    let next = simtree_e2e::advance(&s, tree, running, 1).await;
    assert_eq!(statuses(&s, tree).await[&next], "done");
    // Ended jobs are forgotten (off the reply's path, so soon after it).
    queue_empties(&pg, Duration::from_secs(5)).await;
}

/// Issue 40, item 6: the end of a job run by the server's own worker is handed to the waiting
/// run in memory after its fenced commit (no notification waited for, no read back), and what
/// the server shows then is what the database holds: a server started afresh on it, without
/// jobs, shows the same records and logs — for a one-turn run and for one whose log was partly
/// relayed while it ran (the provider answers after 150 ms, past a log batch's age).
#[tokio::test(flavor = "multi_thread")]
async fn a_job_run_by_the_servers_own_worker_is_handed_over_in_memory_as_it_was_stored() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(150), Arc::new(|| {})).await;
    let mut env = llm_env(&url);
    env.push(("RUST_LOG", "simtree=info".into()));
    let mut s = jobs_server(&pg, &env, &["--lease-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = s.create("simple_chat").await;
    let one = simtree_e2e::advance(&s, tree, 0, 1).await;
    let three = simtree_e2e::advance(&s, tree, one, 3).await;
    // Each job's end is handed over (its line may reach the stderr reader a little after the reply).
    let handed = "job's end handed over in memory";
    let said = s.wait_said_times(handed, 2, Duration::from_secs(5));
    assert_eq!(said.matches(handed).count(), 2, "each job's end is handed over once:\n{said}");
    let before = shown(&s, tree, &[one, three]).await;
    assert!(before.iter().all(|(_, log)| log.len() > 1), "{before:?}");
    queue_empties(&pg, Duration::from_secs(10)).await;
    s.stop();
    let plain = next_server(&["--database-url", pg.url.as_str(), "--no-jobs"], &env);
    assert_eq!(shown(&plain, tree, &[one, three]).await, before);
}

/// The graph's summary of each of `nodes`, with its own log entries.
async fn shown(s: &simtree_e2e::Server, tree: u64, nodes: &[u64]) -> Vec<(serde_json::Value, Vec<serde_json::Value>)> {
    let (status, g) = s.get(&format!("/devui/simtree/{tree}/graph")).await;
    assert_eq!(status, 200, "{g}");
    let mut seen = Vec::new();
    for &node in nodes {
        let summary = g["nodes"].as_array().unwrap().iter().find(|n| n["id"] == node).cloned();
        seen.push((summary.unwrap(), simtree_e2e::own_entries(s, tree, node).await));
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_stopped_with_sigterm_hands_its_run_back_and_another_finishes_it() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(150), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker"]);
    let first = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "30"]);
    wait_for_workers(&pg, 1);
    let tree = s.create("simple_chat").await;
    let run = s.advance_in_background(tree, 0, 3);
    let start = Instant::now();
    while pg.sql("SELECT status FROM jobs").trim() != "claimed" {
        assert!(start.elapsed() < Duration::from_secs(10), "never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: a signal to a child process of this test.
    unsafe {
        libc::kill(first.child.id() as i32, libc::SIGTERM);
    }
    let start = Instant::now();
    while pg.sql("SELECT status || ' ' || attempts FROM jobs").trim() != "queued 0" {
        assert!(start.elapsed() < Duration::from_secs(10), "not handed back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pg.sql("SELECT COUNT(*) FROM workers").trim(), "0", "it left the list");
    // Handed back at once (its 30 s lapse does not apply): the next worker takes it now.
    let second = Worker::start(&pg, &env, &["--concurrency", "1"]);
    let reply =
        tokio::time::timeout(Duration::from_secs(20), run).await.expect("finished by the second worker").unwrap();
    assert!(reply["error"].is_null(), "{reply}");
    assert_eq!(second.done_at_least(1), 1);
    assert_eq!(first.done(), 0);
}

// ---- adoption: a new server takes over the runs a killed one left to jobs ----

/// Starts a server with `flags` and `env` on the database a killed server led, and waits until
/// it leads: it follows while the killed server's lease holds and takes over, in place, once it
/// lapses (adopting the runs left to jobs then).
fn next_server(flags: &[&str], env: &[(&'static str, String)]) -> simtree_e2e::Server {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = simtree_e2e::Server::try_start_env(flags, &env)
        .unwrap_or_else(|e| panic!("the next server did not start: {e}"));
    s.wait_leading(Duration::from_secs(15));
    s
}

/// Waits (up to 20 s) until `workers` worker processes each offer `slots` ABM slots, then for
/// the leader's once-a-second read of the slots on offer.
async fn abm_slots_offered(pg: &Postgres, workers: u64, slots: u64) {
    let until = Instant::now() + Duration::from_secs(20);
    let query = format!("SELECT COUNT(*) FROM workers WHERE role = 'worker' AND abm = {slots}");
    while count(pg, &query) < workers {
        assert!(Instant::now() < until, "the workers offer no ABM slots");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// Waits up to `within` for the queue to forget every job (their nodes show the outcome).
async fn queue_empties(pg: &Postgres, within: Duration) {
    let until = Instant::now() + within;
    while count(pg, "SELECT COUNT(*) FROM jobs") > 0 {
        assert!(Instant::now() < until, "ended jobs stay in the queue");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The number of rows `query` counts.
fn count(pg: &Postgres, query: &str) -> u64 {
    pg.sql(query).trim().parse().unwrap_or(0)
}

/// Reads a tree watcher's opening messages up to its snapshot; returns the snapshot's statuses.
async fn snapshot(w: &mut simtree_e2e::Watcher) -> BTreeMap<u64, String> {
    loop {
        let m = w.next(Duration::from_secs(10)).await.expect("the snapshot");
        if m["type"] == "snapshot" {
            return m["data"]["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| (n["id"].as_u64().unwrap(), n["status"].as_str().unwrap().to_string()))
                .collect();
        }
    }
}

/// Reads a tree watcher until every node of `nodes` has a `run_finish`; returns each node's
/// messages by type, in order.
async fn until_finished(w: &mut simtree_e2e::Watcher, nodes: &[u64], within: Duration) -> BTreeMap<u64, Vec<String>> {
    let mut seen: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let finished = |seen: &BTreeMap<u64, Vec<String>>| {
        nodes.iter().all(|n| seen.get(n).is_some_and(|k| k.iter().any(|k| k == "run_finish")))
    };
    // (One deadline for all: the server's pings would restart a per-message timeout.)
    let read = tokio::time::timeout(within, async {
        while !finished(&seen) {
            let m = w.next(within).await.expect("the socket stayed open");
            if let Some(node) = m["data"]["node"].as_u64() {
                seen.entry(node).or_default().push(m["type"].as_str().unwrap().to_string());
            }
        }
    })
    .await;
    assert!(read.is_ok(), "not every adopted run finished in {within:?}: {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_fan_out_is_followed_by_one_that_adopts_its_jobs_and_pays_no_call_twice() {
    let pg = Postgres::start();
    // The worker's provider counts the fan-out's calls; the servers have one of their own.
    let (url, provided) = provider(Duration::from_millis(250), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let (own_url, _) = provider(Duration::from_millis(250), Arc::new(|| {})).await;
    let own_env = llm_env(&own_url);
    let flags =
        ["--database-url", pg.url.as_str(), "--jobs", "--job-lapse-secs", "2", "--no-worker", "--lease-secs", "2"];
    let own_pairs: Vec<(&str, &str)> = own_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut first = simtree_e2e::Server::start_env(&flags, &own_pairs);
    let worker = Worker::start(&pg, &env, &["--concurrency", "8", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = first.create("simple_chat").await;
    let _fan = {
        let base = first.base.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/devui/simtree/{tree}/advance_multi"))
                .json(&serde_json::json!({"parent": 0, "turns": 6, "count": 8}))
                .send()
                .await
        })
    };
    // Once the worker runs all eight children and each has made a call, the server dies.
    let until = Instant::now() + Duration::from_secs(20);
    while count(&pg, "SELECT COUNT(*) FROM jobs WHERE status = 'claimed'") < 8
        || count(&pg, "SELECT COUNT(DISTINCT node) FROM job_calls") < 8
    {
        assert!(Instant::now() < until, "the children never all ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.stop(); // SIGKILL: no lease released, no job touched
    let killed = Instant::now();
    let children: Vec<u64> = pg
        .sql(&format!("SELECT node FROM jobs WHERE tree = {tree} ORDER BY node"))
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(children.len(), 8, "{children:?}");

    let second = next_server(&flags, &own_env);
    eprintln!("the next server started {:?} after the kill", killed.elapsed());
    let mut watcher = second.watch(&format!("/devui/simtree/{tree}/events")).await;
    let at_join = snapshot(&mut watcher).await;
    let running: Vec<u64> = children.iter().copied().filter(|c| at_join[c] == "running").collect();
    assert!(running.len() >= 6, "the adopted children are running, not interrupted: {at_join:?}");
    for c in &children {
        assert!(matches!(at_join[c].as_str(), "running" | "done"), "child {c}: {at_join:?}");
    }
    let seen = until_finished(&mut watcher, &running, Duration::from_secs(40)).await;
    assert!(
        running.iter().any(|c| seen[c].iter().any(|k| k == "run_progress")),
        "the new server relays the workers' logs: {seen:?}"
    );
    let ended = statuses(&second, tree).await;
    for c in &children {
        assert_eq!(ended[c], "done", "child {c}");
    }
    assert_eq!(worker.done_at_least(8), 8, "each child ran once, on the worker that had it");
    // Nothing was cancelled or taken over. (A heartbeat that ran just after a job's end was
    // committed found the claim gone and stopped the task before it said "job done": on a busy
    // machine, one child in a few runs.)
    assert_eq!(worker.lost.load(std::sync::atomic::Ordering::SeqCst), 0, "no claim was lost");
    // The ended jobs are forgotten once their nodes show them.
    queue_empties(&pg, Duration::from_secs(5)).await;
    // The same fan-out in one process logs the same entries and makes as many calls: none of
    // the adopted runs' calls was paid twice.
    let calls = provided.seen.lock().unwrap().len();
    let (alone_url, alone_seen) = provider(Duration::from_millis(1), Arc::new(|| {})).await;
    let alone_env = llm_env(&alone_url);
    let alone_pairs: Vec<(&str, &str)> = alone_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let alone = simtree_e2e::Server::start_env(&[], &alone_pairs);
    let other = alone.create("simple_chat").await;
    let theirs = simtree_e2e::fan_out(&alone, other, 0, 8, 6).await;
    for (mine, theirs) in children.iter().zip(&theirs) {
        let a = simtree_e2e::own_entries(&second, tree, *mine).await;
        let b = simtree_e2e::own_entries(&alone, other, *theirs).await;
        assert!(!a.is_empty());
        assert_eq!(a, b, "child {mine}: the adopted run's log differs from an in-process run's");
    }
    let fan_calls = alone_seen.seen.lock().unwrap().len();
    assert!(fan_calls >= 8 * 6, "{fan_calls} calls");
    assert_eq!(calls, fan_calls, "the adopted runs paid no call twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_worker_and_server_both_died_is_re_claimed_replayed_and_adopted() {
    let pg = Postgres::start();
    let (url, provided) = provider(Duration::from_millis(200), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let flags = queueing(&pg);
    let pairs = env_pairs(&env);
    let mut first = simtree_e2e::Server::start_env(&flags, &pairs);
    let mut doomed = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = first.create("simple_chat").await;
    let _run = first.advance_in_background(tree, 0, 4);
    // Once the run has recorded a few calls, its worker and the server die together.
    let until = Instant::now() + Duration::from_secs(20);
    while count(&pg, "SELECT COUNT(*) FROM job_calls") < 3 {
        assert!(Instant::now() < until, "the run never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.kill9();
    first.stop();
    let node: u64 = pg.sql(&format!("SELECT node FROM jobs WHERE tree = {tree}")).trim().parse().unwrap();
    let recorded = count(&pg, "SELECT COUNT(*) FROM job_calls");
    let sent = provided.seen.lock().unwrap().len();
    assert!(
        count(&pg, &format!("SELECT COUNT(*) FROM nodes WHERE tree = {tree} AND id = {node} AND status = 'running'"))
            == 1,
        "the node was left running"
    );

    let second = next_server(&flags, &env);
    let mut watcher = second.watch(&format!("/devui/simtree/{tree}/events")).await;
    assert_eq!(snapshot(&mut watcher).await[&node], "running", "adopted, not interrupted");
    // A new worker re-claims the job once the dead one's claim lapses, and finishes it.
    let rescuer = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "2"]);
    let seen = until_finished(&mut watcher, &[node], Duration::from_secs(40)).await;
    assert_eq!(seen[&node].last().map(String::as_str), Some("run_finish"), "{seen:?}");
    assert_eq!(statuses(&second, tree).await[&node], "done");
    assert_eq!(rescuer.done_at_least(1), 1);
    // The log is the run's, once, as an in-process run of it.
    let (alone_url, alone_seen) = provider(Duration::from_millis(1), Arc::new(|| {})).await;
    let alone_env = llm_env(&alone_url);
    let alone_pairs: Vec<(&str, &str)> = alone_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let alone = simtree_e2e::Server::start_env(&[], &alone_pairs);
    let other = alone.create("simple_chat").await;
    let theirs = simtree_e2e::advance(&alone, other, 0, 4).await;
    assert_eq!(
        simtree_e2e::own_entries(&second, tree, node).await,
        simtree_e2e::own_entries(&alone, other, theirs).await
    );
    // What was recorded before the kill was replayed: only calls in flight then (at most the
    // ones sent but not recorded) were paid again.
    let calls = alone_seen.seen.lock().unwrap().len();
    let total = provided.seen.lock().unwrap().len();
    let in_flight = sent - recorded as usize;
    assert!(recorded >= 3 && calls > recorded as usize, "{recorded} recorded of {calls}");
    assert_eq!(total, calls + in_flight, "sent {sent}, recorded {recorded}, in all {total}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_adopted_run_can_be_cancelled_and_one_whose_job_dies_fails_with_the_reason() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(100), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let flags =
        ["--database-url", pg.url.as_str(), "--jobs", "--no-worker", "--job-attempts", "1", "--lease-secs", "2"];
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut first = simtree_e2e::Server::start_env(&flags, &pairs);
    let mut doomed = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "1"]);
    wait_for_workers(&pg, 1);
    // One run claimed by the worker (it will die with it, on its only attempt) and one queued
    // behind it.
    let (claimed_tree, queued_tree) = (first.create("simple_chat").await, first.create("simple_chat").await);
    let _a = first.advance_in_background(claimed_tree, 0, 4);
    let until = Instant::now() + Duration::from_secs(20);
    while count(&pg, "SELECT COUNT(*) FROM job_calls") < 1 {
        assert!(Instant::now() < until, "the run never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _b = first.advance_in_background(queued_tree, 0, 200);
    while count(&pg, "SELECT COUNT(*) FROM jobs WHERE status = 'queued'") < 1 {
        assert!(Instant::now() < until, "the second run was never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.kill9();
    first.stop();

    let second = next_server(&flags, &env);
    let mut claimed_w = second.watch(&format!("/devui/simtree/{claimed_tree}/events")).await;
    let mut queued_w = second.watch(&format!("/devui/simtree/{queued_tree}/events")).await;
    let (claimed, queued) = (snapshot(&mut claimed_w).await, snapshot(&mut queued_w).await);
    assert_eq!((claimed[&1].as_str(), queued[&1].as_str()), ("running", "running"));
    // A cancel reaches the adopted queued run: nobody will ever run it.
    let (status, body) =
        second.post(&format!("/devui/simtree/{queued_tree}/node/1/cancel"), &serde_json::json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(statuses(&second, queued_tree).await[&1], "cancelled");
    let (msgs, ok) = queued_w.until(Duration::from_secs(5), |m| m["type"] == "run_finish").await;
    assert!(ok, "{msgs:?}");
    // The claimed one lost its worker on its only attempt: the next claimer gives it up, and
    // the adopted node fails with the reason instead of running forever.
    let _next = Worker::start(&pg, &env, &["--concurrency", "1", "--job-lapse-secs", "1"]);
    let (msgs, ok) = claimed_w.until(Duration::from_secs(20), |m| m["type"] == "run_finish").await;
    assert!(ok, "{msgs:?}");
    let finish = msgs.last().unwrap();
    assert_eq!(finish["data"]["status"], "failed", "{finish}");
    let error = finish["data"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("given up after 1 attempts"), "{error}");
    assert_eq!(statuses(&second, claimed_tree).await[&1], "failed");
    queue_empties(&pg, Duration::from_secs(5)).await;
}

/// Issue 40, item 3: a sweep whose leader is killed -9 while its replicates run as jobs on a
/// worker goes on by itself under the next server: it adopts their jobs and waits for them
/// (none interrupted, none run again), and the table ends with every replicate measured once.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_whose_leader_is_killed_is_finished_by_the_next_server_adopting_its_replicates() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(150), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let flags = queueing(&pg);
    let pairs = env_pairs(&env);
    let mut first = simtree_e2e::Server::start_env(&flags, &pairs);
    let worker = Worker::start(&pg, &env, &["--concurrency", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = first.create("simple_chat").await;
    let (status, body) = first
        .post(
            &format!("/devui/simtree/{tree}/sweep"),
            &serde_json::json!({"parent": 0, "turns": 6, "replicates": 2,
                "axes": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text", "values": ["rain"]}],
                "metrics": {"actions": "count:action_end"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let sweep = body["sweep"].as_u64().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while count(&pg, "SELECT COUNT(DISTINCT node) FROM job_calls") < 2 {
        assert!(Instant::now() < until, "the replicates never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.stop();
    let second = next_server(&flags, &env);
    let table = sweep_finished(&second, tree, sweep).await;
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(2), Some(0)), "{table}");
    let ended = statuses(&second, tree).await;
    assert!(ended.values().all(|s| s == "done"), "every node is done (none interrupted and run again): {ended:?}");
    assert_eq!(ended.len(), 1 + 1 + 2, "root, cell, two replicates: {ended:?}");
    assert_eq!(worker.done_at_least(2), 2, "each replicate ran once");
    queue_empties(&pg, Duration::from_secs(10)).await;
}

/// Issue 40, item 3: a sweep of the SIR epidemic (3 infection rates × 4 replicates) whose
/// leader is killed -9 mid-sweep is finished by the follower without a person: each replicate
/// is measured exactly once, and the table equals that of the same sweep run in one process.
/// Here no process offers ABM slots (`--abm-workers 0`), so the models ran in the leader's
/// process: those the kill cut short run again under the follower with their seeds.
#[tokio::test(flavor = "multi_thread")]
async fn an_abm_sweep_whose_leader_is_killed_mid_sweep_is_finished_by_the_follower_as_one_process_would() {
    abm_sweep_under_a_killed_leader(&["--abm-workers", "0"], true).await;
}

/// The same with the models as jobs on the servers' own workers: the leader's dies with it, its
/// runs are adopted by the follower and re-claimed by the follower's worker (none interrupted).
#[tokio::test(flavor = "multi_thread")]
async fn an_abm_sweep_on_workers_whose_leader_is_killed_is_finished_by_the_follower_as_one_process_would() {
    abm_sweep_under_a_killed_leader(&[], false).await;
}

/// A tree of the SIR epidemic with seed `seed` on `s`, and sweep `spec` started from its root:
/// `(tree, sweep)`.
async fn sir_sweep(s: &simtree_e2e::Server, seed: u64, spec: &serde_json::Value) -> (u64, u64) {
    let (st, created) = s.post("/devui/simtree", &serde_json::json!({"scenario": "sir_network", "seed": seed})).await;
    assert_eq!(st, 200, "{created}");
    let tree = created["id"].as_u64().unwrap();
    let (st, body) = s.post(&format!("/devui/simtree/{tree}/sweep"), spec).await;
    assert_eq!(st, 200, "{body}");
    (tree, body["sweep"].as_u64().unwrap())
}

/// Runs the sweep above on a leader and a follower started with `extra` flags, kills the
/// leader after the first replicate, and checks the follower's table; `cut`: the kill leaves
/// interrupted replicates (run again) rather than adopted ones.
async fn abm_sweep_under_a_killed_leader(extra: &[&str], cut: bool) {
    let pg = Postgres::start();
    let mut flags = vec!["--database-url", pg.url.as_str(), "--jobs", "--lease-secs", "2", "--job-lapse-secs", "2"];
    flags.extend_from_slice(extra);
    let mut leader = simtree_e2e::Server::start_with(&flags);
    let follower = simtree_e2e::Server::start_with(&flags);
    let alone = simtree_e2e::Server::start_with(&[]);
    let spec = serde_json::json!({
        "parent": 0, "turns": 300, "replicates": 4, "seed": 11,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.02, 0.1, 0.3]}],
        "metrics": {"peak": "max:globalVariable.infectedCount", "infected": "last:globalVariable.infectedCount"}
    });
    let started = [sir_sweep(&leader, 7, &spec).await, sir_sweep(&alone, 7, &spec).await];
    let (tree, sweep) = started[0];
    let path = format!("/devui/simtree/{tree}/sweep/{sweep}");
    // Killed once some replicates are measured and most are not.
    let until = Instant::now() + Duration::from_secs(120);
    let mut resets = 0;
    loop {
        // The leader runs the models itself here and has reset a poll once in three runs
        // under the full suite's load: a failed poll is tried again (a few at most).
        let table = match leader.http.get(leader.url(&path)).send().await {
            Ok(r) => r.json::<serde_json::Value>().await.unwrap_or_default(),
            Err(e) => {
                resets += 1;
                assert!(resets <= 5, "the leader failed {resets} polls: {e}");
                serde_json::Value::Null
            }
        };
        if table["done"].as_u64() >= Some(1) {
            assert!(table["pending"].as_u64() >= Some(4), "killed too late: {table}");
            break;
        }
        assert!(Instant::now() < until, "the sweep did not start: {table}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leader.stop(); // SIGKILL
    follower.wait_leading(Duration::from_secs(15));
    let table = sweep_finished(&follower, tree, sweep).await;
    let reference = sweep_finished(&alone, started[1].0, started[1].1).await;
    assert_eq!(
        (table["total"].as_u64(), table["done"].as_u64(), table["failed"].as_u64()),
        (Some(12), Some(12), Some(0)),
        "every replicate measured: {table}"
    );
    let children: Vec<u64> = table["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["children"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()))
        .collect();
    let distinct: std::collections::BTreeSet<u64> = children.iter().copied().collect();
    assert_eq!((children.len(), distinct.len()), (12, 12), "a replicate listed twice: {table}");
    let ended = statuses(&follower, tree).await;
    for c in &children {
        assert_eq!(ended[c], "done", "replicate {c}: {ended:?}");
    }
    let interrupted = ended.values().filter(|s| *s == "interrupted").count();
    assert_eq!(interrupted >= 1, cut, "replicates cut short: {ended:?}");
    assert_eq!(ended.len(), 1 + 3 + 12 + interrupted, "one run again per cut replicate: {ended:?}");
    // Same seeds, same numbers: each cell's metrics and effects as in one process.
    for (i, (a, b)) in table["cells"].as_array().unwrap().iter().zip(reference["cells"].as_array().unwrap()).enumerate()
    {
        assert_eq!(a["cell"], b["cell"]);
        assert_eq!(a["metrics"], b["metrics"], "cell {i}'s metrics differ from one process");
        assert_eq!(a["effects"], b["effects"], "cell {i}'s effects differ from one process");
    }
}

/// Polls a sweep's table until no run is pending.
async fn sweep_finished(s: &simtree_e2e::Server, tree: u64, sweep: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (st, table) = s.get(&format!("/devui/simtree/{tree}/sweep/{sweep}")).await;
        assert_eq!(st, 200, "{table}");
        if table["pending"] == 0 {
            return table;
        }
        assert!(Instant::now() < deadline, "the sweep did not finish: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A sweep's replicates each run with a seed of their own; run as jobs they must get the same
/// seeds as in one process (they ran with the parent's before, so replicates came out alike).
#[tokio::test(flavor = "multi_thread")]
async fn a_sweeps_replicates_run_as_jobs_with_their_own_seeds_as_in_one_process() {
    let pg = Postgres::start();
    let s = simtree_e2e::Server::start_with(&["--database-url", pg.url.as_str()]);
    let alone = simtree_e2e::Server::start_with(&[]);
    let body = serde_json::json!({
        "scenario": "landlord", "parent": 0, "turns": 40, "replicates": 3, "seed": 5,
        "axes": [{"label": "stakes", "op": {"op": "scene_state_patch", "updates": {}},
                  "field": "updates.score_multiplier", "values": [1]}],
        "metrics": {"plays": "count:action_end"}
    });
    let mut replicates = Vec::new();
    for server in [&s, &alone] {
        let (st, created) = server
            .post("/devui/simtree", &serde_json::json!({"scenario": "landlord", "seed": 5, "llm": "scripted"}))
            .await;
        assert_eq!(st, 200, "{created}");
        let tree = created["id"].as_u64().unwrap();
        let (st, started) = server.post(&format!("/devui/simtree/{tree}/sweep"), &body).await;
        assert_eq!(st, 200, "{started}");
        let table = sweep_finished(server, tree, started["sweep"].as_u64().unwrap()).await;
        assert_eq!(table["failed"], 0, "{table}");
        let children: Vec<u64> =
            table["cells"][0]["children"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
        let mut logs = Vec::new();
        for c in children {
            logs.push(simtree_e2e::own_entries(server, tree, c).await);
        }
        replicates.push(logs);
    }
    let (queued, in_process) = (&replicates[0], &replicates[1]);
    assert_eq!(queued.len(), 3);
    assert_ne!(in_process[0], in_process[1], "replicates with their own seeds differ");
    for (k, (a, b)) in queued.iter().zip(in_process).enumerate() {
        assert!(!a.is_empty());
        assert_eq!(a, b, "replicate {k}: run as a job it differs from the in-process run");
    }
}

/// Issue 40, item 3: an exploration whose leader is killed -9 in the middle of a round goes on by
/// itself under the follower that takes over — no Resume — and ends with every replicate
/// counted once and `runs_used` within its budget. Its replicates were jobs on a worker, so the
/// follower adopts them and waits for them instead of running them again (none interrupted).
#[tokio::test(flavor = "multi_thread")]
async fn an_exploration_whose_leader_is_killed_mid_round_finishes_under_the_follower_counting_each_replicate_once() {
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(120), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let flags = queueing(&pg);
    let pairs = env_pairs(&env);
    let mut leader = simtree_e2e::Server::start_env(&flags, &pairs);
    let follower = simtree_e2e::Server::start_env(&flags, &pairs);
    let worker = Worker::start(&pg, &env, &["--concurrency", "4", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = leader.create("simple_chat").await;
    let budget = 16;
    let (status, started) = leader
        .post(
            &format!("/devui/simtree/{tree}/explore"),
            &serde_json::json!({"parent": 0, "turns": 4, "seed": 3,
                "objective": {"metric": "count:action_end", "goal": "max"},
                "space": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                           "values": ["rain", "sun", "snow", "wind"]}],
                "replicates": 2, "budget": {"runs": budget}}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    let id = started["explore"].as_u64().unwrap();
    let path = format!("/devui/simtree/{tree}/explore/{id}");
    // Kill the leader once its first round is under way on the worker and not done.
    let until = Instant::now() + Duration::from_secs(30);
    while count(&pg, "SELECT COUNT(DISTINCT node) FROM job_calls") < 2 {
        assert!(Instant::now() < until, "the replicates never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, before) = leader.get(&path).await;
    assert_eq!(before["status"], "running", "{before}");
    assert_eq!(before["round"], 1, "{before}");
    leader.stop(); // SIGKILL
    follower.wait_leading(Duration::from_secs(15));
    let table = explore_finished(&follower, tree, id).await;
    assert_eq!(table.status, simtree_shared::ExploreStatus::Done, "{table:?}");
    assert!(table.runs_used <= budget, "{table:?}");
    assert!(table.round >= 2, "a round after the kill was run: {table:?}");
    let children: Vec<u64> = table.candidates.iter().flat_map(|c| c.children.clone()).collect();
    let distinct: std::collections::BTreeSet<u64> = children.iter().copied().collect();
    assert_eq!(distinct.len(), children.len(), "a replicate listed twice: {table:?}");
    assert_eq!(children.len() as u64, table.runs_used, "every run counted once: {table:?}");
    for c in &table.candidates {
        assert_eq!((c.pending, c.failed), (0, 0), "every replicate has its value: {c:?}");
        assert_eq!(c.n, c.children.len(), "{c:?}");
    }
    // The replicates the dead leader had queued were adopted, not run again: none of the
    // tree's nodes is interrupted, and each listed replicate ran once on the worker.
    let ended = statuses(&follower, tree).await;
    assert!(ended.values().all(|s| s == "done"), "every node is done (none interrupted and run again): {ended:?}");
    assert_eq!(worker.done_at_least(children.len()), children.len());
    assert_eq!(worker.lost.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// The log levels that make a server say what runs in its own process ("run started") and what
/// its own worker claims ("job claimed").
const RUNS_LOGGED: (&str, &str) = ("RUST_LOG", "warn,simtree::workbench::run=info,simtree::workbench::jobs=info");

/// Asserts that server `s`, started with [`RUNS_LOGGED`], ran no run: none in its process and
/// none on its own worker (`name` says which server in the message).
fn ran_no_run(s: &simtree_e2e::Server, name: &str) {
    let said = s.output();
    // (The harness keeps a server's first 64 KiB: a longer log could hide a line.)
    assert!(said.len() < 60 << 10, "{name}'s log outgrew what the harness keeps");
    assert!(!said.contains("run started"), "a run in {name}'s process:\n{said}");
    assert!(!said.contains("job claimed"), "{name}'s own worker took a run:\n{said}");
}

/// Issue 40, item 2: runs of agent-based models are jobs. With two `simtree worker` processes
/// offering ABM slots, none runs on the leader (which has a worker of its own: it leaves them to
/// the workers), and a worker killed -9 in the middle of one loses nothing: its run is
/// re-claimed by the other, rebuilt from the stored model, seed and history, and the sweep's
/// table equals that of the same sweep run in one process.
#[tokio::test(flavor = "multi_thread")]
async fn abm_runs_go_to_the_workers_and_a_killed_workers_run_is_re_claimed_with_the_same_result() {
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str(), "--jobs", "--job-lapse-secs", "2"];
    // What runs in the leader's process, and what its own worker claims, is logged.
    let leader = simtree_e2e::Server::start_env(&flags, &[RUNS_LOGGED]);
    let mut a = Worker::start(&pg, &[], &["--abm-workers", "2", "--job-lapse-secs", "2"]);
    let b = Worker::start(&pg, &[], &["--abm-workers", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 3);
    abm_slots_offered(&pg, 2, 2).await;
    let alone = simtree_e2e::Server::start_with(&[]);
    let spec = serde_json::json!({
        "parent": 0, "turns": 300, "replicates": 3, "seed": 4,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.05, 0.25]}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    });
    let started = [sir_sweep(&leader, 9, &spec).await, sir_sweep(&alone, 9, &spec).await];
    // Worker a is killed while it runs a model.
    let a_claims = format!(
        "SELECT COUNT(*) FROM jobs WHERE kind = 'abm' AND status = 'claimed' AND claimed_by LIKE '%/{}/%'",
        a.child.id()
    );
    let until = Instant::now() + Duration::from_secs(60);
    while count(&pg, &a_claims) == 0 {
        assert!(Instant::now() < until, "worker a took no ABM run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.kill9();
    let table = sweep_finished(&leader, started[0].0, started[0].1).await;
    let reference = sweep_finished(&alone, started[1].0, started[1].1).await;
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(6), Some(0)), "{table}");
    let ended = statuses(&leader, started[0].0).await;
    assert!(ended.values().all(|s| s == "done"), "nothing lost: {ended:?}");
    assert_eq!(ended.len(), 1 + 2 + 6, "no run was made twice: {ended:?}");
    for (i, (x, y)) in table["cells"].as_array().unwrap().iter().zip(reference["cells"].as_array().unwrap()).enumerate()
    {
        assert_eq!(x["metrics"], y["metrics"], "cell {i} differs from one process");
    }
    // Per process: the leader ran none (neither in its process nor on its own worker); worker
    // b re-claimed what a was running.
    ran_no_run(&leader, "the leader");
    assert!(leader.output().contains("run queued as a job"));
    assert!(b.reclaimed.load(std::sync::atomic::Ordering::SeqCst) >= 1, "b took a's run over");
    assert!(b.done_at_least(1) >= 1);
}

/// Issue 40's team test: one leader, two followers and three `simtree worker` processes (one
/// Mesa worker each) run a sweep of the SIR epidemic (4 infection rates × 10 replicates) and an
/// exploration of the same rates at once. The leader is killed -9 while both are under way (the
/// exploration in a round, the sweep with replicates measured and most not), then, once a
/// follower leads, a worker in the middle of a model. Both finish by themselves under the new
/// leader; every replicate is counted once (each listed once, each ran to its end once on a
/// worker, no node made twice); the numbers are those of the same sweep and exploration run in
/// one process; and no model ran on any server, leader or follower, while workers offered slots.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_finishes_an_abm_sweep_and_an_exploration_through_a_killed_leader_and_a_killed_worker() {
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str(), "--jobs", "--lease-secs", "2", "--job-lapse-secs", "2"];
    let mut leader = simtree_e2e::Server::start_env(&flags, &[RUNS_LOGGED]);
    leader.wait_leading(Duration::from_secs(10));
    let followers = [
        simtree_e2e::Server::start_env(&flags, &[RUNS_LOGGED]),
        simtree_e2e::Server::start_env(&flags, &[RUNS_LOGGED]),
    ];
    let one = ["--abm-workers", "1", "--concurrency", "1", "--job-lapse-secs", "2"];
    let mut workers = [Worker::start(&pg, &[], &one), Worker::start(&pg, &[], &one), Worker::start(&pg, &[], &one)];
    // Three servers' own workers and the three workers.
    wait_for_workers(&pg, 6);
    abm_slots_offered(&pg, 3, 1).await;
    let alone = simtree_e2e::Server::start_with(&[]);
    let rates = [0.03, 0.08, 0.15, 0.3];
    let rate_axis = serde_json::json!([{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                                        "field": "value", "values": rates}]);
    let explore = serde_json::json!({"parent": 0, "turns": 80, "seed": 21,
        "objective": {"metric": "max:globalVariable.infectedCount", "goal": "min"},
        "space": rate_axis, "replicates": 2, "budget": {"runs": 16}});
    let sweep = serde_json::json!({"parent": 0, "turns": 80, "replicates": 10, "seed": 11, "axes": rate_axis,
        "metrics": {"peak": "max:globalVariable.infectedCount", "infected": "last:globalVariable.infectedCount"}});
    // The exploration first (its first round's jobs are the oldest), then the sweep, on one tree.
    let mut started = Vec::new();
    for s in [&leader, &alone] {
        let (st, created) = s.post("/devui/simtree", &serde_json::json!({"scenario": "sir_network", "seed": 5})).await;
        assert_eq!(st, 200, "{created}");
        let tree = created["id"].as_u64().unwrap();
        let (st, e) = s.post(&format!("/devui/simtree/{tree}/explore"), &explore).await;
        assert_eq!(st, 200, "{e}");
        let (st, w) = s.post(&format!("/devui/simtree/{tree}/sweep"), &sweep).await;
        assert_eq!(st, 200, "{w}");
        started.push((tree, e["explore"].as_u64().unwrap(), w["sweep"].as_u64().unwrap()));
    }
    let (tree, explore_id, sweep_id) = started[0];
    let explore_path = format!("/devui/simtree/{tree}/explore/{explore_id}");
    let sweep_path = format!("/devui/simtree/{tree}/sweep/{sweep_id}");
    // The leader dies once some of the sweep's replicates are measured and most are not, while
    // the exploration has replicates of a round still to come.
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, swept) = leader.get(&sweep_path).await;
        let (_, explored) = leader.get(&explore_path).await;
        let exploring: u64 =
            explored["candidates"].as_array().map_or(0, |c| c.iter().map(|c| c["pending"].as_u64().unwrap_or(0)).sum());
        if swept["done"].as_u64() >= Some(1) {
            assert!(swept["pending"].as_u64() >= Some(10), "killed too late: {swept}");
            assert!(explored["status"] == "running" && exploring > 0, "the exploration is not mid-round: {explored}");
            break;
        }
        assert!(Instant::now() < until, "the sweep did not start: {swept}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leader.stop(); // SIGKILL
    let until = Instant::now() + Duration::from_secs(15);
    let next = loop {
        if let Some(f) = followers.iter().find(|f| f.leads()) {
            break f;
        }
        assert!(Instant::now() < until, "no follower took over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Then a worker dies in the middle of a model it claimed under the new leader (a claim
    // younger than the models take, so that it is killed before it ends it).
    let until = Instant::now() + Duration::from_secs(60);
    let doomed = loop {
        let holder = pg.sql(
            "SELECT claimed_by FROM jobs WHERE kind = 'abm' AND status = 'claimed'
               AND updated >= (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT - 100 LIMIT 1",
        );
        let holder = holder.trim();
        if let Some(k) =
            workers.iter().position(|w| !holder.is_empty() && holder.contains(&format!("/{}/", w.child.id())))
        {
            break k;
        }
        assert!(Instant::now() < until, "no worker took a model after the takeover");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    workers[doomed].kill9();
    let (_, swept) = next.get(&sweep_path).await;
    assert!(swept["pending"].as_u64() >= Some(1), "the worker died after the sweep: {swept}");
    // Both finish without a person, each as in one process.
    let table = sweep_finished(next, tree, sweep_id).await;
    let reference = sweep_finished(&alone, started[1].0, started[1].2).await;
    let explored = explore_finished(next, tree, explore_id).await;
    let explored_alone = explore_finished(&alone, started[1].0, started[1].1).await;
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(40), Some(0)), "{table}");
    for (i, (a, b)) in table["cells"].as_array().unwrap().iter().zip(reference["cells"].as_array().unwrap()).enumerate()
    {
        assert_eq!(a["metrics"], b["metrics"], "cell {i}'s metrics differ from one process");
        assert_eq!(a["effects"], b["effects"], "cell {i}'s effects differ from one process");
    }
    assert_eq!(explored.status, simtree_shared::ExploreStatus::Done, "{explored:?}");
    assert_eq!(explored.runs_used, explored_alone.runs_used, "{explored:?}");
    assert!(explored.runs_used <= 16, "{explored:?}");
    let summary = |t: &simtree_shared::ExploreTable| {
        t.candidates
            .iter()
            .map(|c| (c.point.clone(), c.n, c.mean, c.alive, c.dropped_after, c.pending, c.failed))
            .collect::<Vec<_>>()
    };
    assert_eq!(summary(&explored), summary(&explored_alone), "the exploration differs from one process");
    assert_eq!(explored.best.as_ref().map(|b| &b.point), explored_alone.best.as_ref().map(|b| &b.point));
    // Every replicate counted once: listed once, no node made twice, none interrupted.
    let swept: Vec<u64> = table["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["children"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()))
        .collect();
    let explored_runs: Vec<u64> = explored.candidates.iter().flat_map(|c| c.children.clone()).collect();
    assert_eq!(explored_runs.len() as u64, explored.runs_used, "{explored:?}");
    let replicates: BTreeSet<u64> = swept.iter().chain(&explored_runs).copied().collect();
    let runs = swept.len() + explored_runs.len();
    assert_eq!(replicates.len(), runs, "a replicate listed twice");
    let ended = statuses(next, tree).await;
    assert!(ended.values().all(|s| s == "done"), "every node is done (none interrupted and run again): {ended:?}");
    assert_eq!(ended.len(), 1 + 4 + 4 + runs, "root, four cells, four candidates and each replicate once: {ended:?}");
    // Per process: each replicate ran to its end once, on a worker; no server ran a model.
    let until = Instant::now() + Duration::from_secs(10);
    while workers.iter().map(Worker::done).sum::<usize>() < runs && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_worker: Vec<usize> = workers.iter().map(Worker::done).collect();
    assert_eq!(per_worker.iter().sum::<usize>(), runs, "{per_worker:?}");
    assert!(
        workers.iter().any(|w| w.reclaimed.load(std::sync::atomic::Ordering::SeqCst) >= 1),
        "the killed worker's model was claimed again"
    );
    ran_no_run(&leader, "the killed leader");
    for (k, f) in followers.iter().enumerate() {
        ran_no_run(f, &format!("follower {k}"));
    }
    queue_empties(&pg, Duration::from_secs(10)).await;
    eprintln!(
        "{runs} replicates over the workers {per_worker:?} (worker {doomed} killed); exploration best {:?}",
        explored.best.as_ref().map(|b| &b.point)
    );
}

/// Polls an exploration's table until it stops running.
async fn explore_finished(s: &simtree_e2e::Server, tree: u64, id: u64) -> simtree_shared::ExploreTable {
    let path = format!("/devui/simtree/{tree}/explore/{id}");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (st, table) = s.get(&path).await;
        assert_eq!(st, 200, "{table}");
        assert_ne!(table["status"], "interrupted", "it waits for nobody: {table}");
        if table["status"] != "running" {
            return serde_json::from_value(table).unwrap();
        }
        assert!(Instant::now() < deadline, "the exploration did not finish: {table}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 40, item 5: a leader stopped with SIGTERM while a fan-out of 50 runs waits in the queue
/// (a worker takes two at a time) hands them over instead of cancelling them after its grace
/// period: their nodes stay running, the follower takes the released lease at once, adopts
/// them, and every one finishes, each run once (a second worker joins after the handover, to
/// keep the test short).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_a_queue_of_fifty_runs_hands_them_all_to_the_follower() {
    const RUNS: u64 = 50;
    let pg = Postgres::start();
    let (url, _) = provider(Duration::from_millis(100), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let mut flags = queueing(&pg).to_vec();
    flags.extend(["--shutdown-grace-secs", "1"]);
    let pairs = env_pairs(&env);
    let mut leader = simtree_e2e::Server::start_env(&flags, &pairs);
    leader.wait_leading(Duration::from_secs(10));
    let follower = simtree_e2e::Server::start_env(&flags, &pairs);
    let worker = Worker::start(&pg, &env, &["--concurrency", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = leader.create("simple_chat").await;
    // The fan-out's request dies with the leader; its children do not.
    let request = {
        let url = leader.url(&format!("/devui/simtree/{tree}/advance_multi"));
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(url)
                .json(&serde_json::json!({"parent": 0, "turns": 3, "count": RUNS}))
                .send()
                .await
        })
    };
    let until = Instant::now() + Duration::from_secs(20);
    while worker.done() < 1 {
        assert!(Instant::now() < until, "no run ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let queued = count(&pg, "SELECT COUNT(*) FROM jobs WHERE status = 'queued'");
    assert!(queued >= RUNS - 5, "a queue when the stop comes: {queued}");
    leader.terminate();
    drop(request);
    follower.wait_leading(Duration::from_secs(10));
    let handed = count(&pg, "SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'claimed')");
    assert!(handed >= RUNS - 10, "the queue was handed over: {handed} jobs left");
    let helper = Worker::start(&pg, &env, &["--concurrency", "4", "--job-lapse-secs", "2"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let ended = loop {
        let ended = statuses(&follower, tree).await;
        if ended.len() == 1 + RUNS as usize && ended.values().all(|s| s != "running") {
            break ended;
        }
        assert!(Instant::now() < deadline, "the runs did not finish: {ended:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(ended.values().all(|s| s == "done"), "every run finished, none cancelled or interrupted: {ended:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while worker.done() + helper.done() < RUNS as usize && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(worker.done() + helper.done(), RUNS as usize, "each run ran once");
    queue_empties(&pg, Duration::from_secs(10)).await;
}

/// Issue 40, item 4 (replays): a replay is a job like any run — taken by a worker, not run in
/// the server — and it answers every call from the records it carries: the provider hears
/// nothing, and the replayed node's log is the original's.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_is_a_job_that_makes_no_provider_call() {
    let pg = Postgres::start();
    let (url, provider) = provider(Duration::from_millis(10), Arc::new(|| {})).await;
    let env = llm_env(&url);
    let s = jobs_server(&pg, &env, &["--no-worker"]);
    let worker = Worker::start(&pg, &env, &["--concurrency", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    let tree = s.create("simple_chat").await;
    let original = simtree_e2e::advance(&s, tree, 0, 2).await;
    let calls = provider.seen.lock().unwrap().len();
    assert!(calls > 0, "the original run called the provider");
    assert_eq!(worker.done_at_least(1), 1);
    let (status, replayed) =
        s.post(&format!("/devui/simtree/{tree}/replay"), &serde_json::json!({"node": original})).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(provider.seen.lock().unwrap().len(), calls, "the replay made a provider call");
    assert_eq!(worker.done_at_least(2), 2, "the replay ran on the worker");
    let copy = replayed["child"].as_u64().unwrap();
    assert_eq!(
        simtree_e2e::own_entries(&s, tree, copy).await,
        simtree_e2e::own_entries(&s, tree, original).await,
        "the replay's log is the original's"
    );
}

/// What a budgeted tree's fan-out over three racing workers left ([`race_for_a_budget`]).
struct Race {
    /// Calls the provider billed (each 100 prompt and 10 completion tokens).
    calls: usize,
    /// The errors of the children that failed.
    refused: Vec<String>,
    /// The tree's `/usage`, as the leader answers it.
    usage: serde_json::Value,
    /// The database's book of the tree: tokens, calls, dollars charged and dollars held.
    booked: Book,
    /// Holds left in the database.
    holds: u64,
    /// Jobs each worker did.
    per_worker: Vec<usize>,
}

/// A budget's row in the database: tokens, calls, dollars charged, dollars held.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Book {
    tokens: u64,
    calls: u64,
    money: f64,
    held: f64,
}

/// The book of `tree`'s own budget in the database.
fn book_of(pg: &Postgres, tree: u64) -> Book {
    book_of_part(pg, tree, 0)
}

/// The book of part `part` of `tree`'s budget in the database (exploration `id`'s is `id + 1`).
fn book_of_part(pg: &Postgres, tree: u64, part: u64) -> Book {
    let row = pg.sql(&format!(
        "SELECT tokens, calls, money::TEXT, held::TEXT FROM budget_spent WHERE tree = {tree} AND part = {part}"
    ));
    let cells: Vec<&str> = row.trim().split('|').collect();
    assert_eq!(cells.len(), 4, "the book of part {part}: {row:?}");
    Book {
        tokens: cells[0].parse().unwrap(),
        calls: cells[1].parse().unwrap(),
        money: cells[2].parse().unwrap(),
        held: cells[3].parse().unwrap(),
    }
}

/// Three workers (four runs at once each) race through a 24-child fan-out of 12 turns (a call
/// a turn) of a tree created with `budget` (fields of the creation request) on a server started
/// with `flags` and no worker of its own, against a fake provider that bills 100 prompt and 10
/// completion tokens a call. Every child ends, each ran once on a worker, and all three workers
/// took some.
async fn race_for_a_budget(flags: &[&str], budget: serde_json::Value) -> Race {
    let pg = Postgres::start();
    let (url, provider) = provider(Duration::from_millis(30), Arc::new(|| {})).await;
    let mut env = llm_env(&url);
    env.push(("LLM_MAX_TOKENS", "64".into()));
    let mut all = vec!["--no-worker"];
    all.extend_from_slice(flags);
    let s = jobs_server(&pg, &env, &all);
    // (The workers have no price table of their own: a job carries the leader's.)
    let workers = [
        Worker::start(&pg, &env, &["--concurrency", "4"]),
        Worker::start(&pg, &env, &["--concurrency", "4"]),
        Worker::start(&pg, &env, &["--concurrency", "4"]),
    ];
    wait_for_workers(&pg, 3);
    let mut body = budget;
    body["scenario"] = "simple_chat".into();
    let (st, created) = s.post("/devui/simtree", &body).await;
    assert_eq!(st, 200, "{created}");
    let tree = created["id"].as_u64().unwrap();
    let children = simtree_e2e::fan_out(&s, tree, 0, 24, 12).await;
    let ended = statuses(&s, tree).await;
    assert!(children.iter().all(|c| ended[c] == "done" || ended[c] == "failed"), "every child ended: {ended:?}");
    let mut refused = Vec::new();
    for c in children.iter().filter(|c| ended[*c] == "failed") {
        let info = s.get(&format!("/devui/simtree/{tree}/node/{c}/info")).await.1;
        refused.push(info["error"].as_str().unwrap_or("").to_string());
    }
    let usage = s.get(&format!("/devui/simtree/{tree}/usage")).await.1;
    let until = Instant::now() + Duration::from_secs(10);
    while workers.iter().map(Worker::done).sum::<usize>() < 24 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_worker: Vec<usize> = workers.iter().map(Worker::done).collect();
    assert_eq!(per_worker.iter().sum::<usize>(), 24, "each child ran once, on a worker: {per_worker:?}");
    assert!(per_worker.iter().all(|&n| n > 0), "all three workers raced: {per_worker:?}");
    Race {
        calls: provider.billed(),
        refused,
        usage,
        booked: book_of(&pg, tree),
        holds: count(&pg, "SELECT COUNT(*) FROM budget_holds"),
        per_worker,
    }
}

/// Issue 40, item 4: a budgeted tree's runs are jobs, and its money is booked in the database.
/// Three workers race through a fan-out on a priced provider whose calls together would cost
/// more than the tree's cap: every call holds its most possible cost in the database's book
/// before it starts, so what the provider billed stays within the cap, the book says what it
/// billed, the children the cap stopped fail saying so, and no hold is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_budgeted_trees_money_cap_holds_across_three_workers_racing_for_it() {
    let prices = std::env::temp_dir().join(format!("simtree-race-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    // The fake bills 100 prompt and 10 completion tokens a call: $0.0036.
    let per_call = (100.0 * 30.0 + 10.0 * 60.0) / 1e6;
    let cap = 0.75;
    // 24 × 12 calls would cost $1.04; each holds about $0.05 (its prompt at a token a byte).
    let race =
        race_for_a_budget(&["--prices", prices.to_str().unwrap()], serde_json::json!({"money_budget": cap})).await;
    let _ = std::fs::remove_file(prices);
    let billed = race.calls as f64 * per_call;
    assert!(billed <= cap + 1e-12, "the provider billed ${billed} of a ${cap} cap ({} calls)", race.calls);
    assert!(billed > cap / 2.0, "the budget was used, not refused at once: ${billed}");
    assert!(!race.refused.is_empty(), "the cap stopped some children");
    assert!(race.refused.iter().all(|e| e.contains("money budget")), "{:?}", race.refused);
    eprintln!("{}", race.refused[0]);
    // The book says what the provider billed, on the leader's route and in the database.
    let spent = race.usage["money_budget"]["spent"].as_f64().unwrap_or_else(|| panic!("{}", race.usage));
    assert!((spent - billed).abs() < 1e-9, "booked ${spent}, billed ${billed}: {}", race.usage);
    assert!((race.booked.money - billed).abs() < 1e-9, "the database booked {:?}", race.booked);
    // (Dollars are floating-point numbers in the book: what is held comes back to 0 within a
    // rounding error.)
    assert!(race.booked.held.abs() < 1e-9 && race.holds == 0, "a hold is left: {:?}", race.booked);
    eprintln!(
        "runs per worker {:?}; {} calls billed ${billed:.4} of ${cap}; {} children stopped by the cap",
        race.per_worker,
        race.calls,
        race.refused.len()
    );
}

/// Issue 40, item 4: a tree's token cap is booked in the database too. Tokens are counted after
/// a call (what it cost is known only then), so calls already running when the cap is reached
/// finish: with three workers of four runs each, at most twelve calls pass it, one each. A book
/// per process would let each worker spend the whole cap (three times it).
#[tokio::test(flavor = "multi_thread")]
async fn a_budgeted_trees_token_cap_holds_across_three_workers_racing_for_it() {
    let cap = 8_000;
    // 24 × 12 calls of 110 tokens would spend 31,680.
    let race = race_for_a_budget(&[], serde_json::json!({"token_budget": cap})).await;
    let billed = race.calls as u64 * 110;
    assert!(billed >= cap, "the cap was reached: {billed} tokens");
    assert!(
        billed <= cap + 12 * 110,
        "the provider billed {billed} tokens of a {cap} cap: more than one call past it per run in flight"
    );
    assert_eq!(race.booked.tokens, billed, "the database booked {:?}", race.booked);
    assert_eq!(race.booked.calls, race.calls as u64, "{:?}", race.booked);
    assert_eq!(race.usage["budget"]["spent"], billed, "{}", race.usage);
    assert!(!race.refused.is_empty(), "the cap stopped some children");
    assert!(race.refused.iter().all(|e| e.contains("token budget spent")), "{:?}", race.refused);
    assert_eq!(race.holds, 0, "no hold is left");
    eprintln!(
        "runs per worker {:?}; {billed} tokens billed of {cap}; {} children stopped by the cap",
        race.per_worker,
        race.refused.len()
    );
}

/// Issue 40, item 4: the call cap (`--call-budget`) is booked in the database: a call is counted
/// as it starts and one past the cap never starts, so three racing workers make exactly the
/// calls the cap allows, no more.
#[tokio::test(flavor = "multi_thread")]
async fn a_budgeted_trees_call_cap_holds_across_three_workers_racing_for_it() {
    let cap = 60;
    // 24 × 12 calls wanted.
    let race = race_for_a_budget(&["--call-budget", "60"], serde_json::json!({})).await;
    assert_eq!(race.calls, cap, "the provider billed {} calls of a cap of {cap}", race.calls);
    assert_eq!(race.booked.calls, cap as u64, "the database booked {:?}", race.booked);
    assert_eq!(race.booked.tokens, cap as u64 * 110, "{:?}", race.booked);
    assert_eq!(race.usage["call_budget"]["spent"], cap, "{}", race.usage);
    assert!(!race.refused.is_empty(), "the cap stopped some children");
    assert!(race.refused.iter().all(|e| e.contains("call budget spent: 60 of 60")), "{:?}", race.refused);
    assert_eq!(race.holds, 0, "no hold is left");
}

/// Issue 40, item 4: a worker killed -9 in the middle of a call of a budgeted tree leaves a hold
/// in the database's book. Its job is re-claimed by the other worker, which replays the calls
/// the dead one recorded (not booked again) and makes the rest; the dead hold is released with
/// the claim, so at the end nothing is held, the book says exactly what the provider billed (the
/// call cut off was never answered, so never billed), and the money cap still held.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_call_gives_its_budget_hold_back_and_the_book_equals_the_bill() {
    let pg = Postgres::start();
    // Worker A has a provider of its own, which kills A as A's second call arrives.
    let doomed: Arc<Mutex<Option<u32>>> = Arc::default();
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (url_a, provider_a) = {
        let (doomed, gone) = (doomed.clone(), gone.clone());
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let slot: Arc<Mutex<Option<Arc<std::sync::atomic::AtomicBool>>>> = Arc::default();
        let hook_slot = slot.clone();
        let hook = Arc::new(move || {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
                && let Some(pid) = *doomed.lock().unwrap()
            {
                // Its answers from now on reach nobody, and are not billed.
                if let Some(caller_gone) = &*hook_slot.lock().unwrap() {
                    caller_gone.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                // SAFETY: a signal to a child process of this test.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
                gone.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let (url, p) = provider(Duration::from_millis(150), hook).await;
        *slot.lock().unwrap() = Some(p.caller_gone.clone());
        (url, p)
    };
    let (url_b, provider_b) = provider(Duration::from_millis(30), Arc::new(|| {})).await;
    let env = |url: &str| {
        let mut env = llm_env(url);
        env.push(("LLM_MAX_TOKENS", "64".into()));
        env
    };
    let prices = std::env::temp_dir().join(format!("simtree-kill-prices-{}.json", std::process::id()));
    std::fs::write(&prices, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    let per_call = (100.0 * 30.0 + 10.0 * 60.0) / 1e6;
    let s = jobs_server(&pg, &env(&url_b), &["--no-worker", "--prices", prices.to_str().unwrap()]);
    let mut a = Worker::start(&pg, &env(&url_a), &["--concurrency", "1", "--job-lapse-secs", "2"]);
    *doomed.lock().unwrap() = Some(a.child.id());
    let b = Worker::start(&pg, &env(&url_b), &["--concurrency", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 2);
    // Three calls at once hold about $0.35.
    let cap = 0.5;
    let (st, created) =
        s.post("/devui/simtree", &serde_json::json!({"scenario": "simple_chat", "money_budget": cap})).await;
    assert_eq!(st, 200, "{created}");
    let tree = created["id"].as_u64().unwrap();
    // 8 × 12 calls would cost $0.35; each holds about $0.05 while it runs.
    let fan = s.fan_out_in_background(tree, 0, 12, 8);
    let until = Instant::now() + Duration::from_secs(20);
    while !gone.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(Instant::now() < until, "worker A never made its second call");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The dead worker's call holds its most possible cost until its job is claimed again.
    let pid = a.child.id();
    let dead_holds = count(&pg, &format!("SELECT COUNT(*) FROM budget_holds WHERE holder LIKE '%/{pid}/%'"));
    assert_eq!(dead_holds, 1, "the killed worker's call holds money");
    assert!(book_of(&pg, tree).held > 0.0);
    a.kill9();
    let reply =
        tokio::time::timeout(Duration::from_secs(60), fan).await.expect("every child ended within 60 s").unwrap();
    let children: Vec<u64> =
        reply["children"].as_array().unwrap_or_else(|| panic!("{reply}")).iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(children.len(), 8, "{reply}");
    let ended = statuses(&s, tree).await;
    assert!(children.iter().all(|c| ended[c] == "done" || ended[c] == "failed"), "every child ended: {ended:?}");
    assert!(b.reclaimed.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the dead worker's job was claimed again");
    let _ = std::fs::remove_file(prices);
    let calls = provider_a.billed() + provider_b.billed();
    let billed = calls as f64 * per_call;
    let book = book_of(&pg, tree);
    assert!(
        book.held.abs() < 1e-9 && count(&pg, "SELECT COUNT(*) FROM budget_holds") == 0,
        "the dead hold came back: {book:?}"
    );
    assert!((book.money - billed).abs() < 1e-9, "booked {book:?}, billed ${billed} ({calls} calls)");
    assert!(billed <= cap + 1e-12, "the provider billed ${billed} of a ${cap} cap");
    let refused = children.iter().filter(|c| ended[*c] == "failed").count();
    assert!(refused > 0, "the cap stopped some children: {ended:?}");
    eprintln!(
        "{calls} calls billed ${billed:.4} of ${cap} ({} by the killed worker); {refused} children stopped by the cap",
        provider_a.billed()
    );
}

/// Issue 40, item 3: an exploration with its own money cap is booked in the database as part of
/// its tree's budget, so its replicates are jobs like any run: two workers run them all (the
/// leader has no worker of its own and runs none), every call holds its most possible cost in
/// the exploration's book and in the tree's before it starts, and what the provider billed stays
/// within the exploration's cap, each book saying exactly what it billed.
#[tokio::test(flavor = "multi_thread")]
async fn an_explorations_own_money_cap_is_booked_in_the_database_and_its_replicates_run_on_workers() {
    let pg = Postgres::start();
    let (url, provider) = provider(Duration::from_millis(30), Arc::new(|| {})).await;
    let mut env = llm_env(&url);
    env.push(("LLM_MAX_TOKENS", "64".into()));
    let (prices, per_call) = prices_file("explore");
    let s = jobs_server(&pg, &env, &["--no-worker", "--prices", prices.to_str().unwrap()]);
    let workers =
        [Worker::start(&pg, &env, &["--concurrency", "2"]), Worker::start(&pg, &env, &["--concurrency", "2"])];
    wait_for_workers(&pg, 2);
    // Its whole schedule (16 runs of 6 calls) would cost $0.35; it may spend $0.60, and each
    // call holds up to $0.11 while it runs (so four at once hold $0.45).
    let cap = 0.6;
    let (tree, id) = capped_exploration(&s, 6, cap).await;
    let table = explore_finished(&s, tree, id).await;
    let _ = std::fs::remove_file(prices);
    let runs = table.runs_used as usize;
    assert!(runs > 0, "{table:?}");
    let until = Instant::now() + Duration::from_secs(10);
    while workers.iter().map(Worker::done).sum::<usize>() < runs && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_worker: Vec<usize> = workers.iter().map(Worker::done).collect();
    assert_eq!(
        per_worker.iter().sum::<usize>(),
        runs,
        "every replicate ran on a worker, once: {per_worker:?} ({table:?})"
    );
    let calls = provider.billed();
    let billed = calls as f64 * per_call;
    assert!(billed <= cap + 1e-12, "the provider billed ${billed} of the exploration's ${cap}");
    let own = book_of_part(&pg, tree, id + 1).money;
    assert!((own - billed).abs() < 1e-9, "its book says ${own}, the provider billed ${billed}");
    let whole = book_of(&pg, tree);
    assert!((whole.money - billed).abs() < 1e-9, "the tree's book is charged too: {whole:?}, billed ${billed}");
    assert_eq!(count(&pg, "SELECT COUNT(*) FROM budget_holds"), 0, "no hold is left");
    let refused: usize = table.candidates.iter().map(|c| c.failed).sum();
    assert!(refused > 0, "the cap stopped some replicates: {table:?}");
    eprintln!(
        "{runs} replicates over the workers {per_worker:?}; {calls} calls billed ${billed:.4} of ${cap}; {refused} replicates stopped by the cap"
    );
}

/// A price table for the fake provider's model, written to a file of this test process named
/// after `what`, and what one of the fake's calls (100 prompt and 10 completion tokens) costs
/// at it.
fn prices_file(what: &str) -> (std::path::PathBuf, f64) {
    let path = std::env::temp_dir().join(format!("simtree-{what}-prices-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"fake-model": {"prompt": 30, "completion": 60}}"#).unwrap();
    (path, (100.0 * 30.0 + 10.0 * 60.0) / 1e6)
}

/// Issue 40, item 3: an exploration with its own money cap whose leader is killed -9 in the
/// middle of a round finishes under the follower without a person. What its replicates spent
/// before the kill stays in its book in the database (the follower carries it on from the book,
/// not from nothing), the cap holds over the spending under both leaders together, each book
/// says exactly what the provider billed, no hold is left, and each replicate is counted once.
#[tokio::test(flavor = "multi_thread")]
async fn an_explorations_money_cap_holds_across_a_killed_leader_and_its_book_is_kept() {
    let pg = Postgres::start();
    let (url, provider) = provider(Duration::from_millis(60), Arc::new(|| {})).await;
    let mut env = llm_env(&url);
    env.push(("LLM_MAX_TOKENS", "64".into()));
    let (prices, per_call) = prices_file("explore-kill");
    let mut flags = queueing(&pg).to_vec();
    flags.extend(["--job-lapse-secs", "2", "--prices", prices.to_str().unwrap()]);
    let pairs = env_pairs(&env);
    let mut leader = simtree_e2e::Server::start_env(&flags, &pairs);
    leader.wait_leading(Duration::from_secs(10));
    let follower = simtree_e2e::Server::start_env(&flags, &pairs);
    let worker = Worker::start(&pg, &env, &["--concurrency", "2", "--job-lapse-secs", "2"]);
    wait_for_workers(&pg, 1);
    // A replicate of 3 turns makes about 10 calls: the first round (8 of them) costs about
    // $0.30, the whole schedule (16) about $0.60; it may spend $0.80. Each call holds up to
    // $0.20 while it runs (its prompt grows with the agents' memories), two at once (the
    // worker's two slots): the first round fits, and the cap stops calls in the second.
    let cap = 0.8;
    let (tree, id) = capped_exploration(&leader, 3, cap).await;
    // Killed once the first round's replicates have booked a sixth of its cost and are not done.
    let until = Instant::now() + Duration::from_secs(30);
    while count(
        &pg,
        &format!("SELECT COUNT(*) FROM budget_spent WHERE tree = {tree} AND part = {} AND money >= 0.05", id + 1),
    ) == 0
        || count(&pg, "SELECT COUNT(DISTINCT node) FROM job_calls") < 2
    {
        assert!(Instant::now() < until, "the replicates never spent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, before) = leader.get(&format!("/devui/simtree/{tree}/explore/{id}")).await;
    assert_eq!((before["status"].as_str(), before["round"].as_u64()), (Some("running"), Some(1)), "{before}");
    leader.stop(); // SIGKILL
    let booked_before = book_of_part(&pg, tree, id + 1);
    assert!(booked_before.money > 0.0, "{booked_before:?}");
    follower.wait_leading(Duration::from_secs(15));
    let table = explore_finished(&follower, tree, id).await;
    let _ = std::fs::remove_file(prices);
    let mut errors = Vec::new();
    for c in table.candidates.iter().flat_map(|c| &c.children) {
        let info = follower.get(&format!("/devui/simtree/{tree}/node/{c}/info")).await.1;
        if let Some(e) = info["error"].as_str() {
            errors.push(format!("{c}: {e}"));
        }
    }
    assert!(table.round >= 2, "a round after the kill was run: {table:?}; {errors:#?}");
    assert!(table.runs_used <= 16, "{table:?}");
    let children: Vec<u64> = table.candidates.iter().flat_map(|c| c.children.clone()).collect();
    let distinct: BTreeSet<u64> = children.iter().copied().collect();
    assert_eq!(distinct.len(), children.len(), "a replicate listed twice: {table:?}");
    assert_eq!(children.len() as u64, table.runs_used, "every run counted once: {table:?}");
    let ended = statuses(&follower, tree).await;
    assert!(
        children.iter().all(|c| ended[c] == "done" || ended[c] == "failed"),
        "every replicate ended, none interrupted and run again: {ended:?}"
    );
    assert_eq!(ended.len(), 1 + 4 + children.len(), "no run made twice: {ended:?}");
    assert_eq!(worker.done_at_least(children.len()), children.len(), "each ran once, on the worker");
    // The book: kept across the kill, equal to the bill, within the cap.
    let calls = provider.billed();
    let billed = calls as f64 * per_call;
    let own = book_of_part(&pg, tree, id + 1);
    assert!(own.money >= booked_before.money, "the book lost spending: {booked_before:?} then {own:?}");
    assert!((own.money - billed).abs() < 1e-9, "its book says ${}, the provider billed ${billed}", own.money);
    assert!(billed <= cap + 1e-12, "the provider billed ${billed} of the exploration's ${cap}");
    assert!(
        (book_of(&pg, tree).money - billed).abs() < 1e-9,
        "the tree's book is charged too: {:?}, billed ${billed}",
        book_of(&pg, tree)
    );
    assert!(own.held.abs() < 1e-9, "{own:?}");
    assert_eq!(count(&pg, "SELECT COUNT(*) FROM budget_holds"), 0, "no hold is left");
    let shown = table.money_used.unwrap_or(0.0);
    assert!((shown - billed).abs() < 1e-9, "the table shows ${shown}, billed ${billed}");
    eprintln!(
        "{} replicates; {calls} calls billed ${billed:.4} of ${cap} (${:.4} before the kill)",
        children.len(),
        booked_before.money
    );
}

/// Issue 40, item 4 (what needs Mesa on the leader): a leader with no working Python or
/// bubblewrap refuses a model's tree (503 naming the sandbox) while nobody else offers to run
/// models — they would run in its process — and, once two workers offer ABM slots, creates one
/// and runs a sweep of it: the tree's root needs no Mesa (the model is checked in Rust, its
/// state is the specification and seed), and every run is a job on a worker.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_without_python_makes_model_trees_whose_runs_go_to_the_workers() {
    let pg = Postgres::start();
    let flags = ["--database-url", pg.url.as_str(), "--jobs", "--job-lapse-secs", "2"];
    let no_python =
        [RUNS_LOGGED, ("SIMTREE_BWRAP", "/nonexistent/bwrap"), ("SIMTREE_BOOTSTRAP_PYTHON", "/nonexistent/python3")];
    let leader = simtree_e2e::Server::start_env(&flags, &no_python);
    wait_for_workers(&pg, 1);
    assert_eq!(count(&pg, "SELECT abm FROM workers"), 0, "the leader's own worker offers no models without Python");
    let sir = serde_json::json!({"scenario": "sir_network", "seed": 3});
    let (st, refused) = leader.post("/devui/simtree", &sir).await;
    assert_eq!(st, 503, "{refused}");
    assert!(refused["detail"].as_str().is_some_and(|d| d.contains("/nonexistent/bwrap")), "{refused}");
    let one = ["--abm-workers", "1", "--concurrency", "1", "--job-lapse-secs", "2"];
    let workers = [Worker::start(&pg, &[], &one), Worker::start(&pg, &[], &one)];
    abm_slots_offered(&pg, 2, 1).await;
    let (st, created) = leader.post("/devui/simtree", &sir).await;
    assert_eq!(st, 200, "{created}");
    let tree = created["id"].as_u64().unwrap();
    let (st, body) = leader
        .post(
            &format!("/devui/simtree/{tree}/sweep"),
            &serde_json::json!({"parent": 0, "turns": 40, "replicates": 2, "seed": 1,
                "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                          "field": "value", "values": [0.05, 0.2]}],
                "metrics": {"peak": "max:globalVariable.infectedCount"}}),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let table = sweep_finished(&leader, tree, body["sweep"].as_u64().unwrap()).await;
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(4), Some(0)), "{table}");
    let until = Instant::now() + Duration::from_secs(10);
    while workers.iter().map(Worker::done).sum::<usize>() < 4 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(workers.iter().map(Worker::done).sum::<usize>(), 4);
    ran_no_run(&leader, "the leader");
    // A single advance of the model, read back on the leader.
    let child = simtree_e2e::advance(&leader, tree, 0, 5).await;
    assert_eq!(statuses(&leader, tree).await[&child], "done");
}

/// A `simple_chat` tree with a $5 money budget on `s`, and an exploration from its root of four
/// news items, `turns` turns a replicate, two replicates, at most 16 runs and `cap` dollars of its
/// own: the tree's and the exploration's ids.
async fn capped_exploration(s: &simtree_e2e::Server, turns: u64, cap: f64) -> (u64, u64) {
    let (st, created) =
        s.post("/devui/simtree", &serde_json::json!({"scenario": "simple_chat", "money_budget": 5.0})).await;
    assert_eq!(st, 200, "{created}");
    let tree = created["id"].as_u64().unwrap();
    let (status, started) = s
        .post(
            &format!("/devui/simtree/{tree}/explore"),
            &serde_json::json!({"parent": 0, "turns": turns, "seed": 3,
                "objective": {"metric": "count:action_end", "goal": "max"},
                "space": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                           "values": ["rain", "sun", "snow", "wind"]}],
                "replicates": 2, "budget": {"runs": 16, "money": cap}}),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    (tree, started["explore"].as_u64().unwrap())
}
