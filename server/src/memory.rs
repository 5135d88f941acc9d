//! The server-wide memory budget. Trees grow with every turn, and one request may start hundreds
//! of runs; rather than estimate what each will cost, the server watches its own resident set
//! size and, above the budget, refuses new runs and stops the running ones (their nodes end
//! `failed` with the reason) until memory is back under the budget.
//!
//! One poller per server reads `/proc/self/statm` four times a second; it starts with the first
//! run, inside the runtime. On systems without `/proc` the budget is not enforced.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::watch;

const POLL: Duration = Duration::from_millis(250);

/// The budget and, once started, the poller's verdict (true = over budget).
pub struct Watch {
    budget: u64,
    verdict: OnceLock<watch::Receiver<bool>>,
    /// The last direct reading (when, resident bytes): starting many runs at once reads
    /// `/proc` once, not once per run.
    last: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
}

/// How long a direct reading stands for new runs.
const READING_VALID: Duration = Duration::from_millis(50);

impl Watch {
    /// A watch for `budget` bytes of resident memory (0: none).
    pub(crate) fn new(budget: u64) -> Watch {
        Watch { budget, verdict: OnceLock::new(), last: std::sync::Mutex::new(None) }
    }

    pub(crate) fn budget(&self) -> u64 {
        self.budget
    }

    /// A receiver of the verdict; starts the poller on first use (must run inside the runtime).
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.verdict
            .get_or_init(|| {
                let (tx, rx) = watch::channel(false);
                let budget = self.budget;
                if budget > 0 {
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(POLL);
                        loop {
                            tick.tick().await;
                            let over = resident_bytes().is_some_and(|r| r > budget);
                            tx.send_if_modified(|v| std::mem::replace(v, over) != over);
                            if tx.is_closed() {
                                return;
                            }
                        }
                    });
                }
                rx
            })
            .clone()
    }

    /// Checks now (not waiting for the poller): the error to give a new run when over budget.
    pub(crate) fn check(&self) -> Result<(), OverBudget> {
        if self.budget == 0 {
            return Ok(());
        }
        let resident = {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            match *last {
                Some((at, r)) if at.elapsed() < READING_VALID => Some(r),
                _ => {
                    let r = resident_bytes();
                    *last = r.map(|r| (std::time::Instant::now(), r));
                    r
                }
            }
        };
        match resident {
            Some(resident) if resident > self.budget => Err(OverBudget { resident, budget: self.budget }),
            _ => Ok(()),
        }
    }
}

/// The server's resident memory is above its budget (the refusal a new run gets).
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("{}", over_budget_message(*.resident, *.budget))]
pub struct OverBudget {
    resident: u64,
    budget: u64,
}

pub(crate) fn over_budget_message(resident: u64, budget: u64) -> String {
    format!(
        "the server is at its memory budget ({} MiB resident, budget {} MiB; see --max-memory-mb): \
         delete trees or subtrees, or restart with a larger budget",
        resident >> 20,
        budget >> 20
    )
}

/// This process's resident set size, from `/proc/self/statm`.
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_resident_size() {
        let r = resident_bytes().expect("/proc/self/statm");
        assert!(r > 1 << 20, "{r}");
        assert!(Watch::new(1).check().unwrap_err().to_string().contains("memory budget"));
        assert!(Watch::new(0).check().is_ok());
    }
}
