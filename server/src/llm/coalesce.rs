//! Identical calls in flight at once go to the provider once.
//!
//! The children of a `same_seed` fan-out, and the replicates of a cell that nothing makes
//! differ, send the same requests at the same time. A [`Coalescer`] lets the first of them (the
//! leader) make the call while the others wait for its answer, which each then records as its
//! own (marked `coalesced`, so that it is counted once in money). Calls are told apart by a
//! [`CallKey`]: the provider, the run's affinity (a hash of the tree and the node the runs
//! started from), the simulator's seed (so the children of an ordinary fan-out, which have
//! seeds of their own, never share a call: their samples must stay independent) and the
//! request's hash. A call is shared only while it is in flight; nothing is cached afterwards.
//!
//! A leader that is cancelled before it answers leaves its waiters without an answer: the first
//! of them to notice becomes the leader and makes the call itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::LlmError;
use super::record::LlmRecord;

/// What makes two calls the same call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CallKey {
    pub(crate) provider: String,
    pub(crate) affinity: u64,
    pub(crate) seed: u64,
    pub(crate) hash: String,
}

/// The leader's answer: its reply text and its record.
pub(crate) type Answer = Result<(String, LlmRecord), LlmError>;

type Waiters = Vec<oneshot::Sender<Answer>>;

/// The calls in flight, each with the runs waiting for it. Shared by every run of a server.
#[derive(Default)]
pub struct Coalescer {
    inflight: Mutex<HashMap<CallKey, Waiters>>,
}

/// Whether a call is made here or waited for.
pub(crate) enum Turn {
    /// Make the call and hand its answer to [`Leader::finish`].
    Lead(Leader),
    /// Another run makes it: wait for its answer (an error of the channel means the leader was
    /// cancelled: ask again).
    Wait(oneshot::Receiver<Answer>),
}

/// The run that makes a call others wait for. Dropped without finishing (cancelled), it lets
/// them go, and the next to ask leads.
pub struct Leader {
    coalescer: Arc<Coalescer>,
    key: Option<CallKey>,
}

impl Coalescer {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CallKey, Waiters>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the call `key`: leads it when none is in flight, else waits for it.
    pub(crate) fn join(self: &Arc<Self>, key: CallKey) -> Turn {
        let mut inflight = self.lock();
        if let Some(waiters) = inflight.get_mut(&key) {
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            return Turn::Wait(rx);
        }
        inflight.insert(key.clone(), Vec::new());
        Turn::Lead(Leader { coalescer: self.clone(), key: Some(key) })
    }

    /// Calls in flight now (for tests).
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }
}

impl Leader {
    /// Hands the call's answer to everyone who waited for it.
    pub(crate) fn finish(mut self, answer: &Answer) {
        let Some(key) = self.key.take() else { return };
        let waiters = self.coalescer.lock().remove(&key).unwrap_or_default();
        for w in waiters {
            // A waiter that went away (cancelled) needs no answer.
            let _ = w.send(answer.clone());
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // Dropping the senders wakes the waiters with an error: they ask again.
            self.coalescer.lock().remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hash: &str) -> CallKey {
        CallKey { provider: "openai:m".into(), affinity: 1, seed: 2, hash: hash.into() }
    }

    #[tokio::test]
    async fn waiters_get_the_leaders_answer_and_a_cancelled_leader_lets_them_go() {
        let c = Arc::new(Coalescer::default());
        let Turn::Lead(leader) = c.join(key("a")) else { panic!("first leads") };
        let Turn::Wait(w1) = c.join(key("a")) else { panic!("second waits") };
        let Turn::Wait(w2) = c.join(key("a")) else { panic!("third waits") };
        assert!(matches!(c.join(key("b")), Turn::Lead(_)), "another request leads its own");
        let record = LlmRecord { hash: "a".into(), response: "hi".into(), ..LlmRecord::default() };
        leader.finish(&Ok(("hi".into(), record.clone())));
        assert_eq!(w1.await.unwrap().unwrap().1, record);
        assert_eq!(w2.await.unwrap().unwrap().0, "hi");
        assert_eq!(c.in_flight(), 0, "nothing is kept after the call");

        let Turn::Lead(leader) = c.join(key("a")) else { panic!("leads again") };
        let Turn::Wait(w) = c.join(key("a")) else { panic!("waits") };
        drop(leader);
        assert!(w.await.is_err(), "a cancelled leader's waiter asks again");
        assert!(matches!(c.join(key("a")), Turn::Lead(_)));
    }
}
