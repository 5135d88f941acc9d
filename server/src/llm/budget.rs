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
//! A provider's **explicit cache** (Gemini's `cachedContents`, created for a fan-out) is
//! admitted the same way before it is created ([`TreeBudget::reserve_store`]): its most possible
//! cost (the prefix's token bound written once and stored for the lifetime asked for) is held, it
//! is not created when that does not fit, and the hold is replaced by what it cost. It counts
//! against the token and money caps, not the call cap: it is no call of the run.
//!
//! A budget may sit **within** another ([`TreeBudget::within`], [`TreeBudget::inside`]): an
//! exploration's budget within its tree's. A call is admitted only when both admit it, and is charged to both.
//!
//! A **probe** ([`TreeBudget::probe`]) admits no call: it keeps what the first call it was asked
//! for would have held under a money cap (or why that call could not be bounded), so a run can be
//! started only to learn what its first call would hold, and makes no call.
//!
//! Where the spending is booked is a [`Book`]: this process's memory ([`MemoryBook`], one
//! process on its data folder), or a database that every process charging the tree shares
//! (PostgreSQL with jobs: `workbench/jobs.rs`), where a call's count and money hold are taken in
//! one transaction under the tree's row lock, so that runs on two workers can never spend one
//! tree's budget together past its caps. The rules above are the same for both: only where the
//! numbers live differs.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::chat::{ChatRequest, Message, Usage};
use super::price::PriceTable;
use super::{BoxFuture, LlmError};

/// The caps, any of which may be absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) calls: Option<u64>,
    /// US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) money: Option<f64>,
}

impl Limits {
    pub(crate) fn is_empty(&self) -> bool {
        self.tokens.is_none() && self.calls.is_none() && self.money.is_none()
    }
}

/// What a book holds for a budget: tokens and dollars charged, calls started, and dollars held
/// by calls still running.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) tokens: u64,
    pub(crate) calls: u64,
    pub(crate) money: f64,
    pub(crate) held: f64,
}

/// Why a book refused a call, with what it found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Refusal {
    /// The tokens charged reached the cap.
    Tokens { spent: u64 },
    /// The calls started reached the cap.
    Calls { made: u64 },
    /// The call's hold does not fit beside what is spent and held.
    Money { spent: f64, held: f64 },
    /// The book could not be read (its database away): no call starts that it cannot count.
    Unreadable(String),
}

/// Where a budget's spending is booked (see the module doc). Each method is one step of a call's
/// life under the budget; `limits` are the budget's caps.
pub(crate) trait Book: Send + Sync + std::fmt::Debug {
    /// Holds `money` dollars, and counts a call when `call`, when `limits` admit it beside what
    /// is spent and held; returns the hold's id.
    fn hold(&self, limits: Limits, money: f64, call: bool) -> BoxFuture<'_, Result<u64, Refusal>>;
    /// Ends hold `id` of `held` dollars: released, with `tokens` and `money` (dollars) charged.
    fn settle(&self, id: u64, held: f64, tokens: u64, money: f64) -> BoxFuture<'_, ()>;
    /// Takes back hold `id` of `held` dollars, and its call when it counted one (`call`): a
    /// budget it is within refused it.
    fn undo(&self, id: u64, held: f64, call: bool) -> BoxFuture<'_, ()>;
    /// What is booked now (may block on a database: call it off the runtime's threads).
    fn totals(&self) -> Totals;
    /// Counts `tokens` and `money` dollars spent before this book existed (an exploration
    /// carried on after a restart), unless the book has a record of its own already (a
    /// database's book outlives the process). May block, as [`Book::totals`].
    fn carry(&self, tokens: u64, money: f64);
    /// Which part of its tree's budget a book other processes share keeps (0: the tree's own;
    /// an exploration's id), so that a job can name it; `None` for a book of this process.
    fn part(&self) -> Option<u64> {
        None
    }
}

/// A book in this process's memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryBook {
    tokens: AtomicU64,
    calls: AtomicU64,
    money: Mutex<Money>,
}

#[derive(Debug, Default)]
struct Money {
    spent: f64,
    reserved: f64,
}

