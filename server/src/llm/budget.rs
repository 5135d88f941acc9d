//! A tree's budget: optional caps on the tokens, calls and money its runs may spend on real
//! providers, shared (`Arc`) by every run of the tree and charged by [`super::ledger::metered_call`].
//!
//! The three caps are held differently, on purpose:
//! - **tokens** (as before): checked before a call, charged after, so calls already running
//!   finish and `spent` may end a little above the limit;
//! - **calls**: a call is counted when it starts, and one that would pass the limit never starts;
//! - **money** is never exceeded: before a call starts, its most possible cost is reserved — the
//!   prompt at one token per byte of its text plus a few per message (no tokenizer makes more), the
//!   completion at the request's or the provider's `max_tokens` — and a call whose reservation does
//!   not fit beside what is spent and reserved is refused. After the call the reservation is
//!   replaced by what it cost. A model without a price, or a provider that cannot say its
//!   `max_tokens`, cannot be bounded, so under a money cap its calls are refused with the reason.
//!   (This holds as long as the provider honours `max_tokens`, as the three dialects' servers do.)
//!
//! A budget may sit **within** another ([`TreeBudget::within`]): an exploration's budget within
//! its tree's. A call is admitted only when both admit it, and is charged to both.
//!
//! A **probe** ([`TreeBudget::probe`]) admits no call: it keeps what the first call it was asked
//! for would have held under a money cap (or why that call could not be bounded), so a run can be
//! started only to learn what its first call would hold, and makes no call.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::LlmError;
use super::chat::{ChatRequest, Usage};
use super::price::PriceTable;

/// The caps, any of which may be absent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub tokens: Option<u64>,
    pub calls: Option<u64>,
    /// US dollars.
    pub money: Option<f64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_none() && self.calls.is_none() && self.money.is_none()
    }
}

#[derive(Debug)]
pub struct TreeBudget {
    limits: Limits,
    prices: Arc<PriceTable>,
    tokens: AtomicU64,
    calls: AtomicU64,
    money: Mutex<Money>,
    /// The budget this one is part of (its tree's), charged with it.
    outer: Option<Arc<TreeBudget>>,
    /// Calls refused so far (by this budget or its outer one).
    refused: AtomicU64,
    /// A probe's record of its first call: the most it could cost, or why it has no bound.
    /// `None` for a budget that admits calls.
    probe: Option<Mutex<Option<Result<f64, Unbounded>>>>,
}

#[derive(Debug, Default)]
struct Money {
    spent: f64,
    reserved: f64,
}

/// Why a call's cost has no bound, so a money cap cannot admit it (the model is named).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unbounded {
    #[error(
        "money budget: {0} has no price, so its calls cannot be kept within the budget; add it to the price table (--prices)"
    )]
    NoPrice(String),
    #[error("money budget: {0} does not say its max_tokens, so a call's cost has no bound")]
    NoMaxTokens(String),
}

/// What a started call holds until it is settled.
#[derive(Debug)]
#[must_use = "a reservation is settled after the call"]
pub struct Hold {
    money: f64,
    outer: Option<Box<Hold>>,
}

/// Tokens counted for each message's framing on top of its text, and for the reply's priming:
/// more than any chat template adds.
const TOKENS_PER_MESSAGE: u64 = 16;
const TOKENS_PER_REQUEST: u64 = 64;

/// The most prompt tokens `request` can count as: one per byte of its text (a token is at least
/// one byte in every byte-level tokenizer), plus framing.
pub(crate) fn prompt_bound(request: &ChatRequest) -> u64 {
    let text: usize = request.messages.iter().map(|m| m.flat().1.len()).sum::<usize>()
        + serde_json::to_string(&request.tools).map_or(0, |t| t.len())
        + request
            .response_schema
            .as_ref()
            .map_or(0, |s| s.schema.to_string().len());
    text as u64 + TOKENS_PER_MESSAGE * request.messages.len() as u64 + TOKENS_PER_REQUEST
}

impl TreeBudget {
    pub fn new(limits: Limits, prices: Arc<PriceTable>) -> TreeBudget {
        TreeBudget {
            limits,
            prices,
            tokens: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            money: Mutex::new(Money::default()),
            outer: None,
            refused: AtomicU64::new(0),
            probe: None,
        }
    }

