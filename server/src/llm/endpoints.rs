//! Endpoint limits shared by every process on one database: a load board.
//!
//! Alone, a process bounds the calls in flight at an endpoint with its [`Gate`]. Several
//! processes (servers and workers on one PostgreSQL) would each fill the limit; so each one
//! publishes, per endpoint, what it has in flight, what it wants (in flight plus waiting) and the
//! slots it holds (`reserved`), and takes slots only under the board's lock and only while the
//! reservations of all stay within the endpoint's limit. A process therefore never has more in
//! flight than it holds, and the holdings never add up to more than the limit: the combined
//! in-flight count cannot exceed it.
//!
//! The hot path does not touch the board: a call takes a permit of its gate, and only a
//! background refresher ([`share_load`]) talks to the board — every [`REFRESH`], sooner (but at
//! most every [`HURRY`]) while callers wait for a grant. Free slots are split fairly: everyone
//! gets what they want when the wants fit, with the rest spread evenly as headroom (so a burst
//! starts without waiting for the board); else slots in proportion to the wants. A grant is
//! shrunk before it is published (never below what is in flight) and grown only after the board
//! has stored it. A process that cannot reach the board keeps its grant until its row would
//! expire ([`ROW_TTL`]) and then admits nothing new until it reaches the board again.
//!
//! The board itself is the store's ([`LoadBoard`] is implemented above this layer, on
//! PostgreSQL); with SQLite or `--ephemeral` there is one process and no board.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::BoxFuture;
use super::resilience::Gate;

/// How often a process refreshes its rows and reads the others'.
pub(crate) const REFRESH: Duration = Duration::from_millis(100);
/// The shortest time between two refreshes while callers wait for a grant.
pub(crate) const HURRY: Duration = Duration::from_millis(20);
/// How long a row counts after it was written: a process that stops refreshing (it died, or lost
/// the database) has its slots given to others after this.
pub(crate) const ROW_TTL: Duration = Duration::from_secs(5);

/// One process's row for one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRow {
    /// The endpoint's base URL.
    pub(crate) endpoint: String,
    pub(crate) in_flight: u64,
    /// Slots the process holds: it never has more in flight.
    pub(crate) reserved: u64,
    /// In flight plus waiting.
    pub(crate) wanted: u64,
}

/// The decision made under the board's lock: from the other processes' live rows, this
/// process's rows.
pub(crate) type Decide<'a> = Box<dyn FnOnce(&[LoadRow]) -> Vec<LoadRow> + Send + 'a>;

/// Where processes publish their load (implemented by the store: PostgreSQL).
/// Why the shared board could not be read or written (the database's words).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BoardError(pub String);

pub trait LoadBoard: Send + Sync + 'static {
    /// Under the board's lock: reads the unexpired rows of every other process, hands them to
    /// `decide`, stores what it returns as this process's rows (expiring after [`ROW_TTL`]) and
    /// commits. An error means nothing was stored.
    fn exchange<'a>(&'a self, decide: Decide<'a>) -> BoxFuture<'a, Result<(), BoardError>>;

    /// Deletes this process's rows (its slots are free at once).
    fn leave(&self) -> BoxFuture<'_, Result<(), BoardError>>;
}

/// The gates of one process, shared through a board.
pub(crate) struct Sharing {
    board: Arc<dyn LoadBoard>,
    gates: Mutex<Vec<(String, Arc<Gate>)>>,
    kick: Arc<Notify>,
}

impl Sharing {
    pub(crate) fn new(board: Arc<dyn LoadBoard>) -> Sharing {
        Sharing { board, gates: Mutex::new(Vec::new()), kick: Arc::new(Notify::new()) }
    }

    /// Puts `gate` (of the endpoint at `url`) under the board.
    pub(crate) fn add(&self, url: &str, gate: Arc<Gate>) {
        gate.share(self.kick.clone());
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        if !gates.iter().any(|(_, g)| Arc::ptr_eq(g, &gate)) {
            gates.push((url.to_string(), gate));
        }
        self.kick.notify_one();
    }

