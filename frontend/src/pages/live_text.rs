//! The live reply of the selected node: while it runs, the text its model is writing now and
//! whose turn it is, as the tree socket's `delta` messages bring it (see `crate::live`). Hidden
//! when the node is not
//! running or nothing streams (providers that do not stream, `LLM_STREAM=false`, replays); the
//! reply reaches the events as always when the turn ends.

use leptos::prelude::*;

use crate::state::{Tree, ctx};

#[component]
pub(super) fn LiveReply(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let text = move || {
        let node = tree.selected.get()?;
        tree.live.with(|l| l.of(node).map(str::to_string))
    };
    view! {
        <Show when=move || text().is_some()>
            <section class="panel live-reply">
                <h3>
                    {move || ctx.tr("live.title")}
                    {move || {
                        let node = tree.selected.get()?;
                        let who = tree.live.with(|l| l.agent_of(node).map(str::to_string))?;
                        Some(view! { " · " <span id="live-agent">{who}</span> })
                    }}
                    <span class="live-dot" title=move || ctx.tr("live.hint") />
                </h3>
                <pre id="live-text" class="live-text">{move || text().unwrap_or_default()}</pre>
            </section>
        </Show>
    }
}
