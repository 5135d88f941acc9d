//! The graph toolbar's tag filter: choosing one of the tags written on the tree's nodes dims
//! every node without it (the notebook's marks, [`crate::notebook::Marks`]). Shown once any
//! node has a tag.

use leptos::prelude::*;

use crate::state::{Tree, ctx};

#[component]
pub(super) fn TagFilter(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let tags = Memo::new(move |_| tree.graph.with(|g| tree.marks.with(|m| m.tags(|n| g.nodes.contains_key(&n)))));
    // A tag no node carries any more filters nothing.
    Effect::new(move |_| {
        if let Some(t) = tree.tag.get()
            && !tags.with(|all| all.contains(&t))
        {
            tree.tag.set(None);
        }
    });
    view! {
        <Show when=move || !tags.with(Vec::is_empty)>
            <select
                id="tag-filter"
                title=move || ctx.tr("notebook.tagFilter")
                prop:value=move || tree.tag.get().unwrap_or_default()
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    tree.tag.set((!v.is_empty()).then_some(v));
                }
            >
                <option value="">{move || ctx.tr("notebook.allTags")}</option>
                <For
                    each=move || tags.get()
                    key=|t| t.clone()
                    children=move |t| {
                        let value = t.clone();
                        view! { <option value=value.clone() selected=move || tree.tag.get().as_deref() == Some(value.as_str())>{format!("#{t}")}</option> }
                    }
                />
            </select>
        </Show>
    }
}