    fn gates(&self) -> Vec<(String, Arc<Gate>)> {
        self.gates.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One exchange with the board: shrinks what must shrink, publishes, then grows. Returns
    /// whether some caller still waits for a grant.
    pub(crate) async fn refresh(&self) -> Result<bool, BoardError> {
        let gates = self.gates();
        let mut grants: Vec<usize> = Vec::new();
        let decide: Decide<'_> = Box::new(|others: &[LoadRow]| {
            gates
                .iter()
                .map(|(url, gate)| {
                    let seen: Vec<&LoadRow> = others.iter().filter(|r| &r.endpoint == url).collect();
                    let (grant, row) = decide_one(url, gate, &seen);
                    grants.push(grant);
                    row
                })
                .collect()
        });
        self.board.exchange(decide).await?;
        let mut hungry = false;
        for ((_, gate), grant) in gates.iter().zip(grants) {
            gate.grow_to(grant);
            hungry |= gate.waiting() > 0 && gate.in_flight() >= gate.capacity();
        }
        Ok(hungry)
    }

    /// Admits nothing new: every gate keeps only its permits in flight.
    fn freeze(&self) {
        for (_, gate) in self.gates() {
            gate.shrink_to(0);
        }
    }

    /// Refreshes until `stop` is notified, then leaves the board.
    pub(crate) async fn run(self: Arc<Self>, stop: Arc<Notify>) {
        let mut last_ok = Instant::now();
        let mut last = Instant::now() - REFRESH;
        let mut hungry = true;
        let mut warned = false;
        loop {
            let pause = if hungry { HURRY } else { REFRESH };
            let earliest = last + HURRY;
            tokio::select! {
                _ = stop.notified() => break,
                _ = tokio::time::sleep_until((last + pause).into()) => {}
                _ = self.kick.notified() => {
                    tokio::time::sleep_until(earliest.into()).await;
                }
            }
            last = Instant::now();
            match self.refresh().await {
                Ok(h) => {
                    hungry = h;
                    last_ok = Instant::now();
                    warned = false;
                }
                Err(e) => {
                    hungry = false;
                    // Past most of its row's life, this process's slots may be given to others.
                    if last_ok.elapsed() > ROW_TTL.mul_f64(0.8) {
                        self.freeze();
                    }
                    if !warned {
                        tracing::warn!(error = %e, "LLM endpoint load board: cannot reach it");
                        warned = true;
                    }
                }
            }
        }
        self.freeze();
        if let Err(e) = self.board.leave().await {
            tracing::debug!(error = %e, "LLM endpoint load board: leaving");
        }
    }
}

/// Shares `gates` through `board`: spawns the refresher on the current runtime. Notify the
/// returned handle to stop it (it then leaves the board).
pub(crate) fn share_load(sharing: Arc<Sharing>) -> (Arc<Notify>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(sharing.run(stop.clone()));
    (stop, task)
}

/// This process's grant and row for one endpoint, given the other processes' rows for it.
/// Shrinks the gate at once when the grant is smaller; the caller grows it after the commit.
fn decide_one(url: &str, gate: &Gate, others: &[&LoadRow]) -> (usize, LoadRow) {
    let limit = gate.limit();
    let sum = |f: fn(&LoadRow) -> u64| others.iter().map(|r| f(r) as usize).sum::<usize>();
    let (o_in, o_res, o_want) = (sum(|r| r.in_flight), sum(|r| r.reserved), sum(|r| r.wanted));
    gate.set_others(o_in);
    let wanted = gate.in_flight() + gate.waiting();
    let target = fair_share(limit, wanted, o_want, others.len());
    let held = gate.shrink_to(target);
    // Never more than the others leave free: the holdings stay within the limit.
    let grant = if target > held { target.min(limit.saturating_sub(o_res)).max(held) } else { held };
    let row = LoadRow {
        endpoint: url.to_string(),
        in_flight: gate.in_flight() as u64,
        reserved: grant as u64,
        wanted: wanted as u64,
    };
    (grant, row)
}

