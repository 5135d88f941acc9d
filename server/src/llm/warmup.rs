//! The first call of a shared prefix goes alone; the calls that share it follow once it is
//! answered, and meet a warm cache.
//!
//! When a fan-out's children start, every child's first call of one agent carries that agent's
//! whole context at the fork, byte for byte. Sent together, they all reach the provider before
//! any of them has put that prefix in its cache: OpenAI and Anthropic write a cache entry only
//! once a response is under way, and llama.cpp evaluates the prefix once in every slot such a
//! call lands on (its prompt cache hands a saved prompt to one slot only). [`WarmUp`] lets the
//! first of them (the leader, keyed by a [`WarmKey`]: provider, run affinity, agent) go alone and
//! holds the others until it is answered. The coalescer (`llm::coalesce`) comes first: identical
//! calls are made once, and only their leader passes here.
//!
//! With `serial` (`LLM_WARM_UP=serial`), the held calls go one at a time instead, each once the
//! one before it is answered: for a server whose parallel slots each evaluate a prefix again
//! (llama.cpp's `llama-server` hands a cached prompt to one slot only), which then serves every
//! sibling from the slot that holds it.
//!
//! Only a run's first call per agent is gated: later calls extend a prompt the same run sent,
//! which no sibling shares. The cost is that the siblings start one call later; a provider that
//! has never reported a cached prompt token to this process is taken to have no cache (nothing
//! to warm) and its calls are never held. A leader that fails or is cancelled releases its
//! siblings at once (they go as they would have without the gate).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// What makes calls share a prefix: one agent's first call in the runs started from one node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WarmKey {
    pub(crate) provider: String,
    pub(crate) affinity: u64,
    pub(crate) agent: String,
}

/// How many answered keys are remembered (a sibling that comes after its leader answered goes
/// at once); older ones are forgotten, which only means a late sibling leads again.
const REMEMBERED: usize = 4096;

#[derive(Default)]
struct Inner {
    /// Keys whose leader is in flight: whether the others go one at a time, and the calls
    /// waiting (each is told whether it leads next).
    warming: HashMap<WarmKey, (bool, VecDeque<oneshot::Sender<bool>>)>,
    /// Keys whose leader was answered, oldest first.
    warm: HashSet<WarmKey>,
    order: VecDeque<WarmKey>,
    /// Providers (labels) that reported cached prompt tokens: only their calls are held.
    caching: HashSet<String>,
}

/// The gate shared by every run of a server.
#[derive(Default)]
pub struct WarmUp {
    inner: Mutex<Inner>,
}

/// How a call passed the gate.
#[derive(Default)]
pub(crate) struct Entered {
    /// Set when the call goes first: it warms the prefix for those held after it.
    pub lead: Option<WarmLead>,
    /// How long the call was held, when it was.
    pub held: Option<Duration>,
}

/// The call that warms a prefix for the others. Dropped without [`WarmLead::finish`] (cancelled,
/// or failed), it releases them.
pub(crate) struct WarmLead {
    gate: Arc<WarmUp>,
    key: Option<WarmKey>,
}

impl WarmUp {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that `provider` serves prompts from a cache (it reported cached tokens).
    pub(crate) fn saw_cache(&self, provider: &str) {
        let mut inner = self.lock();
        if !inner.caching.contains(provider) {
            inner.caching.insert(provider.to_string());
        }
    }

    /// Waits, if another call warms `key`'s prefix now, until it is answered (`serial`: until
    /// every call before this one is). The lead is there when this call goes first (hand it the
    /// outcome: the next waits for it), and `held` says for how long the call waited, when it
    /// did.
    pub(crate) async fn enter(self: &Arc<Self>, key: WarmKey, serial: bool) -> Entered {
        let wait = {
            let mut inner = self.lock();
            if !inner.caching.contains(&key.provider) || inner.warm.contains(&key) {
                return Entered::default();
            }
            match inner.warming.get_mut(&key) {
                Some((_, waiters)) => {
                    let (tx, rx) = oneshot::channel();
                    waiters.push_back(tx);
                    rx
                }
                None => {
                    inner.warming.insert(key.clone(), (serial, VecDeque::new()));
                    return Entered { lead: Some(self.lead(key)), held: None };
                }
            }
        };
        let since = Instant::now();
        // Told to lead next (one at a time), or to go: answered, failed or cancelled.
        let lead = match wait.await {
            Ok(true) => Some(self.lead(key)),
            _ => None,
        };
        Entered { lead, held: Some(since.elapsed()) }
    }

    fn lead(self: &Arc<Self>, key: WarmKey) -> WarmLead {
        WarmLead { gate: self.clone(), key: Some(key) }
    }

    /// Calls held now (for tests).
    pub fn waiting(&self) -> usize {
        self.lock().warming.values().map(|(_, w)| w.len()).sum()
    }

