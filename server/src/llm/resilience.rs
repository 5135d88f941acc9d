//! Keeping provider calls polite and bounded: a per-attempt timeout, retries with exponential
//! backoff and jitter on transient failures (timeouts, connection errors, 429, 5xx) that honour a
//! server's `Retry-After`, and a [`Gate`] — a concurrency semaphore plus a request-rate limiter —
//! that every user of one provider shares, so a 64-child fan-out queues instead of stampeding.
//! (A tree's cap on tokens, calls and money is [`super::budget::TreeBudget`].)

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::LlmError;
use super::config::LlmConfig;

/// How one failed attempt should be treated by [`with_retries`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth another attempt (timeout, connection error, 429, 5xx). `retry_after` is the wait
    /// the server asked for, if any.
    Transient { reason: String, retry_after: Option<Duration> },
    /// Another attempt would fail the same way (bad request, auth, unusable body).
    Fatal(LlmError),
}

/// Retry settings, from [`LlmConfig`]'s `max_retries`, `retry_backoff_s` and `max_backoff_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RetryPolicy {
    /// Attempts after the first.
    max_retries: u32,
    /// Backoff before the first retry; doubles each retry.
    backoff: Duration,
    /// Cap on one wait. A `Retry-After` longer than this ends the call instead of blocking a
    /// run for minutes.
    max_backoff: Duration,
}

impl RetryPolicy {
    pub(crate) fn from_config(c: &LlmConfig) -> RetryPolicy {
        RetryPolicy { max_retries: c.max_retries, backoff: c.retry_backoff(), max_backoff: c.max_backoff() }
    }

    /// The wait before retry number `retry` (0-based) without a `Retry-After`: `backoff · 2^retry`
    /// capped at `max_backoff`, scaled by `jitter` ∈ [0.5, 1] so that callers that failed together
    /// do not come back together.
    pub(crate) fn backoff_for(&self, retry: u32, jitter: f64) -> Duration {
        let base =
            self.backoff.saturating_mul(1u32.checked_shl(retry.min(30)).unwrap_or(u32::MAX)).min(self.max_backoff);
        base.mul_f64(jitter.clamp(0.5, 1.0))
    }
}

/// Runs `attempt` under `gate` and `timeout`, retrying transient failures per `policy`.
///
/// Each attempt holds a concurrency permit and a rate slot only while it is on the wire; waits
/// between attempts hold neither, so a backing-off call does not block others. `label` (e.g.
/// `openai:gpt-4o-mini`) prefixes every error.
pub(crate) async fn with_retries<T, F, Fut>(
    label: &str,
    policy: &RetryPolicy,
    timeout: Duration,
    gate: &Gate,
    mut attempt: F,
) -> Result<T, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let attempts = policy.max_retries + 1;
    for n in 0..attempts {
        let outcome = {
            let _permit = gate.acquire().await;
            match tokio::time::timeout(timeout, attempt()).await {
                Ok(r) => r,
                Err(_) => {
                    Err(Failure::Transient { reason: format!("timed out after {}", secs(timeout)), retry_after: None })
                }
            }
        };
        let (reason, retry_after) = match outcome {
            Ok(v) => return Ok(v),
            Err(Failure::Fatal(e)) => return Err(prefix(label, e)),
            Err(Failure::Transient { reason, retry_after }) => (reason, retry_after),
        };
        if n + 1 == attempts {
            let tries = if attempts == 1 { "1 attempt".to_string() } else { format!("{attempts} attempts") };
            return Err(LlmError::Request(format!("{label}: {reason} (gave up after {tries})")));
        }
        let wait = match retry_after {
            Some(w) if w > policy.max_backoff => {
                return Err(LlmError::Request(format!(
                    "{label}: {reason}; the server asks to retry after {}, longer than \
                     max_backoff_s = {}",
                    secs(w),
                    policy.max_backoff.as_secs_f64()
                )));
            }
            Some(w) => w,
            None => policy.backoff_for(n, 0.5 + 0.5 * jitter()),
        };
        // `reason` is ours or the provider's error text, already scrubbed of the key.
        tracing::warn!(
            provider = label,
            attempt = n + 1,
            attempts,
            wait_ms = wait.as_millis() as u64,
            reason = %reason,
            "LLM call failed, retrying"
        );
        tokio::time::sleep(wait).await;
    }
    unreachable!("the loop returns on its last attempt")
}