/// The slots a process wanting `wanted` should hold when the `others` processes want
/// `others_want` in all: its want plus an even part of what is left when all wants fit, else
/// its proportional part, rounded up (so no slot is left unused by rounding: the grant is also
/// bounded by what the others leave free).
pub(crate) fn fair_share(limit: usize, wanted: usize, others_want: usize, others: usize) -> usize {
    let total = wanted + others_want;
    if total <= limit { wanted + (limit - total) / (others + 1) } else { (limit * wanted).div_ceil(total) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board in memory: rows per holder, one lock.
    #[derive(Default)]
    struct Board {
        rows: Mutex<Vec<(usize, LoadRow)>>,
    }

    struct Holder {
        id: usize,
        board: Arc<Board>,
    }

    impl LoadBoard for Holder {
        fn exchange<'a>(&'a self, decide: Decide<'a>) -> BoxFuture<'a, Result<(), BoardError>> {
            Box::pin(async move {
                let mut rows = self.board.rows.lock().unwrap();
                let others: Vec<LoadRow> = rows.iter().filter(|(h, _)| *h != self.id).map(|(_, r)| r.clone()).collect();
                let mine = decide(&others);
                rows.retain(|(h, _)| *h != self.id);
                rows.extend(mine.into_iter().map(|r| (self.id, r)));
                Ok(())
            })
        }
        fn leave(&self) -> BoxFuture<'_, Result<(), BoardError>> {
            Box::pin(async move {
                self.board.rows.lock().unwrap().retain(|(h, _)| *h != self.id);
                Ok(())
            })
        }
    }

    #[test]
    fn fair_shares_fit_the_limit() {
        assert_eq!(fair_share(8, 0, 0, 1), 4, "idle: half each as headroom");
        assert_eq!(fair_share(8, 3, 1, 1), 5);
        assert_eq!(fair_share(8, 12, 4, 1), 6, "contested: in proportion");
        assert_eq!(fair_share(3, 6, 6, 1), 2, "rounded up");
        assert_eq!(fair_share(8, 1, 100, 3), 1, "at least one slot when it wants any");
        assert_eq!(fair_share(8, 0, 100, 3), 0);
    }

    #[tokio::test]
    async fn two_processes_never_hold_more_than_the_limit() {
        let board = Arc::new(Board::default());
        let share = |id| {
            let s = Sharing::new(Arc::new(Holder { id, board: board.clone() }));
            let gate = Arc::new(Gate::new(4, None));
            s.add("http://e/v1", gate.clone());
            (s, gate)
        };
        let (a, ga) = share(1);
        let (b, gb) = share(2);
        assert_eq!(ga.capacity(), 0, "a shared gate holds nothing before its first grant");
        a.refresh().await.unwrap();
        assert_eq!(ga.capacity(), 4, "alone on the board: all of it as headroom");
        b.refresh().await.unwrap();
        assert_eq!(gb.capacity(), 0, "nothing free yet");
        a.refresh().await.unwrap();
        b.refresh().await.unwrap();
        assert_eq!((ga.capacity(), gb.capacity()), (2, 2), "idle: the limit split as headroom");
        // A takes everything it is granted and wants one more; B is idle.
        let release = Arc::new(Notify::new());
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let (ga, release) = (ga.clone(), release.clone());
                tokio::spawn(async move {
                    let _p = ga.acquire().await;
                    release.notified().await;
                })
            })
            .collect();
        settle().await;
        assert_eq!((ga.in_flight(), ga.waiting()), (2, 1));
        a.refresh().await.unwrap();
        assert_eq!(ga.capacity(), 2, "B still holds its headroom");
        b.refresh().await.unwrap();
        assert_eq!(gb.capacity(), 0, "B gives back what A wants");
        a.refresh().await.unwrap();
        assert_eq!(ga.capacity(), 3);
        settle().await;
        assert_eq!((ga.in_flight(), ga.waiting()), (3, 0));
        let total = || board.rows.lock().unwrap().iter().map(|(_, r)| r.reserved).sum::<u64>();
        assert!(total() <= 4, "{:?}", board.rows.lock().unwrap());
        // B wants 3 too: A cannot shrink below what it has in flight, so B gets only what is free.
        let b_calls: Vec<_> = (0..3)
            .map(|_| {
                let gb = gb.clone();
                tokio::spawn(async move {
                    let _p = gb.acquire().await;
                })
            })
            .collect();
        settle().await;
        b.refresh().await.unwrap();
        a.refresh().await.unwrap();
        assert!(total() <= 4, "{:?}", board.rows.lock().unwrap());
        assert!(ga.in_flight() + gb.in_flight() <= 4, "never beyond the limit");
        release.notify_waiters();
        for c in calls {
            c.await.unwrap();
        }
        for _ in 0..4 {
            a.refresh().await.unwrap();
            b.refresh().await.unwrap();
            settle().await;
            assert!(total() <= 4, "{:?}", board.rows.lock().unwrap());
        }
        for c in b_calls {
            c.await.unwrap();
        }
        b.board.leave().await.unwrap();
        assert!(board.rows.lock().unwrap().iter().all(|(h, _)| *h == 1));
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }
}
