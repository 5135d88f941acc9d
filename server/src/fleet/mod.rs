//! A server's life on its database, below the command line: `simtree serve` leads the database
//! or follows the server that does and takes over when that one's lease lapses; `simtree worker`
//! and a server's own worker take runs from the job queue.
//!
//! The CLI parses flags into a [`LeaderPlan`] (what to lead with) and a [`StoreSite`] (where
//! the trees are kept) and calls [`serve`] or [`run_worker`]; everything after that is here:
//! the workbench built on its store ([`lead`]), the follower's heartbeat and the takeover
//! (`follow.rs`), the stop of a leader that lost its lease, and the workers' start and stop.
//! The HTTP side of several servers on one database — the door that forwards to the leader —
//! is `http/fleet.rs`; the lease itself is `store/lease.rs`. Every failure is a [`FleetError`].

mod error;
mod follow;
mod lead;
mod serve;
mod site;
mod worker;

pub use error::FleetError;
pub use lead::{Leader, LeaderPlan, lead};
pub use serve::serve;
pub use site::StoreSite;
pub use worker::backend;
pub(crate) use worker::{run_worker, worker_bench};
