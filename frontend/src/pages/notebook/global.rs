//! Search every tree (`GET /api/search?q=`), on Home above the tree browser: each hit names its
//! tree and node and links to the tree page with that node selected (`/simtree/T?node=N`).

use leptos::prelude::*;
use simtree_shared::SearchHit;
use wasm_bindgen::JsValue;

use super::{PAGE, kind_key, search_box, snippet_view};
use crate::api;
use crate::route::Route;
use crate::state::{Ctx, ctx};

/// Goes to the tree page of `tree` with `node` selected (a history entry, no reload).
fn open_at(ctx: Ctx, tree: u64, node: u64) {
    let route = Route::SimTree(Some(tree));
    if let Some(h) = web_sys::window().and_then(|w| w.history().ok()) {
        let _ = h.push_state_with_url(&JsValue::NULL, "", Some(&route.at_node(node)));
    }
    ctx.route.set(route);
}

#[component]
pub fn GlobalSearch() -> impl IntoView {
    let ctx = ctx();
    let query = RwSignal::new(String::new());
    // The words searched, the hits, the hits in all, and the trees' names by id.
    let found = RwSignal::new(None::<(String, Vec<SearchHit>, u64)>);
    let names = RwSignal::new(Vec::<(u64, String)>::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let search = move || {
        let q = query.get_untracked();
        busy.set(true);
        leptos::task::spawn_local(async move {
            let reply = api::search_all(&q, 0, PAGE).await;
            busy.try_set(false);
            match reply {
                Ok(r) => {
                    error.set(None);
                    if let Ok(list) = api::trees().await {
                        names.set(list.into_iter().map(|t| (t.id, t.name)).collect());
                    }
                    found.set(Some((q, r.hits, r.total)));
                }
                Err(e) => {
                    found.set(None);
                    error.set(ctx.refusal(e));
                }
            }
        });
    };
    let tree_name = move |id: u64| {
        names
            .with(|n| n.iter().find(|(t, _)| *t == id).map(|(_, name)| name.clone()))
            .map_or_else(|| format!("#{id}"), |name| format!("{name} (#{id})"))
    };
    view! {
        <section id="global-find" class="panel">
            <h3>{move || ctx.tr("notebook.findAll")}</h3>
            <div class="row">
                {search_box("global-search", "notebook.findAllHint", query, search, || {})}
                <button id="global-search-btn" disabled=move || busy.get() on:click=move |_| search()>
                    {move || ctx.tr("notebook.find")}
                </button>
                {move || found.with(|f| f.as_ref().map(|(_, _, total)| {
                    let text = if *total == 0 {
                        ctx.tr("notebook.noHits").to_string()
                    } else {
                        ctx.tr("notebook.hitsInAll").replace("{{n}}", &total.to_string())
                    };
                    view! { <span id="global-count" class="muted">{text}</span> }
                }))}
            </div>
            {move || error.get().map(|e| view! { <p id="global-search-error" class="error field-error">{e}</p> })}
            {move || found.get().filter(|f| !f.1.is_empty()).map(|(q, hits, _)| view! {
                <ol id="global-hits" class="hits">
                    {hits
                        .into_iter()
                        .filter_map(|h| {
                            let (tree, node) = (h.tree?, h.node);
                            let href = Route::SimTree(Some(tree)).at_node(node);
                            Some(view! {
                                <li class="hit" data-tree=tree.to_string() data-node=node.to_string()>
                                    <a
                                        class="hit-link"
                                        href=href
                                        on:click=move |ev: web_sys::MouseEvent| {
                                            ev.prevent_default();
                                            open_at(ctx, tree, node);
                                        }
                                    >
                                        {format!("{} · #{node}", tree_name(tree))}
                                    </a>
                                    <span class="chip">{ctx.tr(kind_key(h.kind))}</span>
                                    " "
                                    {snippet_view(&h.snippet, &q)}
                                </li>
                            })
                        })
                        .collect_view()}
                </ol>
            })}
        </section>
    }
}