fn prefix(label: &str, e: LlmError) -> LlmError {
    match e {
        LlmError::Request(m) => LlmError::Request(format!("{label}: {m}")),
        LlmError::Response(m) => LlmError::Response(format!("{label}: {m}")),
        LlmError::Refused(m) => LlmError::Refused(format!("{label}: {m}")),
    }
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// A uniform number in [0, 1): jitter needs no reproducibility, only spread between callers.
fn jitter() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ seed;
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// The wait a 429/503 response asks for: `retry-after-ms` (OpenAI's), else `Retry-After` as
/// seconds or an HTTP date (relative to `now`). Unparsable values are ignored.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = text("retry-after")?;
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A provider's shared limits: at most `max_concurrency` requests in flight and, optionally, at
/// most `requests_per_second` request starts per second (evenly spaced).
///
/// Alone, the gate holds `max_concurrency` permits. Shared with other processes (see
/// [`super::endpoints`]), it holds only the slots this process was granted on the load board,
/// resized from the board's refresher: shrunk first (never below what is in flight), grown only
/// once the grant is stored, so the processes' grants never add up to more than the limit.
#[derive(Debug)]
pub struct Gate {
    permits: Semaphore,
    limit: usize,
    rate: Option<RateLimiter>,
    /// Permits the semaphore holds in all: `limit` alone, the granted slots when shared.
    capacity: AtomicUsize,
    /// Callers waiting for a permit.
    waiting: AtomicUsize,
    /// Requests in flight at this endpoint in other processes, as the board last said.
    others: AtomicUsize,
    /// Set once the gate is shared: a caller that finds no free permit wakes the refresher.
    kick: std::sync::OnceLock<Arc<Notify>>,
}

/// Held while a request is on the wire.
#[derive(Debug)]
pub(crate) struct GatePermit<'a> {
    _permit: SemaphorePermit<'a>,
}

impl Gate {
    pub(crate) fn new(max_concurrency: usize, requests_per_second: Option<f64>) -> Gate {
        let limit = max_concurrency.max(1);
        Gate {
            permits: Semaphore::new(limit),
            limit,
            rate: requests_per_second.map(RateLimiter::new),
            capacity: AtomicUsize::new(limit),
            waiting: AtomicUsize::new(0),
            others: AtomicUsize::new(0),
            kick: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn from_config(c: &LlmConfig) -> Gate {
        Gate::new(c.max_concurrency, c.requests_per_second)
    }

    /// The concurrency limit (of the endpoint, across processes when shared).
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Requests of this process currently holding a permit.
    pub(crate) fn in_flight(&self) -> usize {
        self.capacity.load(Ordering::Acquire).saturating_sub(self.permits.available_permits())
    }

    /// Requests in flight at this endpoint from every process (this one's now, the others' as
    /// the load board last said; only this process's when not shared).
    pub(crate) fn in_flight_everywhere(&self) -> usize {
        self.in_flight() + self.others.load(Ordering::Relaxed)
    }

    /// Callers waiting for a permit.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The permits the gate holds in all (see [`Gate`]).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Acquire)
    }

    /// Makes the gate a shared one: it keeps only its permits in flight (none are free until the
    /// board grants some) and wakes `kick` when a caller finds none free. Once only.
    pub(crate) fn share(&self, kick: Arc<Notify>) {
        if self.kick.set(kick).is_ok() {
            self.shrink_to(0);
        }
    }

    /// Takes free permits away until the gate holds `target` (or as few as those in flight
    /// allow); returns what it holds now. Only the refresher resizes a gate.
    pub(crate) fn shrink_to(&self, target: usize) -> usize {
        let cap = self.capacity.load(Ordering::Acquire);
        if target < cap {
            let gone = self.permits.forget_permits(cap - target);
            self.capacity.store(cap - gone, Ordering::Release);
        }
        self.capacity.load(Ordering::Acquire)
    }

    /// Adds permits until the gate holds `target`.
    pub(crate) fn grow_to(&self, target: usize) {
        let cap = self.capacity.load(Ordering::Acquire);
        if target > cap {
            // Capacity first: `in_flight` never counts the new permits as taken.
            self.capacity.store(target, Ordering::Release);
            self.permits.add_permits(target - cap);
        }
    }

    pub(crate) fn set_others(&self, in_flight: usize) {
        self.others.store(in_flight, Ordering::Relaxed);
    }

    /// Waits for a free slot, then for the next rate slot. Permit first, so that request starts
    /// stay spaced even when many callers were queued on the semaphore.
    pub(crate) async fn acquire(&self) -> GatePermit<'_> {
        let permit = match self.permits.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let _waiting = Waiting(&self.waiting);
                if let Some(kick) = self.kick.get() {
                    kick.notify_one();
                }
                self.permits.acquire().await.expect("the gate's semaphore is never closed")
            }
        };
        if let Some(r) = &self.rate {
            r.wait().await;
        }
        GatePermit { _permit: permit }
    }
}

