//! Ask an agent at a node (`POST …/node/{n}/ask`): the question goes to the chosen agent with
//! exactly the context it has at that node, and its answer is shown; nothing in the timeline
//! changes. Below it, every question asked at the node so far (`GET …/asks`), which the server
//! keeps with the node. A refusal (an unknown agent, a kind of simulation that cannot be asked
//! yet, a spent budget) is shown in the server's words.

use leptos::prelude::*;
use simtree_shared::Ask;

use crate::api;
use crate::state::ctx;

/// The Ask box of `agent` at `node` of `tree`.
#[component]
pub fn AskBox(tree: Signal<Option<u64>>, node: Signal<u64>, agent: Signal<String>) -> impl IntoView {
    let ctx = ctx();
    let question = RwSignal::new(String::new());
    let history = RwSignal::new(Vec::<Ask>::new());
    let answer = RwSignal::new(None::<Ask>);
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    Effect::new(move |_| {
        let (Some(t), n) = (tree.get(), node.get()) else { return };
        history.set(Vec::new());
        answer.set(None);
        error.set(None);
        leptos::task::spawn_local(async move {
            // The box may be gone meanwhile (the panel redrawn while a node runs): `try_`.
            if let Ok(asks) = api::asks(t, n).await
                && (tree.try_get_untracked(), node.try_get_untracked()) == (Some(Some(t)), Some(n))
            {
                history.try_set(asks);
            }
        });
    });
    // Another agent: the last answer was someone else's.
    Effect::new(move |_| {
        agent.track();
        answer.set(None);
        error.set(None);
    });
    let send = move || {
        let (Some(t), n, who, q) =
            (tree.get_untracked(), node.get_untracked(), agent.get_untracked(), question.get_untracked())
        else {
            return;
        };
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            let reply = api::ask(t, n, &who, &q).await;
            busy.try_set(false);
            if (tree.try_get_untracked(), node.try_get_untracked()) != (Some(Some(t)), Some(n)) {
                return;
            }
            match reply {
                Ok(a) => {
                    if !a.replayed {
                        ctx.spent.try_update(|n| *n += 1);
                    }
                    history.try_update(|h| h.push(a.clone()));
                    answer.try_set(Some(a));
                    question.try_set(String::new());
                }
                Err(e) => {
                    error.try_set(ctx.refusal(e));
                }
            }
        });
    };
    let meta = move |a: &Ask| {
        let mut s = format!(
            "{} · {} + {} {} · {} ms",
            a.provider,
            a.prompt_tokens,
            a.completion_tokens,
            ctx.tr("usage.tokens"),
            a.latency_ms
        );
        if a.replayed {
            s.push_str(&format!(" · {}", ctx.tr("notebook.replayed")));
        }
        s
    };
    view! {
        <div id="ask" class="ask">
            <h4>{move || ctx.tr("notebook.askAgent").replace("{{name}}", &agent.get())}</h4>
            <textarea
                id="ask-question"
                placeholder=move || ctx.tr("notebook.askHint")
                prop:value=move || question.get()
                on:input=move |ev| question.set(event_target_value(&ev))
            ></textarea>
            <div class="row">
                <button
                    id="ask-btn"
                    class="primary"
                    disabled=move || busy.get() || question.with(|q| q.trim().is_empty()) || agent.with(String::is_empty)
                    on:click=move |_| send()
                >
                    {move || ctx.tr(if busy.get() { "notebook.asking" } else { "notebook.ask" })}
                </button>
            </div>
            {move || error.get().map(|e| view! { <p id="ask-error" class="error field-error">{e}</p> })}
            {move || answer.get().map(|a| view! {
                <div id="ask-answer" class="answer">
                    <p class="answer-text">{a.answer.clone()}</p>
                    <p class="muted">{meta(&a)}</p>
                </div>
            })}
            <Show when=move || !history.with(Vec::is_empty)>
                <h4>{move || ctx.tr("notebook.asked")}</h4>
                <ol id="ask-history" class="asks">
                    <For
                        each=move || history.get()
                        key=|a| a.seq
                        children=move |a| view! {
                            <li class="asked" data-seq=a.seq.to_string() data-agent=a.agent.clone()>
                                <p class="q"><b>{a.agent.clone()}</b> ": " {a.question.clone()}</p>
                                <p class="a">{a.answer.clone()}</p>
                                <p class="muted">{meta(&a)}</p>
                            </li>
                        }
                    />
                </ol>
            </Show>
        </div>
    }
}