    /// The leader of `key` ended (`answered`: with an answer). One at a time, the next waiting
    /// call leads; else every waiting call goes, and an answered key is remembered as warm.
    fn release(&self, key: WarmKey, answered: bool) {
        let mut inner = self.lock();
        if let Some((true, waiters)) = inner.warming.get_mut(&key) {
            while let Some(next) = waiters.pop_front() {
                // A waiter that went away (cancelled) leads nothing: the one after it does.
                if next.send(true).is_ok() {
                    return;
                }
            }
        }
        let (_, waiters) = inner.warming.remove(&key).unwrap_or_default();
        if answered && inner.warm.insert(key.clone()) {
            inner.order.push_back(key);
            while inner.order.len() > REMEMBERED {
                if let Some(old) = inner.order.pop_front() {
                    inner.warm.remove(&old);
                }
            }
        }
        drop(inner);
        for w in waiters {
            let _ = w.send(false);
        }
    }
}

impl WarmLead {
    /// The leader's call ended: `answered` marks the prefix warm (later siblings go at once);
    /// either way the held ones go now (one at a time: the next one).
    pub(crate) fn finish(mut self, answered: bool) {
        if let Some(key) = self.key.take() {
            self.gate.release(key, answered);
        }
    }
}

impl Drop for WarmLead {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.gate.release(key, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(agent: &str) -> WarmKey {
        WarmKey { provider: "openai:m".into(), affinity: 7, agent: agent.into() }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// Whether a call of `agent`'s leads (the gate is entered and left at once).
    async fn leads(gate: &Arc<WarmUp>, agent: &str) -> bool {
        gate.enter(key(agent), false).await.lead.is_some()
    }

    /// A gate that has seen the provider cache.
    fn warm_gate() -> Arc<WarmUp> {
        let gate = Arc::new(WarmUp::default());
        gate.saw_cache("openai:m");
        gate
    }

    /// A sibling call of Ann's entering the gate: whether it led and whether it was held.
    fn sibling(gate: &Arc<WarmUp>) -> tokio::task::JoinHandle<(bool, bool)> {
        let gate = gate.clone();
        tokio::spawn(async move {
            let entered = gate.enter(key("Ann"), false).await;
            (entered.lead.is_some(), entered.held.is_some())
        })
    }

    #[tokio::test]
    async fn siblings_wait_for_the_first_answer_only_on_a_provider_that_caches() {
        let gate = Arc::new(WarmUp::default());
        assert!(!leads(&gate, "Ann").await, "no cache seen: nothing is held");
        gate.saw_cache("openai:m");
        let first = gate.enter(key("Ann"), false).await;
        assert!(first.held.is_none(), "the first is not held");
        let lead = first.lead.expect("the first leads");
        let sibling = sibling(&gate);
        settle().await;
        assert_eq!(gate.waiting(), 1, "the sibling is held while the leader is out");
        assert!(leads(&gate, "Bo").await, "another agent leads its own");
        lead.finish(true);
        assert_eq!(sibling.await.unwrap(), (false, true), "released, held, and it does not lead");
        assert!(!leads(&gate, "Ann").await, "a late sibling goes at once");
    }

    #[tokio::test]
    async fn a_failed_or_cancelled_leader_releases_its_siblings_without_warming() {
        let gate = warm_gate();
        for fail in [true, false] {
            let lead = gate.enter(key("Ann"), false).await.lead.expect("leads");
            let sibling = sibling(&gate);
            settle().await;
            assert_eq!(gate.waiting(), 1);
            if fail {
                lead.finish(false);
            } else {
                drop(lead);
            }
            assert!(!sibling.await.unwrap().0, "released, and it does not lead");
            assert_eq!(gate.waiting(), 0);
        }
        assert!(leads(&gate, "Ann").await, "not warm: the next call leads again");
    }

    #[tokio::test]
    async fn one_at_a_time_each_sibling_waits_for_the_one_before_it() {
        let gate = warm_gate();
        let first = gate.enter(key("Ann"), true).await.lead.expect("leads");
        let order = Arc::new(Mutex::new(Vec::new()));
        let siblings: Vec<_> = (0..3)
            .map(|i| {
                let (gate, order) = (gate.clone(), order.clone());
                tokio::spawn(async move {
                    let lead = gate.enter(key("Ann"), true).await.lead;
                    order.lock().unwrap().push(i);
                    lead.expect("each leads the next in turn").finish(true);
                })
            })
            .collect();
        settle().await;
        assert_eq!(gate.waiting(), 3);
        assert!(order.lock().unwrap().is_empty(), "all held by the first");
        first.finish(true);
        for s in siblings {
            s.await.unwrap();
        }
        assert_eq!(order.lock().unwrap().len(), 3);
        assert_eq!(gate.waiting(), 0);
        assert!(gate.enter(key("Ann"), true).await.lead.is_none(), "warm once all went");
    }
}
