//! Graceful shutdown: the runs in flight may finish within a grace period; the rest are
//! cancelled and stored as such, so none is left `running` (read back as `interrupted`) — but
//! runs that are jobs are handed over instead when another process on the database takes jobs
//! (or another server leads already): they stay queued or claimed, their nodes `running`, and
//! the next leader adopts them as it adopts a dead leader's (issue 40, item 5).

use std::collections::HashSet;
use std::time::Duration;

use super::persist::Upkeep;
use super::{Core, NodeId, lock};

/// How a drain ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Runs that were in flight when the drain began.
    in_flight: usize,
    /// Runs cancelled when the grace period was over.
    pub(crate) cancelled: usize,
    /// Runs left to the next leader (jobs still queued or claimed when the grace period was over).
    handed_over: usize,
}

impl Upkeep<'_> {
    /// The runs in flight over every tree in memory.
    pub(crate) fn runs_in_flight(&self) -> usize {
        self.trees.open_handles().iter().map(|t| lock(&t.runs).len()).sum()
    }
}

impl Core {
    /// Cancels every run in flight but those in `keep` (`(tree, node)`) and waits until each
    /// has ended (its node stored as cancelled); returns how many were.
    async fn cancel_runs_but(&self, keep: &HashSet<(u64, NodeId)>) -> usize {
        let mut ended = Vec::new();
        for t in self.trees.open_handles() {
            let nodes: Vec<NodeId> = lock(&t.runs).keys().copied().filter(|n| !keep.contains(&(t.id, *n))).collect();
            ended.extend(t.cancel(nodes));
        }
        let n = ended.len();
        for mut e in ended {
            let _ = e.wait_for(|e| *e).await;
        }
        n
    }

    /// The runs to hand over rather than cancel: with jobs, those that are jobs, when another
    /// process on the database takes jobs or this server's lease is lost (the new leader has
    /// adopted them: a cancel here would stop its runs).
    async fn to_hand_over(&self) -> HashSet<(u64, NodeId)> {
        let Some(hub) = self.jobs.get() else {
            return HashSet::new();
        };
        let deposed = self.store.as_ref().is_some_and(|s| s.lease_lost().is_some());
        if deposed || hub.others_take_jobs().await { hub.job_runs() } else { HashSet::new() }
    }
}

impl Upkeep<'_> {
    /// Lets the runs in flight finish for up to `grace`, then cancels the rest (and any run
    /// started meanwhile, e.g. by a sweep, until none is left or a few more seconds passed) —
    /// but the jobs another process will take over ([`Self::to_hand_over`]), which are left as
    /// they are.
    pub(crate) async fn drain(&self, grace: Duration) -> Drained {
        let mut out = Drained { in_flight: self.runs_in_flight(), ..Drained::default() };
        let until = tokio::time::Instant::now() + grace;
        while self.runs_in_flight() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut keep = self.to_hand_over().await;
        let last = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.runs_in_flight() > keep.len() && tokio::time::Instant::now() < last {
            out.cancelled += self.cancel_runs_but(&keep).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            // (Runs a sweep or an exploration started meanwhile as jobs are handed over too.)
            if !keep.is_empty() {
                keep = self.to_hand_over().await;
            }
        }
        out.handed_over = keep.len();
        if !keep.is_empty() {
            tracing::info!(runs = keep.len(), "stopping: runs queued or running as jobs are left to the next server");
        }
        out
    }
}