    /// A budget that admits no call and keeps what its first call would have held under a money
    /// cap ([`TreeBudget::probed`]).
    pub fn probe(prices: Arc<PriceTable>) -> TreeBudget {
        TreeBudget {
            probe: Some(Mutex::new(None)),
            ..TreeBudget::new(
                Limits {
                    money: Some(0.0),
                    ..Limits::default()
                },
                prices,
            )
        }
    }

    /// What a probe's first call would have held (dollars), or why its cost has no bound;
    /// `None` when no call was asked for.
    pub(crate) fn probed(&self) -> Option<Result<f64, Unbounded>> {
        self.probe.as_ref()?.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Dollars a call may still hold here and in every budget this one is within: the smallest
    /// of their money caps less what is spent and held; `None` when none has a money cap.
    pub(crate) fn money_left(&self) -> Option<f64> {
        let own = self.limits.money.map(|limit| {
            let m = self.money.lock().unwrap_or_else(|p| p.into_inner());
            (limit - m.spent - m.reserved).max(0.0)
        });
        let outer = self.outer.as_ref().and_then(|o| o.money_left());
        match (own, outer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A budget of its own that also charges `outer` (when there is one): what a part of a
    /// tree's work (an exploration) may spend, within what the tree may.
    pub fn within(limits: Limits, prices: Arc<PriceTable>, outer: Option<Arc<TreeBudget>>) -> TreeBudget {
        TreeBudget {
            outer,
            ..TreeBudget::new(limits, prices)
        }
    }

    /// Counts what was spent before this budget existed (an exploration resumed after a
    /// restart): `tokens` and `money` (dollars) as if charged, this budget's only.
    pub(crate) fn already_spent(&self, tokens: u64, money: f64) {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
        self.money.lock().unwrap_or_else(|p| p.into_inner()).spent += money;
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Tokens charged so far.
    pub fn spent(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Calls started so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Dollars charged so far (reservations of calls still running not included).
    pub(crate) fn money_spent(&self) -> f64 {
        self.money.lock().unwrap_or_else(|p| p.into_inner()).spent
    }

    /// Calls refused so far: once one is, the budget is spent for calls of that size.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Admits a call of `model` (`dialect:model`) with `request`, or says which cap stops it.
    /// `max_tokens` is the provider's completion limit when the request sets none.
    pub(crate) fn reserve(
        &self,
        model: &str,
        request: &ChatRequest,
        max_tokens: Option<u32>,
    ) -> Result<Hold, LlmError> {
        self.admit(model, request, max_tokens).inspect_err(|_| {
            self.refused.fetch_add(1, Ordering::Relaxed);
        })
    }

    fn admit(&self, model: &str, request: &ChatRequest, max_tokens: Option<u32>) -> Result<Hold, LlmError> {
        let refuse = |why: String| Err(LlmError::Request(why));
        if let Some(seen) = &self.probe {
            let worst = self.worst_case(model, request, max_tokens);
            seen.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(worst);
            return refuse("a probe makes no call".into());
        }
        if let Some(limit) = self.limits.tokens {
            let spent = self.spent();
            if spent >= limit {
                return refuse(format!(
                    "token budget spent: {spent} of {limit} tokens used; raise the budget to continue"
                ));
            }
        }
        let worst = match self.limits.money {
            None => 0.0,
            Some(_) => match self.worst_case(model, request, max_tokens) {
                Ok(w) => w,
                Err(why) => return refuse(why.to_string()),
            },
        };
        if let Some(limit) = self.limits.calls {
            let taken = self
                .calls
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < limit).then_some(n + 1));
            if let Err(n) = taken {
                return refuse(format!(
                    "call budget spent: {n} of {limit} calls made; raise the budget to continue"
                ));
            }
        } else {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(limit) = self.limits.money {
            let mut m = self.money.lock().unwrap_or_else(|p| p.into_inner());
            if m.spent + m.reserved + worst > limit {
                let (spent, reserved) = (m.spent, m.reserved);
                drop(m);
                self.calls.fetch_sub(1, Ordering::SeqCst);
                return refuse(format!(
                    "money budget: ${spent:.6} spent and ${reserved:.6} held by running calls of ${limit:.6}; \
                     this call may cost up to ${worst:.6}; raise the budget to continue"
                ));
            }
            m.reserved += worst;
        }
        let outer = match &self.outer {
            None => None,
            Some(o) => match o.reserve(model, request, max_tokens) {
                Ok(h) => Some(Box::new(h)),
                Err(e) => {
                    // Not admitted after all: undo this budget's count and reservation.
                    self.calls.fetch_sub(1, Ordering::SeqCst);
                    if self.limits.money.is_some() {
                        let mut m = self.money.lock().unwrap_or_else(|p| p.into_inner());
                        m.reserved = (m.reserved - worst).max(0.0);
                    }
                    return Err(e);
                }
            },
        };
        Ok(Hold { money: worst, outer })
    }

    /// The most a call of `model` with `request` may cost (what a money cap holds for it), or why
    /// it has no bound.
    fn worst_case(&self, model: &str, request: &ChatRequest, max_tokens: Option<u32>) -> Result<f64, Unbounded> {
        let Some(price) = self.prices.price(model) else {
            return Err(Unbounded::NoPrice(model.to_string()));
        };
        let Some(completion) = request.max_tokens.or(max_tokens) else {
            return Err(Unbounded::NoMaxTokens(model.to_string()));
        };
        Ok(price.worst(prompt_bound(request), u64::from(completion)))
    }

    /// Ends a call admitted by [`TreeBudget::reserve`]: its tokens and cost are charged (nothing
    /// when it failed) and its reservation released.
    pub fn settle(&self, model: &str, hold: Hold, usage: Option<&Usage>) {
        if let (Some(o), Some(h)) = (&self.outer, hold.outer) {
            o.settle(model, *h, usage);
        }
        if let Some(u) = usage {
            self.tokens.fetch_add(u.total(), Ordering::Relaxed);
        }
        if self.limits.money.is_some() {
            let cost = usage.and_then(|u| self.prices.cost(model, u)).unwrap_or(0.0);
            let mut m = self.money.lock().unwrap_or_else(|p| p.into_inner());
            m.reserved = (m.reserved - hold.money).max(0.0);
            m.spent += cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::{Message, Role};

    fn prices() -> Arc<PriceTable> {
        Arc::new(PriceTable::with_file(r#"{"fake:priced": {"prompt": 1000, "completion": 2000}}"#).unwrap())
    }

    fn request(words: usize) -> ChatRequest {
        ChatRequest::new(vec![Message::new(Role::User, "x ".repeat(words))])
    }

    #[test]
    fn tokens_stop_new_calls_once_spent() {
        let b = TreeBudget::new(
            Limits {
                tokens: Some(100),
                ..Limits::default()
            },
            prices(),
        );
        let hold = b.reserve("fake:priced", &request(1), None).unwrap();
        b.settle(
            "fake:priced",
            hold,
            Some(&Usage {
                prompt_tokens: 70,
                completion_tokens: 40,
                cached_tokens: 0,
                cache_write_tokens: 0,
            }),
        );
        assert_eq!(b.spent(), 110);
        assert_eq!(
            b.reserve("fake:priced", &request(1), None).unwrap_err().to_string(),
            "LLM request failed: token budget spent: 110 of 100 tokens used; raise the budget to continue"
        );
    }

    #[test]
    fn money_is_reserved_at_the_worst_case_so_concurrent_calls_never_pass_the_cap() {
        // A call of 10 words with max_tokens 100 may cost (20 + 16 + 64) × $0.001 + 100 × $0.002
        // = $0.30; actually it costs 10 × $0.001 + 50 × $0.002 = $0.11.
        let b = TreeBudget::new(
            Limits {
                money: Some(1.0),
                ..Limits::default()
            },
            prices(),
        );
        let r = request(10);
        let holds: Vec<Hold> = (0..3)
            .map(|_| b.reserve("fake:priced", &r, Some(100)).unwrap())
            .collect();
        let e = b.reserve("fake:priced", &r, Some(100)).unwrap_err().to_string();
        assert!(e.contains("money budget") && e.contains("held by running calls"), "{e}");
        let used = Usage {
            prompt_tokens: 10,
            completion_tokens: 50,
            cached_tokens: 0,
            cache_write_tokens: 0,
        };
        for h in holds {
            b.settle("fake:priced", h, Some(&used));
        }
        assert!((b.money_spent() - 0.33).abs() < 1e-12, "{}", b.money_spent());
        // $0.67 left: two more calls fit ($0.30 each held), a third does not.
        let more: Vec<Hold> = (0..2)
            .map(|_| b.reserve("fake:priced", &r, Some(100)).unwrap())
            .collect();
        assert!(b.reserve("fake:priced", &r, Some(100)).is_err());
        for h in more {
            b.settle("fake:priced", h, None);
        }
        assert!((b.money_spent() - 0.33).abs() < 1e-12, "a failed call costs nothing");
        assert_eq!(b.calls(), 5);
        let unpriced = b.reserve("openai:unknown", &r, Some(100)).unwrap_err().to_string();
        assert!(unpriced.contains("no price"), "{unpriced}");
        let unbounded = b.reserve("fake:priced", &r, None).unwrap_err().to_string();
        assert!(unbounded.contains("max_tokens"), "{unbounded}");
    }

    #[test]
    fn a_budget_within_another_is_admitted_only_when_both_admit_and_charges_both() {
        let tree = Arc::new(TreeBudget::new(
            Limits {
                calls: Some(3),
                ..Limits::default()
            },
            prices(),
        ));
        let part = TreeBudget::within(
            Limits {
                money: Some(1.0),
                ..Limits::default()
            },
            prices(),
            Some(tree.clone()),
        );
        let r = request(10);
        let used = Usage {
            prompt_tokens: 10,
            completion_tokens: 50,
            cached_tokens: 0,
            cache_write_tokens: 0,
        };
        for _ in 0..3 {
            let h = part.reserve("fake:priced", &r, Some(100)).unwrap();
            part.settle("fake:priced", h, Some(&used));
        }
        assert_eq!((tree.calls(), tree.spent(), part.spent()), (3, 180, 180));
        // The tree's call cap refuses the fourth: the part's reservation is undone.
        let e = part.reserve("fake:priced", &r, Some(100)).unwrap_err().to_string();
        assert!(e.contains("call budget spent"), "{e}");
        assert_eq!((part.calls(), part.refusals(), tree.refusals()), (3, 1, 1));
        assert!((part.money_spent() - 0.33).abs() < 1e-12);
        assert_eq!(part.money.lock().unwrap().reserved, 0.0);
    }

    #[test]
    fn a_probe_makes_no_call_and_keeps_what_its_first_would_hold() {
        let p = TreeBudget::probe(prices());
        assert_eq!(p.probed(), None);
        let r = request(10);
        assert!(
            p.reserve("fake:priced", &r, Some(100)).is_err(),
            "a probe admits nothing"
        );
        assert!(p.reserve("fake:priced", &request(500), Some(100)).is_err());
        let held = p.probed().unwrap().unwrap();
        let want = prompt_bound(&r) as f64 * 0.001 + 100.0 * 0.002;
        assert!((held - want).abs() < 1e-12, "the first call's: {held}, not {want}");
        let q = TreeBudget::probe(prices());
        let _ = q.reserve("openai:unknown", &r, Some(100));
        assert_eq!(q.probed(), Some(Err(Unbounded::NoPrice("openai:unknown".into()))));
        // What is left under a budget and the one it is within: the smaller.
        let tree = Arc::new(TreeBudget::new(
            Limits {
                money: Some(0.5),
                ..Limits::default()
            },
            prices(),
        ));
        let part = TreeBudget::within(Limits::default(), prices(), Some(tree.clone()));
        assert_eq!(part.money_left(), Some(0.5));
        let h = tree.reserve("fake:priced", &r, Some(100)).unwrap();
        assert!(
            (part.money_left().unwrap() - (0.5 - want)).abs() < 1e-12,
            "less what is held"
        );
        tree.settle("fake:priced", h, None);
        assert_eq!(TreeBudget::new(Limits::default(), prices()).money_left(), None);
    }

    #[test]
    fn calls_are_counted_as_they_start() {
        let b = TreeBudget::new(
            Limits {
                calls: Some(2),
                ..Limits::default()
            },
            prices(),
        );
        let _a = b.reserve("mock:mock", &request(1), None).unwrap();
        let _b = b.reserve("mock:mock", &request(1), None).unwrap();
        let e = b.reserve("mock:mock", &request(1), None).unwrap_err().to_string();
        assert!(e.contains("call budget spent: 2 of 2"), "{e}");
    }
}
