//! The node's feed in two tabs: its events, and its model calls (`GET …/node/{n}/calls`, the
//! "why did it say that" view). Each call shows the agent, the provider and model, tokens and
//! latency, the prompt's messages (folded: they are long), the reply as it came and the action
//! the engine read from it or why it could not; a failed run's last call is the request it
//! failed on, with the reason in place of a reply. A node that runs has no calls to show yet (the
//! server answers 409): the tab says it runs, and reads them when its run ends.

use leptos::prelude::*;
use simtree_shared::{NodeCall, NodeCalls, NodeStatus};

use crate::api::{self, ApiError};
use crate::state::{Tree, ctx};

/// Which of the feed's tabs is open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tab {
    Events,
    Calls,
}

/// What the calls tab shows.
#[derive(Clone)]
enum Shown {
    Loading,
    Running,
    Calls(NodeCalls),
    Failed(String),
}

/// The feed's tabs: `children` (the events) and the selected node's calls.
#[component]
pub fn FeedTabs(tree: Tree, children: Children) -> impl IntoView {
    let ctx = ctx();
    let tab = RwSignal::new(Tab::Events);
    let button = move |id: &'static str, which: Tab, label: &'static str| {
        view! {
            <button
                id=id
                role="tab"
                class=move || if tab.get() == which { "tab active" } else { "tab" }
                aria-selected=move || (tab.get() == which).to_string()
                on:click=move |_| tab.set(which)
            >
                {move || ctx.tr(label)}
            </button>
        }
    };
    view! {
        <div class="tabs" role="tablist">
            {button("tab-events", Tab::Events, "studio.events")}
            {button("tab-calls", Tab::Calls, "notebook.calls")}
        </div>
        <div class="tab-body" hidden=move || tab.get() != Tab::Events>{children()}</div>
        <Show when=move || tab.get() == Tab::Calls>
            <CallsView tree />
        </Show>
    }
}

/// The selected node's model calls, read again when the selection or its status changes.
#[component]
fn CallsView(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let shown = RwSignal::new(Shown::Loading);
    // The first call of the page shown (a node of a long run has thousands).
    let offset = RwSignal::new(0u64);
    let key = Memo::new(move |_| {
        let n = tree.selected.get()?;
        Some((tree.id.get()?, n, tree.graph.with(|g| g.status_of(n))))
    });
    Effect::new(move |_| {
        key.track();
        offset.set(0);
    });
    Effect::new(move |_| {
        let Some((t, n, status)) = key.get() else { return };
        let from = offset.get();
        if status == NodeStatus::Running {
            shown.set(Shown::Running);
            return;
        }
        shown.set(Shown::Loading);
        leptos::task::spawn_local(async move {
            let now = match api::node_calls(t, n, from).await {
                Ok(c) => Some(Shown::Calls(c)),
                Err(ApiError::Http(409, _)) => Some(Shown::Running),
                Err(e) => ctx.refusal(e).map(Shown::Failed),
            };
            if let Some(now) = now
                && key.get_untracked().is_some_and(|k| (k.0, k.1) == (t, n))
            {
                shown.set(now);
            }
        });
    });
    view! {
        <div id="calls" class="calls scroll">
            {move || match shown.get() {
                Shown::Loading => view! { <p class="muted">{ctx.tr("common.loading")}</p> }.into_any(),
                Shown::Running => view! { <p id="calls-running" class="note">{ctx.tr("notebook.callsRunning")}</p> }.into_any(),
                Shown::Failed(e) => view! { <p id="calls-error" class="error">{e}</p> }.into_any(),
                Shown::Calls(c) if c.calls.is_empty() => {
                    let why = c.note.unwrap_or_else(|| ctx.tr("notebook.noCalls").to_string());
                    view! { <p id="calls-none" class="muted">{why}</p> }.into_any()
                }
                Shown::Calls(c) => {
                    let pager = pager(offset, c.calls.len() as u64, c.total);
                    view! { {pager} {c.calls.into_iter().map(call_view).collect_view()} }.into_any()
                }
            }}
        </div>
    }
}