/// Counts a caller as waiting until it has its permit or gave up (its future was dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Spaces request starts `1 / rate` apart (a token bucket of depth one).
#[derive(Debug)]
pub(crate) struct RateLimiter {
    interval: Duration,
    next: Mutex<Option<Instant>>,
}

impl RateLimiter {
    pub(crate) fn new(requests_per_second: f64) -> RateLimiter {
        let rps =
            if requests_per_second.is_finite() && requests_per_second > 0.0 { requests_per_second } else { f64::MAX };
        RateLimiter { interval: Duration::from_secs_f64(1.0 / rps), next: Mutex::new(None) }
    }

    /// Reserves the next free start time and sleeps until it.
    pub(crate) async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    fn policy(retries: u32, backoff_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_retries: retries,
            backoff: Duration::from_millis(backoff_ms),
            max_backoff: Duration::from_secs(2),
        }
    }

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        let p = policy(5, 100);
        assert_eq!(p.backoff_for(0, 1.0), Duration::from_millis(100));
        assert_eq!(p.backoff_for(3, 1.0), Duration::from_millis(800));
        assert_eq!(p.backoff_for(10, 1.0), Duration::from_secs(2));
        assert_eq!(p.backoff_for(1, 0.5), Duration::from_millis(100));
        assert_eq!(p.backoff_for(99, 0.0), Duration::from_secs(1), "jitter floor is 0.5");
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h, now), None);
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(2)));
        h.insert("retry-after", "Sun, 06 Nov 1994 08:49:40 GMT".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(3)));
        h.insert("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO), "a past date means now");
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h, now), None);
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(250)));
    }

    #[tokio::test]
    async fn transient_failures_are_retried_then_reported_with_the_count() {
        let gate = Gate::new(1, None);
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = with_retries("x:m", &policy(2, 1), Duration::from_secs(5), &gate, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(Failure::Transient { reason: "HTTP 503 Service Unavailable".into(), retry_after: None }) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(
            r.unwrap_err().to_string(),
            "LLM request failed: x:m: HTTP 503 Service Unavailable (gave up after 3 attempts)"
        );

        let calls = AtomicU32::new(0);
        let r: Result<u8, _> = with_retries("x:m", &policy(5, 1), Duration::from_secs(5), &gate, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { if n == 0 { Err(Failure::Fatal(LlmError::Response("bad body".into()))) } else { Ok(1) } }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1, "fatal errors are not retried");
        assert_eq!(r, Err(LlmError::Response("x:m: bad body".into())));
    }

    #[tokio::test]
    async fn timeouts_are_transient_and_long_retry_after_gives_up_at_once() {
        let gate = Gate::new(1, None);
        let r: Result<(), _> =
            with_retries("x:m", &policy(1, 1), Duration::from_millis(20), &gate, std::future::pending).await;
        assert_eq!(
            r.unwrap_err().to_string(),
            "LLM request failed: x:m: timed out after 0.02s (gave up after 2 attempts)"
        );
        let start = Instant::now();
        let r: Result<(), _> = with_retries("x:m", &policy(3, 1), Duration::from_secs(1), &gate, || async {
            Err(Failure::Transient { reason: "HTTP 429".into(), retry_after: Some(Duration::from_secs(60)) })
        })
        .await;
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(r.unwrap_err().to_string().contains("asks to retry after 60s, longer than max_backoff_s = 2"),);
    }

    #[tokio::test]
    async fn the_gate_bounds_concurrency_and_spaces_starts() {
        let gate = Arc::new(Gate::new(2, Some(50.0)));
        let peak = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let (gate, peak) = (gate.clone(), peak.clone());
            tasks.spawn(async move {
                let _p = gate.acquire().await;
                peak.fetch_max(gate.in_flight() as u64, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            });
        }
        tasks.join_all().await;
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        // Six starts 20 ms apart: the last starts at least 100 ms after the first.
        assert!(start.elapsed() >= Duration::from_millis(100), "{:?}", start.elapsed());
        assert_eq!(gate.in_flight(), 0);
    }
}
