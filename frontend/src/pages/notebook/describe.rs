//! The open tree's description (what the tree is about, for whoever opens it later): read from
//! `GET /devui/simtree/{tree}`, saved with `PATCH /devui/simtree/{tree} {"description"}`; the
//! server's refusal (too long, control characters) is shown under it.

use leptos::prelude::*;

use crate::api;
use crate::state::{Tree, ctx};

#[component]
pub fn TreeAbout(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let text = RwSignal::new(String::new());
    // What the server holds (the Save button is on while the text differs).
    let stored = RwSignal::new(None::<String>);
    let error = RwSignal::new(None::<String>);
    let saved = RwSignal::new(false);
    Effect::new(move |_| {
        let Some(t) = tree.id.get() else { return };
        stored.set(None);
        leptos::task::spawn_local(async move {
            if let Ok(info) = api::tree_info(t).await
                && tree.id.get_untracked() == Some(t)
            {
                let d = info.description.unwrap_or_default();
                text.set(d.clone());
                stored.set(Some(d));
            }
        });
    });
    // A description saved in any window: shown unless one is being typed here.
    Effect::new(move |_| {
        let Some(d) = tree.described.get() else { return };
        let Some(was) = stored.get_untracked() else { return };
        if text.get_untracked() == was {
            text.set(d.clone());
        }
        stored.set(Some(d));
    });
    let save = move || {
        let Some(t) = tree.id.get_untracked() else { return };
        let d = text.get_untracked();
        leptos::task::spawn_local(async move {
            match api::describe_tree(t, &d).await {
                Ok(info) => {
                    let d = info.description.unwrap_or_default();
                    text.set(d.clone());
                    stored.set(Some(d));
                    error.set(None);
                    saved.set(true);
                }
                Err(e) => error.set(ctx.refusal(e)),
            }
        });
    };
    let changed = move || stored.with(|s| s.as_ref().is_some_and(|s| *s != text.get()));
    view! {
        <Show when=move || tree.id.get().is_some()>
            <section id="tree-about" class="panel about">
                <h3>{move || ctx.tr("notebook.description")}</h3>
                <textarea
                    id="tree-description"
                    placeholder=move || ctx.tr("notebook.descriptionHint")
                    disabled=move || stored.with(Option::is_none)
                    prop:value=move || text.get()
                    on:input=move |ev| {
                        text.set(event_target_value(&ev));
                        saved.set(false);
                    }
                ></textarea>
                <div class="row">
                    <button id="tree-description-save" disabled=move || !changed() on:click=move |_| save()>
                        {move || ctx.tr("notebook.save")}
                    </button>
                    <Show when=move || saved.get() && !changed()>
                        <span id="tree-description-saved" class="muted">{move || ctx.tr("notebook.saved")}</span>
                    </Show>
                </div>
                {move || error.get().map(|e| view! { <p id="tree-description-error" class="error field-error">{e}</p> })}
            </section>
        </Show>
    }
}
