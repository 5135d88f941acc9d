//! Time in the UI's requests: the seconds a request has been out (shown beside a button that
//! waits for a slow answer), and asking the server about a form a short while after it last
//! changed, where only the latest question's answer is kept.

use std::future::Future;

use leptos::prelude::*;

use crate::api;

/// Counts `seconds` up once a second for as long as `busy` stays true (from 0).
pub fn count_seconds(busy: RwSignal<bool>, seconds: RwSignal<u32>) {
    seconds.set(0);
    leptos::task::spawn_local(async move {
        while busy.try_get_untracked() == Some(true) {
            api::sleep(1000).await;
            seconds.try_update(|s| *s += 1);
        }
    });
}

/// The answer to the question `request` makes (tracked: asked again each time it changes), once it
/// has stayed the same for `wait_ms`; an answer to a question that has changed since is dropped.
/// `None` while `request` makes none, and whenever `ask` gives none.
pub fn debounced<Q, T, Fut>(
    wait_ms: i32,
    request: impl Fn() -> Option<Q> + 'static,
    ask: impl Fn(Q) -> Fut + Copy + 'static,
) -> RwSignal<Option<T>>
where
    Q: 'static,
    T: Send + Sync + 'static,
    Fut: Future<Output = Option<T>> + 'static,
{
    let answer = RwSignal::new(None::<T>);
    let asked = StoredValue::new(0u64);
    Effect::new(move |_| {
        let question = request();
        asked.update_value(|n| *n += 1);
        let mine = asked.get_value();
        let Some(question) = question else {
            answer.set(None);
            return;
        };
        leptos::task::spawn_local(async move {
            api::sleep(wait_ms).await;
            if asked.try_get_value() != Some(mine) {
                return;
            }
            let got = ask(question).await;
            if asked.try_get_value() == Some(mine) {
                answer.try_set(got);
            }
        });
    });
    answer
}
