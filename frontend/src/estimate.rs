//! What a run would cost, asked of the server (`?estimate=true` on a run route) while a form is
//! being filled in, and shown as one line above its button.

use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::Estimate;

use crate::api;
use crate::state::ctx;
use crate::wait::debounced;

/// How long a form must stay unchanged before its estimate is asked for (ms).
const DEBOUNCE_MS: i32 = 300;

/// The estimate of the request `request` describes (tree, run route, body), asked again each time
/// it changes, once it has stayed the same for [`DEBOUNCE_MS`]. `None` while there is nothing to
/// estimate or the server refused it (the form says why when it is sent).
pub fn debounced_estimate(
    request: impl Fn() -> Option<(u64, &'static str, Value)> + 'static,
) -> RwSignal<Option<Estimate>> {
    debounced(DEBOUNCE_MS, request, |(tree, route, body)| async move { api::estimate(tree, route, &body).await.ok() })
}

/// The estimate's words: calls, tokens and (when the model has a price) money. Calls without
/// tokens mean the server had no recorded call to take tokens from (`unknown` says so; no call
/// has no prompt), not calls that cost nothing.
pub fn estimate_text(e: &Estimate, template: &str, unknown: &str, money_word: &str) -> String {
    let template = if e.calls > 0 && e.prompt_tokens + e.completion_tokens == 0 { unknown } else { template };
    let mut text = template
        .replace("{{calls}}", &e.calls.to_string())
        .replace("{{tokens}}", &(e.prompt_tokens + e.completion_tokens).to_string())
        .replace("{{in}}", &e.prompt_tokens.to_string())
        .replace("{{out}}", &e.completion_tokens.to_string());
    if let Some(m) = e.money {
        let m = if m < 0.01 && m > 0.0 { format!("${m:.4}") } else { format!("${m:.2}") };
        text.push_str(&format!(" · {money_word} {m}"));
    }
    text
}

/// The line under a form: the estimate, its basis on hover, and under it the server's warning
/// when it has one (a money budget that cannot pay for the run it is about to start).
#[component]
pub fn EstimateLine(#[prop(into)] id: String, estimate: RwSignal<Option<Estimate>>) -> impl IntoView {
    let ctx = ctx();
    move || {
        estimate.get().map(|e| {
            let text = format!(
                "{}: {}",
                ctx.tr("estimate.label"),
                estimate_text(&e, ctx.tr("estimate.text"), ctx.tr("estimate.tokensUnknown"), ctx.tr("estimate.money"))
            );
            let warning = e.warning.clone().map(|w| view! { <p id=format!("{id}-warning") class="reason">{w}</p> });
            view! {
                <p id=id.clone() class="estimate muted" title=e.basis.clone()>{text}</p>
                {warning}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(calls: u64, prompt: u64, completion: u64) -> Estimate {
        Estimate {
            calls,
            prompt_tokens: prompt,
            completion_tokens: completion,
            money: None,
            basis: String::new(),
            warning: None,
        }
    }

    #[test]
    fn tokens_no_recorded_call_can_tell_are_unknown_not_zero() {
        let words = |e: &Estimate| {
            estimate_text(e, "{{calls}} calls · {{tokens}} tokens", "{{calls}} calls · tokens unknown", "about")
        };
        assert_eq!(words(&estimate(12, 0, 0)), "12 calls · tokens unknown");
        assert_eq!(words(&estimate(12, 900, 300)), "12 calls · 1200 tokens");
        assert_eq!(words(&estimate(0, 0, 0)), "0 calls · 0 tokens", "no calls: truly none");
    }
}
