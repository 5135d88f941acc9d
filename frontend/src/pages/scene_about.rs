//! The tree page's "Scene" panel: what the open social tree's scene tells its agents — the prose
//! every prompt carries (the document's own where it gives some, else the scene type's) and, for
//! a custom scene, its roles with their private instructions, its phases and outcomes — as
//! the selected node's view states it (the tree's, from `GET /devui/simtree/{tree}`, until a
//! node's view has come). The branch editor's `scene_prose_set` form is where a branch changes
//! it; a new document (the New page) is where a tree's is written.

use leptos::prelude::*;
use simtree_shared::{NodeView, SceneAbout};

use super::tree_bar::tree_info_signal;
use crate::state::{Tree, ctx};

#[component]
pub(super) fn ScenePanel(tree: Tree, node_view: RwSignal<Option<NodeView>>) -> impl IntoView {
    let ctx = ctx();
    let info = tree_info_signal(tree);
    let scene = Memo::new(move |_| {
        let node = node_view.with(|v| v.as_ref().and_then(NodeView::social).and_then(|s| s.about.clone()));
        node.or_else(|| info.with(|i| i.as_ref().and_then(|i| i.scene.clone())))
    });
    let part = move |id: &'static str, label: &'static str, text: String| {
        (!text.is_empty()).then(|| {
            view! {
                <h4>{move || ctx.tr(label)}</h4>
                <pre id=id class="scene-text">{text}</pre>
            }
        })
    };
    view! {
        <Show when=move || scene.with(Option::is_some)>
            <details id="scene-about" class="panel">
                <summary>
                    {move || ctx.tr("scene.title")}
                    " "
                    <code>{move || scene.with(|s| s.as_ref().map(|s| s.kind.name()).unwrap_or_default())}</code>
                </summary>
                {move || scene.get().map(|s: SceneAbout| view! {
                    {part("scene-description", "new.proseDescription", s.description)}
                    {part("scene-rules", "new.proseRules", s.rules)}
                    {part("scene-examples", "new.proseExamples", s.examples)}
                    {(!s.roles.is_empty()).then(|| view! {
                        <h4>{move || ctx.tr("new.cRoles")}</h4>
                        <ul id="scene-roles">
                            {s.roles.into_iter().map(|r| { let name = r.name.clone(); view! {
                                <li data-role=name>
                                    <strong>{r.name}</strong>
                                    {r.moderator.then(|| view! { " " <span class="chip">"moderator"</span> })}
                                    {(!r.instructions.is_empty()).then(|| view! { <pre class="scene-text">{r.instructions}</pre> })}
                                </li>
                            }}).collect_view()}
                        </ul>
                    })}
                    {(!s.phases.is_empty()).then(|| view! {
                        <h4>{move || ctx.tr("new.cPhases")}</h4>
                        <ol id="scene-phases">
                            {s.phases.into_iter().map(|p| view! {
                                <li><strong>{p.name}</strong>{(!p.description.is_empty()).then(|| format!(" — {}", p.description))}</li>
                            }).collect_view()}
                        </ol>
                    })}
                    {(!s.outcomes.is_empty()).then(|| view! {
                        <h4>{move || ctx.tr("new.cOutcomes")}</h4>
                        <p id="scene-outcomes">{s.outcomes.join(", ")}</p>
                    })}
                })}
            </details>
        </Show>
    }
}
