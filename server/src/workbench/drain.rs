//! Graceful shutdown: the runs in flight may finish within a grace period; the rest are
//! cancelled and stored as such, so none is left `running` (read back as `interrupted`).

use std::time::Duration;

use super::{NodeId, Workbench, lock};

/// How a drain ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Runs that were in flight when the drain began.
    pub in_flight: usize,
    /// Runs cancelled when the grace period was over.
    pub cancelled: usize,
}

impl Workbench {
    /// The runs in flight over every tree in memory.
    pub fn runs_in_flight(&self) -> usize {
        self.trees.open_handles().iter().map(|t| lock(&t.runs).len()).sum()
    }

    /// Cancels every run in flight and waits until each has ended (its node stored as
    /// cancelled); returns how many were.
    pub async fn cancel_all_runs(&self) -> usize {
        let mut ended = Vec::new();
        for t in self.trees.open_handles() {
            let nodes: Vec<NodeId> = lock(&t.runs).keys().copied().collect();
            ended.extend(t.cancel(nodes));
        }
        let n = ended.len();
        for mut e in ended {
            let _ = e.wait_for(|e| *e).await;
        }
        n
    }

    /// Lets the runs in flight finish for up to `grace`, then cancels the rest (and any run
    /// started meanwhile, e.g. by a sweep, until none is left or a few more seconds passed).
    pub async fn drain(&self, grace: Duration) -> Drained {
        let mut out = Drained {
            in_flight: self.runs_in_flight(),
            cancelled: 0,
        };
        let until = tokio::time::Instant::now() + grace;
        while self.runs_in_flight() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let last = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.runs_in_flight() > 0 && tokio::time::Instant::now() < last {
            out.cancelled += self.cancel_all_runs().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        out
    }
}