impl MemoryBook {
    fn money(&self) -> std::sync::MutexGuard<'_, Money> {
        self.money.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admit(&self, limits: Limits, worst: f64, call: bool) -> Result<u64, Refusal> {
        if let Some(limit) = limits.tokens {
            let spent = self.tokens.load(Ordering::Relaxed);
            if spent >= limit {
                return Err(Refusal::Tokens { spent });
            }
        }
        if !call {
            // Nothing to count.
        } else if let Some(limit) = limits.calls {
            let taken = self.calls.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < limit).then_some(n + 1));
            if let Err(made) = taken {
                return Err(Refusal::Calls { made });
            }
        } else {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(limit) = limits.money {
            let mut m = self.money();
            if m.spent + m.reserved + worst > limit {
                let (spent, held) = (m.spent, m.reserved);
                drop(m);
                self.calls.fetch_sub(u64::from(call), Ordering::SeqCst);
                return Err(Refusal::Money { spent, held });
            }
            m.reserved += worst;
        }
        Ok(0)
    }
}

impl Book for MemoryBook {
    fn hold(&self, limits: Limits, money: f64, call: bool) -> BoxFuture<'_, Result<u64, Refusal>> {
        Box::pin(std::future::ready(self.admit(limits, money, call)))
    }

    fn settle(&self, _id: u64, held: f64, tokens: u64, money: f64) -> BoxFuture<'_, ()> {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
        let mut m = self.money();
        m.reserved = (m.reserved - held).max(0.0);
        m.spent += money;
        Box::pin(std::future::ready(()))
    }

    fn undo(&self, _id: u64, held: f64, call: bool) -> BoxFuture<'_, ()> {
        self.calls.fetch_sub(u64::from(call), Ordering::SeqCst);
        let mut m = self.money();
        m.reserved = (m.reserved - held).max(0.0);
        Box::pin(std::future::ready(()))
    }

    fn carry(&self, tokens: u64, money: f64) {
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
        self.money().spent += money;
    }

    fn totals(&self) -> Totals {
        let m = self.money();
        Totals {
            tokens: self.tokens.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            money: m.spent,
            held: m.reserved,
        }
    }
}

#[derive(Debug)]
pub struct TreeBudget {
    limits: Limits,
    prices: Arc<PriceTable>,
    book: Books,
    /// The budget this one is part of (its tree's), charged with it.
    outer: Option<Arc<TreeBudget>>,
    /// Calls refused so far (by this budget or its outer one).
    refused: AtomicU64,
    /// A probe's record of its first call: the most it could cost, or why it has no bound.
    /// `None` for a budget that admits calls.
    probe: Option<Mutex<Option<Result<f64, Unbounded>>>>,
}

/// A budget's book: its own in memory, or one shared with other processes.
#[derive(Debug)]
enum Books {
    Memory(MemoryBook),
    Shared(Arc<dyn Book>),
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

/// What a budget is asked to admit.
#[derive(Clone, Copy, Debug)]
enum Ask<'a> {
    /// A call of this request; the provider's completion limit when the request sets none.
    Call(&'a ChatRequest, Option<u32>),
    /// Storing at most `tokens` in the provider's explicit cache for `ttl_s` seconds.
    Store { tokens: u64, ttl_s: u64 },
}

/// What an admitted ask spent, charged when it is settled.
#[derive(Clone, Copy, Debug)]
enum Spent<'a> {
    /// The call's usage (`None`: it failed and costs nothing).
    Call(Option<&'a Usage>),
    /// `tokens` stored for `ttl_s` seconds (0: nothing was).
    Store { tokens: u64, ttl_s: u64 },
}

/// What a started call holds until it is settled.
#[derive(Debug)]
#[must_use = "a reservation is settled after the call"]
pub(crate) struct Hold {
    id: u64,
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
    let text: usize = serde_json::to_string(&request.tools).map_or(0, |t| t.len())
        + request.response_schema.as_ref().map_or(0, |s| s.schema.to_string().len());
    messages_bound(&request.messages) + text as u64
}

/// The most tokens `messages` can count as, alone or as a request's prefix (see
/// [`prompt_bound`]).
pub(crate) fn messages_bound(messages: &[Message]) -> u64 {
    let text: usize = messages.iter().map(|m| m.flat().1.len()).sum();
    text as u64 + TOKENS_PER_MESSAGE * messages.len() as u64 + TOKENS_PER_REQUEST
}

impl TreeBudget {
    pub(crate) fn new(limits: Limits, prices: Arc<PriceTable>) -> TreeBudget {
        TreeBudget {
            limits,
            prices,
            book: Books::Memory(MemoryBook::default()),
            outer: None,
            refused: AtomicU64::new(0),
            probe: None,
        }
    }