/// Calls a page holds (the server's default page).
const PAGE: u64 = 50;

/// "Calls 51–100 of 1,204" with buttons to the pages before and after, when there are more
/// calls than one page holds.
fn pager(offset: RwSignal<u64>, shown: u64, total: u64) -> Option<impl IntoView> {
    let ctx = ctx();
    let from = offset.get_untracked();
    if shown >= total && from == 0 {
        return None;
    }
    let label = ctx
        .tr("notebook.callsPage")
        .replace("{{from}}", &(from + 1).to_string())
        .replace("{{to}}", &(from + shown).to_string())
        .replace("{{total}}", &total.to_string());
    Some(view! {
        <p id="calls-pager" class="muted">
            <button id="calls-earlier" disabled=from == 0 on:click=move |_| offset.set(from.saturating_sub(PAGE))>
                "◀"
            </button>
            " " {label} " "
            <button id="calls-later" disabled=from + shown >= total on:click=move |_| offset.set(from + shown)>
                "▶"
            </button>
        </p>
    })
}

/// One call: who, by what, at what cost; the prompt folded; the reply; the action read.
fn call_view(c: NodeCall) -> impl IntoView {
    let ctx = ctx();
    let figures = format!(
        "{} · {} + {} {} · {} ms",
        c.provider,
        c.prompt_tokens,
        c.completion_tokens,
        ctx.tr("usage.tokens"),
        c.latency_ms
    );
    let flags =
        [(c.ask, "notebook.callAsk"), (c.attempt > 1, "notebook.callRetry"), (c.recorded, "notebook.callRecorded")];
    let attempt = c.attempt;
    // The provider's HTTP retries (from the recording), apart from the attempts above.
    let retries = c.retries;
    let http_retries = (retries > 0).then(|| {
        view! { <span class="chip http-retries">{move || ctx.tr("notebook.callHttpRetries").replace("{{n}}", &retries.to_string())}</span> }
    });
    let count = c.messages.len();
    let action = c.action.map(|a| {
        view! {
            <div class="action">
                <b>{move || ctx.tr("notebook.action")}</b> ": " <code>{a.name}</code>
                <ul>
                    {a.fields
                        .into_iter()
                        .map(|(k, v)| view! { <li><span class="key">{k}</span> ": " <span class="value">{v}</span></li> })
                        .collect_view()}
                </ul>
            </div>
        }
    });
    let parse_error = c.parse_error.map(|e| {
        view! { <p class="parse-error error"><b>{move || ctx.tr("notebook.parseError")}</b> ": " {e}</p> }
    });
    view! {
        <article class="call" data-index=c.index.to_string()>
            <header>
                <b>{format!("#{}", c.index)}</b>
                " "
                <span class="agent">{c.agent.unwrap_or_default()}</span>
                " "
                {flags
                    .into_iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, key)| view! { <span class="chip">{move || ctx.tr(key).replace("{{n}}", &attempt.to_string())}</span> })
                    .collect_view()}
                {http_retries}
                <span class="muted figures">{figures}</span>
            </header>
            <details class="prompt">
                <summary>{move || ctx.tr("notebook.prompt").replace("{{n}}", &count.to_string())}</summary>
                {c.messages
                    .into_iter()
                    .map(|m| view! {
                        <div class="message" data-role=m.role.clone()>
                            <span class="role">{format!("[{}]", m.role)}</span>
                            <pre>{m.content}</pre>
                        </div>
                    })
                    .collect_view()}
            </details>
            {match c.failed {
                // No reply came: the run failed on this request, and says why.
                Some(why) => view! {
                    <p class="call-failed error"><b>{move || ctx.tr("notebook.callFailed")}</b> ": " {why}</p>
                }
                .into_any(),
                None => view! {
                    <h4>{move || ctx.tr("notebook.reply")}</h4>
                    <pre class="reply">{c.reply}</pre>
                }
                .into_any(),
            }}
            {action}
            {parse_error}
        </article>
    }
}
