//! Under the graph: the selection and the tree's counts, its LLM usage and budget, and the
//! legend of edge colours.

use leptos::prelude::*;

use crate::state::{Tree, ctx};

/// `Selected: {id|-}` and `Nodes: n · Edges: m · Running: r`.
#[component]
pub fn Stats(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div id="stats" class="stats">
            <span>{move || ctx.tr("common.selected")} ": " {move || tree.selected.get().map_or("-".to_string(), |s| s.to_string())}</span>
            " · "
            <span>
                {move || ctx.tr("common.nodes")} ": " {move || tree.graph.with(|g| g.nodes.len())} " · "
                {move || ctx.tr("common.edges")} ": " {move || tree.graph.with(|g| g.edges.len())} " · "
                {move || ctx.tr("common.running")} ": " {move || tree.graph.with(|g| g.running.len())}
            </span>
        </div>
    }
}

/// LLM usage of the tree (calls, tokens, money) and its budget, refreshed after every run and
/// every answered ask; hidden while nothing was called and no budget is set (mock runs make no
/// calls).
#[component]
pub fn UsageLine(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let usage = RwSignal::new(None::<simtree_shared::UsageReply>);
    Effect::new(move |_| {
        tree.last_msg.track();
        ctx.spent.track();
        // Not before the tree is drawn: its first drawing does not wait for this reply.
        if !tree.shown.get() {
            return;
        }
        let Some(t) = tree.id.get() else { return };
        leptos::task::spawn_local(async move {
            if let Ok(v) = crate::api::usage(t).await {
                usage.set(Some(v));
            }
        });
    });
    let text = move || {
        usage.with(|u| {
            let u = u.as_ref()?;
            let n = &u.usage;
            if n.calls == 0 && u.budget.is_none() {
                return None;
            }
            let mut s = format!(
                "LLM: {} {} · {} + {} {} · {} ms",
                n.calls,
                ctx.tr("usage.calls"),
                n.prompt_tokens,
                n.completion_tokens,
                ctx.tr("usage.tokens"),
                n.latency_ms
            );
            s.push_str(&crate::ops::money_text(n, ctx.tr("usage.saved"), ctx.tr("usage.cacheable")));
            if let Some(b) = &u.budget {
                s.push_str(&format!(" · {} {}/{}", ctx.tr("usage.budget"), b.spent, b.limit));
            }
            Some(s)
        })
    };
    view! { <Show when=move || text().is_some()><div id="usage" class="stats">{text}</div></Show> }
}

/// The edge colours of the open tree's kind, named in the page's language.
#[component]
pub fn Legend(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div class="legend">
            {move || tree
                .kind
                .get()
                .legend()
                .iter()
                .map(|s| view! {
                    <span class="legend-item" data-op=s.name>
                        <span class="swatch" style=format!("background:{}", crate::ops::theme_colour(s))></span>
                        {move || crate::i18n::wire_term(ctx.lang.get(), s.name)}
                    </span>
                })
                .collect_view()}
        </div>
    }
}
