//! The episode's growing records (trades, decision logs, the holdings timeline) are persistent
//! append-only lists, so cloning an episode costs the same at any length; see [`crate::chunks`].

pub use crate::chunks::AppendList as AppendLog;