    /// A budget whose spending is booked in `book`, which other processes share.
    pub(crate) fn shared(limits: Limits, prices: Arc<PriceTable>, book: Arc<dyn Book>) -> TreeBudget {
        TreeBudget { book: Books::Shared(book), ..TreeBudget::new(limits, prices) }
    }

    fn book(&self) -> &dyn Book {
        match &self.book {
            Books::Memory(m) => m,
            Books::Shared(b) => &**b,
        }
    }

    /// Whether its spending is booked where other processes share it.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.book, Books::Shared(_))
    }

    /// The part of its tree's budget its shared book keeps ([`Book::part`]).
    pub(crate) fn part(&self) -> Option<u64> {
        self.book().part()
    }

    /// The prices its money is counted at.
    pub(crate) fn prices(&self) -> &Arc<PriceTable> {
        &self.prices
    }

    /// A budget that admits no call and keeps what its first call would have held under a money
    /// cap ([`TreeBudget::probed`]).
    pub(crate) fn probe(prices: Arc<PriceTable>) -> TreeBudget {
        TreeBudget {
            probe: Some(Mutex::new(None)),
            ..TreeBudget::new(Limits { money: Some(0.0), ..Limits::default() }, prices)
        }
    }

    /// What a probe's first call would have held (dollars), or why its cost has no bound;
    /// `None` when no call was asked for.
    pub(crate) fn probed(&self) -> Option<Result<f64, Unbounded>> {
        self.probe.as_ref()?.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What its book holds now (blocking for a shared book).
    pub(crate) fn totals(&self) -> Totals {
        self.book().totals()
    }

    /// Dollars a call may still hold here and in every budget this one is within: the smallest
    /// of their money caps less what is spent and held; `None` when none has a money cap.
    pub(crate) fn money_left(&self) -> Option<f64> {
        let own = self.limits.money.map(|limit| {
            let t = self.totals();
            (limit - t.money - t.held).max(0.0)
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
        TreeBudget::new(limits, prices).inside(outer)
    }

    /// This budget, charged within `outer` too (see [`TreeBudget::within`]).
    pub(crate) fn inside(self, outer: Option<Arc<TreeBudget>>) -> TreeBudget {
        TreeBudget { outer, ..self }
    }

    /// Counts what was spent before this budget existed (an exploration resumed after a
    /// restart): `tokens` and `money` (dollars) as if charged, this budget's only. (A shared
    /// book that has a record already keeps it: [`Book::carry`].)
    pub(crate) fn already_spent(&self, tokens: u64, money: f64) {
        self.book().carry(tokens, money);
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// Tokens charged so far.
    pub(crate) fn spent(&self) -> u64 {
        self.totals().tokens
    }

    /// Calls started so far.
    pub(crate) fn calls(&self) -> u64 {
        self.totals().calls
    }

    /// Dollars charged so far (reservations of calls still running not included).
    pub(crate) fn money_spent(&self) -> f64 {
        self.totals().money
    }

    /// Calls refused so far: once one is, the budget is spent for calls of that size.
    pub(crate) fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Admits a call of `model` (`dialect:model`) with `request`, or says which cap stops it.
    /// `max_tokens` is the provider's completion limit when the request sets none.
    pub(crate) async fn reserve(
        &self,
        model: &str,
        request: &ChatRequest,
        max_tokens: Option<u32>,
    ) -> Result<Hold, LlmError> {
        self.ask(model, Ask::Call(request, max_tokens)).await
    }

    /// Admits storing at most `tokens` tokens in `model`'s provider's explicit cache for `ttl_s`
    /// seconds (see the module doc), or says which cap stops it. A refusal here refuses no call.
    pub(crate) async fn reserve_store(&self, model: &str, tokens: u64, ttl_s: u64) -> Result<Hold, LlmError> {
        self.ask(model, Ask::Store { tokens, ttl_s }).await
    }

    async fn ask(&self, model: &str, ask: Ask<'_>) -> Result<Hold, LlmError> {
        self.admit(model, ask).await.inspect_err(|_| {
            if matches!(ask, Ask::Call(..)) {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
        })
    }

    async fn admit(&self, model: &str, ask: Ask<'_>) -> Result<Hold, LlmError> {
        let refuse = |why: String| Err(LlmError::Request(why));
        if let Some(seen) = &self.probe {
            if let Ask::Call(..) = ask {
                let worst = self.worst_case(model, ask);
                seen.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(worst);
            }
            return refuse("a probe makes no call".into());
        }
        let worst = match self.limits.money {
            None => 0.0,
            Some(_) => match self.worst_case(model, ask) {
                Ok(w) => w,
                Err(why) => return refuse(why.to_string()),
            },
        };
        // A store is no call: the call cap neither stops nor counts it.
        let (limits, call) = match ask {
            Ask::Call(..) => (self.limits, true),
            Ask::Store { .. } => (Limits { calls: None, ..self.limits }, false),
        };
        let id = match self.book().hold(limits, worst, call).await {
            Ok(id) => id,
            Err(r) => return refuse(refusal_text(&r, limits, worst)),
        };
        let outer = match &self.outer {
            None => None,
            Some(o) => match Box::pin(o.ask(model, ask)).await {
                Ok(h) => Some(Box::new(h)),
                Err(e) => {
                    // Not admitted after all: undo this budget's count and hold.
                    self.book().undo(id, worst, call).await;
                    return Err(e);
                }
            },
        };
        Ok(Hold { id, money: worst, outer })
    }

    /// The most `ask` may cost on `model` (what a money cap holds for it), or why it has no
    /// bound.
    fn worst_case(&self, model: &str, ask: Ask<'_>) -> Result<f64, Unbounded> {
        let Some(price) = self.prices.price(model) else {
            return Err(Unbounded::NoPrice(model.to_string()));
        };
        match ask {
            Ask::Call(request, max_tokens) => {
                let Some(completion) = request.max_tokens.or(max_tokens) else {
                    return Err(Unbounded::NoMaxTokens(model.to_string()));
                };
                Ok(price.worst(prompt_bound(request), u64::from(completion)))
            }
            Ask::Store { tokens, ttl_s } => Ok(price.stored(tokens, ttl_s)),
        }
    }

    /// Ends a call admitted by [`TreeBudget::reserve`]: its tokens and cost are charged (nothing
    /// when it failed) and its reservation released.
    pub(crate) async fn settle(&self, model: &str, hold: Hold, usage: Option<&Usage>) {
        self.settle_as(model, hold, Spent::Call(usage)).await;
    }

    /// Ends a store admitted by [`TreeBudget::reserve_store`]: `tokens` stored for `ttl_s`
    /// seconds are charged (0: nothing was stored) and the hold released.
    pub(crate) async fn settle_store(&self, model: &str, hold: Hold, tokens: u64, ttl_s: u64) {
        self.settle_as(model, hold, Spent::Store { tokens, ttl_s }).await;
    }

    async fn settle_as(&self, model: &str, hold: Hold, spent: Spent<'_>) {
        if let (Some(o), Some(h)) = (&self.outer, hold.outer) {
            Box::pin(o.settle_as(model, *h, spent)).await;
        }
        let (tokens, cost) = match spent {
            Spent::Call(usage) => (usage.map_or(0, Usage::total), usage.and_then(|u| self.prices.cost(model, u))),
            Spent::Store { tokens, ttl_s } => (tokens, self.prices.stored(model, tokens, ttl_s)),
        };
        let cost = match self.limits.money {
            Some(_) => cost.unwrap_or(0.0),
            None => 0.0,
        };
        self.book().settle(hold.id, hold.money, tokens, cost).await;
    }
}

/// What a refused call's error says: which cap stopped it, with the numbers the book found
/// against `limits` (`worst`: what the call would have held).
fn refusal_text(r: &Refusal, limits: Limits, worst: f64) -> String {
    match r {
        Refusal::Tokens { spent } => {
            let limit = limits.tokens.unwrap_or(0);
            format!("token budget spent: {spent} of {limit} tokens used; raise the budget to continue")
        }
        Refusal::Calls { made } => {
            let limit = limits.calls.unwrap_or(0);
            format!("call budget spent: {made} of {limit} calls made; raise the budget to continue")
        }
        Refusal::Money { spent, held } => {
            let limit = limits.money.unwrap_or(0.0);
            format!(
                "money budget: ${spent:.6} spent and ${held:.6} held by running calls of ${limit:.6}; \
                 this call may cost up to ${worst:.6}; raise the budget to continue"
            )
        }
        Refusal::Unreadable(cause) => {
            format!("budget: the tree's spending cannot be read now ({cause}), so no call is made; try again")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::{Message, Role};

    /// A memory book's steps are ready at once.
    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => unreachable!("a memory book never waits"),
        }
    }

    fn prices() -> Arc<PriceTable> {
        Arc::new(PriceTable::with_file(r#"{"fake:priced": {"prompt": 1000, "completion": 2000}}"#).unwrap())
    }

    /// A budget at the test prices with the caps `cap` sets.
    fn capped(cap: impl FnOnce(&mut Limits)) -> TreeBudget {
        let mut limits = Limits::default();
        cap(&mut limits);
        TreeBudget::new(limits, prices())
    }

    fn request(words: usize) -> ChatRequest {
        ChatRequest::new(vec![Message::new(Role::User, "x ".repeat(words))])
    }

    #[test]
    fn tokens_stop_new_calls_once_spent() {
        let b = capped(|l| l.tokens = Some(100));
        let hold = now(b.reserve("fake:priced", &request(1), None)).unwrap();
        now(b.settle(
            "fake:priced",
            hold,
            Some(&Usage { prompt_tokens: 70, completion_tokens: 40, cached_tokens: 0, cache_write_tokens: 0 }),
        ));
        assert_eq!(b.spent(), 110);
        assert_eq!(
            now(b.reserve("fake:priced", &request(1), None)).unwrap_err().to_string(),
            "LLM request failed: token budget spent: 110 of 100 tokens used; raise the budget to continue"
        );
    }

    #[test]
    fn money_is_reserved_at_the_worst_case_so_concurrent_calls_never_pass_the_cap() {
        // A call of 10 words with max_tokens 100 may cost (20 + 16 + 64) × $0.001 + 100 × $0.002
        // = $0.30; actually it costs 10 × $0.001 + 50 × $0.002 = $0.11.
        let b = capped(|l| l.money = Some(1.0));
        let r = request(10);
        let holds: Vec<Hold> = (0..3).map(|_| now(b.reserve("fake:priced", &r, Some(100))).unwrap()).collect();
        let e = now(b.reserve("fake:priced", &r, Some(100))).unwrap_err().to_string();
        assert!(e.contains("money budget") && e.contains("held by running calls"), "{e}");
        let used = Usage { prompt_tokens: 10, completion_tokens: 50, cached_tokens: 0, cache_write_tokens: 0 };
        for h in holds {
            now(b.settle("fake:priced", h, Some(&used)));
        }
        assert!((b.money_spent() - 0.33).abs() < 1e-12, "{}", b.money_spent());
        // $0.67 left: two more calls fit ($0.30 each held), a third does not.
        let more: Vec<Hold> = (0..2).map(|_| now(b.reserve("fake:priced", &r, Some(100))).unwrap()).collect();
        assert!(now(b.reserve("fake:priced", &r, Some(100))).is_err());
        for h in more {
            now(b.settle("fake:priced", h, None));
        }
        assert!((b.money_spent() - 0.33).abs() < 1e-12, "a failed call costs nothing");
        assert_eq!(b.calls(), 5);
        let unpriced = now(b.reserve("openai:unknown", &r, Some(100))).unwrap_err().to_string();
        assert!(unpriced.contains("no price"), "{unpriced}");
        let unbounded = now(b.reserve("fake:priced", &r, None)).unwrap_err().to_string();
        assert!(unbounded.contains("max_tokens"), "{unbounded}");
    }

    #[test]
    fn a_budget_within_another_is_admitted_only_when_both_admit_and_charges_both() {
        let tree = Arc::new(capped(|l| l.calls = Some(3)));
        let part = TreeBudget::within(Limits { money: Some(1.0), ..Limits::default() }, prices(), Some(tree.clone()));
        let r = request(10);
        let used = Usage { prompt_tokens: 10, completion_tokens: 50, cached_tokens: 0, cache_write_tokens: 0 };
        for _ in 0..3 {
            let h = now(part.reserve("fake:priced", &r, Some(100))).unwrap();
            now(part.settle("fake:priced", h, Some(&used)));
        }
        assert_eq!((tree.calls(), tree.spent(), part.spent()), (3, 180, 180));
        // The tree's call cap refuses the fourth: the part's reservation is undone.
        let e = now(part.reserve("fake:priced", &r, Some(100))).unwrap_err().to_string();
        assert!(e.contains("call budget spent"), "{e}");
        assert_eq!((part.calls(), part.refusals(), tree.refusals()), (3, 1, 1));
        assert!((part.money_spent() - 0.33).abs() < 1e-12);
        assert_eq!(part.totals().held, 0.0);
    }

    #[test]
    fn a_probe_makes_no_call_and_keeps_what_its_first_would_hold() {
        let p = TreeBudget::probe(prices());
        assert_eq!(p.probed(), None);
        let r = request(10);
        assert!(now(p.reserve("fake:priced", &r, Some(100))).is_err(), "a probe admits nothing");
        assert!(now(p.reserve("fake:priced", &request(500), Some(100))).is_err());
        let held = p.probed().unwrap().unwrap();
        let want = prompt_bound(&r) as f64 * 0.001 + 100.0 * 0.002;
        assert!((held - want).abs() < 1e-12, "the first call's: {held}, not {want}");
        let q = TreeBudget::probe(prices());
        let _ = now(q.reserve("openai:unknown", &r, Some(100)));
        assert_eq!(q.probed(), Some(Err(Unbounded::NoPrice("openai:unknown".into()))));
        // What is left under a budget and the one it is within: the smaller.
        let tree = Arc::new(capped(|l| l.money = Some(0.5)));
        let part = TreeBudget::within(Limits::default(), prices(), Some(tree.clone()));
        assert_eq!(part.money_left(), Some(0.5));
        let h = now(tree.reserve("fake:priced", &r, Some(100))).unwrap();
        assert!((part.money_left().unwrap() - (0.5 - want)).abs() < 1e-12, "less what is held");
        now(tree.settle("fake:priced", h, None));
        assert_eq!(TreeBudget::new(Limits::default(), prices()).money_left(), None);
    }

    #[test]
    fn a_store_is_held_at_its_most_and_charged_what_it_stored_but_is_no_call() {
        // 1,000 tokens at most, kept an hour: written at $1000 and stored at $500 per million
        // an hour = $1.50 held.
        let prices = Arc::new(
            PriceTable::with_file(r#"{"fake:priced": {"prompt": 1000, "completion": 2000, "cache_storage": 500}}"#)
                .unwrap(),
        );
        let tree =
            Arc::new(TreeBudget::new(Limits { money: Some(2.0), calls: Some(1), ..Limits::default() }, prices.clone()));
        let part = TreeBudget::within(Limits::default(), prices, Some(tree.clone()));
        let h = now(part.reserve_store("fake:priced", 1_000, 3600)).unwrap();
        assert!((tree.totals().held - 1.5).abs() < 1e-12, "{:?}", tree.totals());
        let e = now(tree.reserve_store("fake:priced", 1_000, 3600)).unwrap_err().to_string();
        assert!(e.contains("money budget"), "a second does not fit beside it: {e}");
        // No call was counted: the call cap still admits its one call.
        assert_eq!((tree.calls(), tree.refusals()), (0, 0));
        now(part.settle_store("fake:priced", h, 400, 1800));
        // 400 tokens written ($0.40) and kept half an hour ($0.10).
        assert!((tree.money_spent() - 0.5).abs() < 1e-12, "{}", tree.money_spent());
        assert_eq!((tree.spent(), tree.totals().held), (400, 0.0));
        let call = now(tree.reserve("fake:priced", &request(1), Some(10))).unwrap();
        now(tree.settle("fake:priced", call, None));
        assert_eq!(tree.calls(), 1);
        // Nothing stored costs nothing; a model without a price cannot be bounded.
        let h = now(tree.reserve_store("fake:priced", 10, 3600)).unwrap();
        now(tree.settle_store("fake:priced", h, 0, 3600));
        assert!((tree.money_spent() - 0.5).abs() < 1e-12);
        let e = now(tree.reserve_store("openai:unknown", 10, 3600)).unwrap_err().to_string();
        assert!(e.contains("no price"), "{e}");
    }

    #[test]
    fn calls_are_counted_as_they_start() {
        let b = capped(|l| l.calls = Some(2));
        let _a = now(b.reserve("mock:mock", &request(1), None)).unwrap();
        let _b = now(b.reserve("mock:mock", &request(1), None)).unwrap();
        let e = now(b.reserve("mock:mock", &request(1), None)).unwrap_err().to_string();
        assert!(e.contains("call budget spent: 2 of 2"), "{e}");
    }
}
