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
    Queue::connect(&pg.url, me, "worker").expect("connect the queue")
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
                let mut q = Queue::connect(&url, me.clone(), "worker").unwrap();
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
            &[simtree::store::Write::Dataset {
                name: "written-by-a-late-claimer".into(),
                body: "x".into(),
            }],
        )
        .unwrap_err();
    assert!(late.0.contains("no longer this process's claim"), "{late}");
    assert!(late.0.contains("claimed by"), "{late}");
    assert_eq!(
        pg.sql("SELECT COUNT(*) FROM datasets WHERE name = 'written-by-a-late-claimer'")
            .trim(),
        "0"
    );
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
    assert!(
        q.ended()
            .unwrap()
            .iter()
            .any(|r| r.node == 1 && r.status == Status::Dead)
    );

    // A job its worker puts back after failures: queued again, then dead at its last attempt.
    q.enqueue(2, 2, "run", "{}", 2).unwrap();
    let first = q.claim(1).unwrap();
    assert_eq!(first[0].node, 2);
    assert_eq!(q.retry(2, 2, "the provider refused").unwrap(), Some(Status::Queued));
    assert_eq!(q.claim(1).unwrap()[0].attempts, 2);
    assert_eq!(q.retry(2, 2, "the provider refused").unwrap(), Some(Status::Dead));
    let row = q.row(2, 2).unwrap().unwrap();
    assert_eq!(
        row.error.as_deref(),
        Some("given up after 2 attempts: the provider refused")
    );
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
    assert_eq!(listener.wait(Duration::from_secs(5)), vec!["done:5:6".to_string()]);
    let row = q.row(5, 6).unwrap().unwrap();
    assert_eq!(
        (row.status, row.error.as_deref()),
        (Status::Failed, Some("the run failed"))
    );
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
